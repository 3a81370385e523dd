//! The sgc planner.
//!
//! - [`alloc`]: static memory sharing: offsets in one arena from tensor lifetimes.

pub mod alloc;
