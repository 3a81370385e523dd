//! `none`: the traced order, every storage freed after its last use (the baseline every
//! plan is measured against).

use super::{original, Name, Scheduled, Strategy};
use crate::context::Context;
use crate::error::PlanError;
use crate::options::{PlanOptions, RunConfig};

pub struct None;

impl Strategy for None {
    fn name(&self) -> Name {
        Name::None
    }

    fn about(&self) -> &'static str {
        "the traced order, every storage freed after its last use"
    }

    fn schedule(
        &self,
        ctx: &Context<'_>,
        _: &PlanOptions,
        _: &RunConfig<'_>,
    ) -> Result<Scheduled, PlanError> {
        Ok(Scheduled::of(original(ctx)))
    }
}
