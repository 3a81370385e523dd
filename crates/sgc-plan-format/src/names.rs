//! Command-line names of the planner's option enums (strategy, goal, budget kind, arena
//! effort): one table per enum gives its `as_str` and its `FromStr`. Declared first in
//! `lib.rs`, so every module may use it.

/// `as_str` (the name used on the command line and in plan files) and `FromStr` of an enum
/// of unit variants, from one table of names. An unknown name is refused with
/// `unknown <what> "<name>": use <choices>`.
macro_rules! names {
    ($ty:ident, $what:literal, $choices:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in the table's order.
            pub const EVERY: &'static [$ty] = &[$($ty::$variant),+];

            /// The name used on the command line and in plan files.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;

            /// The value of a command-line name.
            fn from_str(s: &str) -> Result<$ty, String> {
                [$($ty::$variant),+]
                    .into_iter()
                    .find(|x| x.as_str() == s)
                    .ok_or_else(|| format!("unknown {} {s:?}: use {}", $what, $choices))
            }
        }
    };
}
