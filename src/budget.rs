//! A budget as a user gives it: bytes (`10GiB`), or a share of what the unplanned schedule
//! has of the figure the budget bounds (`70%`), as Checkmate and MegEngine state their
//! budgets. `sgc plan --budget` and Python's `plan(budget=...)` read it the same way.

use crate::ir::{Graph, OpId};
use crate::plan::{plan, BudgetOf, PlanOptions, RunConfig, Strategy};
use crate::units::parse_size;

/// A budget before the graph is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    Bytes(u64),
    /// A share (0.7 for `70%`) of the unplanned figure that `budget_of` names.
    Share(f64),
}

impl Budget {
    /// `10GiB` or `1048576` (bytes, [`parse_size`]), or `70%`.
    pub fn parse(text: &str) -> Result<Budget, String> {
        let Some(percent) = text.trim().strip_suffix('%') else {
            return parse_size(text)
                .map(Budget::Bytes)
                .map_err(|e| format!("{e}; or a share of the unplanned figure, e.g. 70%"));
        };
        match percent.trim().parse::<f64>() {
            Ok(p) if p.is_finite() && p > 0.0 => Ok(Budget::Share(p / 100.0)),
            _ => Err(format!(
                "invalid share {text:?}: a share of the unplanned figure is a number above 0 \
                 followed by %, e.g. 70%"
            )),
        }
    }

    /// The budget in bytes for `graph` under `options` (its `budget_of` and arena
    /// settings): a share is of the unplanned schedule's device bytes (arena plus persistent,
    /// placed as `options` say), memory-model peak, or bytes kept for the backward, rounded
    /// down to a byte.
    pub fn bytes(self, graph: &Graph, options: &PlanOptions) -> Result<u64, String> {
        let share = match self {
            Budget::Bytes(b) => return Ok(b),
            Budget::Share(q) => q,
        };
        let unplanned = match options.budget_of {
            BudgetOf::Peak => graph.memory_profile().peak,
            BudgetOf::Saved => {
                let traced: Vec<(OpId, bool)> = graph.op_ids().map(|op| (op, false)).collect();
                crate::plan::plan::saved_bytes(graph, &traced)
            }
            BudgetOf::Device => {
                let none = PlanOptions {
                    strategy: Strategy::None,
                    budget: None,
                    arena: true,
                    host_link: None,
                    ..options.clone()
                };
                let p = plan(graph, &none, &RunConfig::default())
                    .map_err(|e| format!("the unplanned schedule, to take a share of: {e}"))?;
                p.arena.as_ref().map_or(0, |a| a.size) + p.summary.persistent_bytes
            }
        };
        Ok((unplanned as f64 * share).floor() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::Budget;

    #[test]
    fn bytes_or_a_share() {
        assert_eq!(Budget::parse("1KiB"), Ok(Budget::Bytes(1024)));
        assert_eq!(Budget::parse(" 70% "), Ok(Budget::Share(0.7)));
        assert_eq!(Budget::parse("150%"), Ok(Budget::Share(1.5)));
        for bad in ["0%", "-5%", "x%", "%", "inf%", "0.7"] {
            let e = Budget::parse(bad).unwrap_err();
            assert!(e.contains("70%"), "{bad}: {e}");
        }
    }
}
