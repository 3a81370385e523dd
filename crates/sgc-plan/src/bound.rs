//! What a budget bounds (`--budget-of`): device bytes, the memory model's peak, or the
//! bytes kept for the backward.

use serde::{Deserialize, Serialize};

/// What a budget bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetOf {
    /// Device bytes: the aligned arena plus the persistent bytes, what `sgc run` allocates.
    #[default]
    Device,
    /// The memory model's peak (persistent bytes plus the live bytes of the worst step,
    /// unaligned): what MegEngine's and Checkmate's budgets bound. The arena may need up
    /// to its fragmentation and alignment more.
    Peak,
    /// Bytes kept from the forward for the backward ([`crate::plan::saved_bytes`]): what
    /// `torch.compile`'s `activation_memory_budget` bounds. Only the `partition` strategy
    /// plans for it.
    Saved,
}

impl BudgetOf {
    /// The name used on the command line and in plan files.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetOf::Device => "device",
            BudgetOf::Peak => "peak",
            BudgetOf::Saved => "saved",
        }
    }

    pub(crate) fn is_device(&self) -> bool {
        *self == BudgetOf::Device
    }
}

impl std::str::FromStr for BudgetOf {
    type Err = String;

    /// What a budget bounds, by its command-line name (`device`, `peak`, `saved`).
    fn from_str(s: &str) -> Result<BudgetOf, String> {
        [BudgetOf::Device, BudgetOf::Peak, BudgetOf::Saved]
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| format!("unknown budget kind {s:?}: use device, peak or saved"))
    }
}
