//! The checked, normalised form every algorithm works on: sizes in units of the
//! alignment, and the in-place partners.

use super::{Algorithm, AllocError, Buffer, InPlace, Placement, SearchSummary, Trial};

pub(crate) struct Instance {
    pub align: u64,
    pub lower: Vec<u64>,
    pub upper: Vec<u64>,
    /// Padded size in units of `align`.
    pub w: Vec<u64>,
    /// In-place partners (both directions) of each buffer.
    pub partners: Vec<Vec<u32>>,
    /// The lower bound in units.
    pub lb: u64,
}

impl Instance {
    pub fn new(buffers: &[Buffer], align: u64, pairs: &[InPlace]) -> Result<Self, AllocError> {
        if align == 0 {
            return Err(AllocError::ZeroAlign);
        }
        let mut total = 0u64;
        for (i, b) in buffers.iter().enumerate() {
            if b.lower >= b.upper {
                return Err(AllocError::EmptyLifetime {
                    buffer: i,
                    lower: b.lower,
                    upper: b.upper,
                });
            }
            let padded = super::round_up(b.size, align).ok_or(AllocError::Overflow)?;
            total = total.checked_add(padded).ok_or(AllocError::Overflow)?;
        }
        let partners = check_pairs(buffers, pairs)?;
        let w: Vec<u64> = buffers.iter().map(|b| b.size.div_ceil(align)).collect();
        let lower: Vec<u64> = buffers.iter().map(|b| b.lower).collect();
        let upper: Vec<u64> = buffers.iter().map(|b| b.upper).collect();
        let lb = super::lower_bound(buffers, align) / align;
        Ok(Instance {
            align,
            lower,
            upper,
            w,
            partners,
            lb,
        })
    }

    pub fn len(&self) -> usize {
        self.w.len()
    }

    /// The arena (units) of a placement in units.
    pub fn arena_units(&self, offsets: &[u64]) -> u64 {
        offsets
            .iter()
            .zip(&self.w)
            .map(|(o, w)| if *w == 0 { 0 } else { o + w })
            .max()
            .unwrap_or(0)
    }

    pub fn to_placement(
        &self,
        alg: Algorithm,
        offsets: &[u64],
        trials: Vec<Trial>,
        search: SearchSummary,
    ) -> Placement {
        Placement {
            offsets: offsets.iter().map(|o| o * self.align).collect(),
            arena: self.arena_units(offsets) * self.align,
            lower_bound: self.lb * self.align,
            algorithm: alg.name().to_string(),
            trials,
            search,
            skipped: Vec::new(),
        }
    }
}

/// Checks the in-place pairs and returns each buffer's partners.
fn check_pairs(buffers: &[Buffer], pairs: &[InPlace]) -> Result<Vec<Vec<u32>>, AllocError> {
    let mut partners = vec![Vec::new(); buffers.len()];
    for p in pairs {
        let (Some(o), Some(i)) = (buffers.get(p.output), buffers.get(p.input)) else {
            return Err(AllocError::InPlaceOutOfRange {
                output: p.output,
                input: p.input,
                buffers: buffers.len(),
            });
        };
        if i.upper != o.lower + 1 || p.output == p.input {
            return Err(AllocError::InPlaceLifetimes {
                output: p.output,
                input: p.input,
                input_last: i.upper - 1,
                output_first: o.lower,
            });
        }
        partners[p.output].push(p.input as u32);
        partners[p.input].push(p.output as u32);
    }
    Ok(partners)
}
