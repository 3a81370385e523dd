//! Small typed ids and the closed vocabularies of the format (dtypes, kinds, phases).
//!
//! Ids are indices into a [`crate::Graph`]'s op and tensor tables. They are only
//! meaningful for the graph that issued them; the planner and the executor carry them in
//! plain data (plans) together with a fingerprint of that graph.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl $name {
            /// The id of the `i`-th entry.
            pub fn new(i: usize) -> Self {
                Self(u32::try_from(i).expect("graph larger than u32::MAX entries"))
            }
            /// Position in the graph's table.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
    };
}

id_type!(
    /// An op of a [`crate::Graph`], by its position in the traced order.
    OpId,
    "op#"
);
id_type!(
    /// A tensor of a [`crate::Graph`], by its position in the tensor table.
    TensorId,
    "t#"
);

/// Element type of a tensor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F64,
    F32,
    F16,
    Bf16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl DType {
    /// Every dtype of format version 1.
    pub const ALL: [DType; 10] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// The name used in graph files.
    pub fn as_str(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    /// Parses a file name of a dtype.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// What a tensor is to the training step; decides whether planning may free it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TensorKind {
    /// Produced by exactly one op; what planning manages.
    #[default]
    Activation,
    /// Handed in at each step; resident from the start until its last use.
    Input,
    /// A trainable parameter: persistent.
    Param,
    /// Optimizer or model state: persistent.
    State,
    /// A constant: persistent.
    Const,
}

impl TensorKind {
    /// Every kind of format version 1.
    pub const ALL: [TensorKind; 5] = [
        TensorKind::Activation,
        TensorKind::Input,
        TensorKind::Param,
        TensorKind::State,
        TensorKind::Const,
    ];

    /// Whether tensors of this kind count for the whole step.
    pub fn is_persistent(self) -> bool {
        matches!(
            self,
            TensorKind::Param | TensorKind::State | TensorKind::Const
        )
    }

    /// The name used in graph files.
    pub fn as_str(self) -> &'static str {
        match self {
            TensorKind::Activation => "activation",
            TensorKind::Input => "input",
            TensorKind::Param => "param",
            TensorKind::State => "state",
            TensorKind::Const => "const",
        }
    }

    /// Parses a file name of a kind.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The part of a training step an op belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Forward,
    Backward,
    Update,
}

impl Phase {
    /// Every phase of format version 1.
    pub const ALL: [Phase; 3] = [Phase::Forward, Phase::Backward, Phase::Update];

    /// The name used in graph files.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Update => "update",
        }
    }

    /// Parses a file name of a phase.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}
