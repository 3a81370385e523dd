//! `chen-sqrt`: Chen et al.'s sqrt(n) segments ([`crate::sublinear::chen`]), or the traced
//! order when they do not give a schedule.

use super::{original, Name, Scheduled, Strategy};
use crate::context::Context;
use crate::error::PlanError;
use crate::options::{PlanOptions, RunConfig};
use crate::sublinear::chen;
use crate::sublinear::evaluate::schedule;

pub struct ChenSqrt;

impl Strategy for ChenSqrt {
    fn name(&self) -> Name {
        Name::ChenSqrt
    }

    fn about(&self) -> &'static str {
        "Chen et al. (2016): a checkpoint every ~sqrt(n) forward ops"
    }

    fn schedule(
        &self,
        ctx: &Context<'_>,
        _: &PlanOptions,
        _: &RunConfig<'_>,
    ) -> Result<Scheduled, PlanError> {
        let steps = schedule(ctx, &chen::best(ctx)).unwrap_or_else(|| original(ctx));
        Ok(Scheduled::of(steps))
    }
}
