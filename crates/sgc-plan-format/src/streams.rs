//! The step's time on three streams: compute, and one copy stream per direction between
//! device and host memory.
//!
//! Offloading an activation copies it to host memory after its last forward use and back
//! before its first backward use. The copies run on their own streams while the compute
//! stream runs other ops, so what a copy costs is only the part of it that the compute
//! stream waits for. This module computes that part by replaying the step as events:
//!
//! - the compute stream runs the steps in order, each as soon as the previous one ended
//!   and every copy it waits for (`before`) has ended;
//! - each copy stream runs its copies in the order given (a CUDA stream is a queue), each
//!   as soon as the previous copy on its stream ended, the step it waits for (`after`) ended,
//!   and the copy it depends on (`follows`: a prefetch follows its offload) ended;
//! - a copy takes the link's latency plus its bytes over the link's bandwidth in its
//!   direction ([`HostLink`]).
//!
//! The replay visits the steps in order and, before each, runs every copy stream forward
//! to the copies that step waits for. A copy that waits for a later step while a step
//! before it waits for a copy behind it in its queue can never run: [`simulate`] refuses
//! such an order ([`StreamError::Deadlock`]) rather than report a time.
//!
//! The result ([`Timeline`]) has every step's and copy's start and end, the step time, and
//! the exposed transfer time: the step time minus the compute time, what the copies added.

use thiserror::Error;

/// The host link of a device: bandwidth per direction and the fixed cost of one copy.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLink {
    /// Device to host, GB/s (1e9 bytes per second).
    #[serde(deserialize_with = "rate")]
    pub to_host_gbps: f64,
    /// Host to device, GB/s.
    #[serde(deserialize_with = "rate")]
    pub to_device_gbps: f64,
    /// Fixed cost of one copy (launch and first byte), microseconds.
    #[serde(deserialize_with = "latency")]
    pub latency_us: f64,
}

/// Host links of the named device profiles, from published measurements of pinned copies:
/// (profile, GB/s to host, GB/s to device, µs per copy). H100: PCIe Gen5 x16, 35 to 53 GB/s
/// measured per direction, taken at the middle; A100: PCIe Gen4 x16, about 25 GB/s. The
/// latency is a copy's launch and setup on the stream, a few microseconds measured.
const NAMED: [(&str, f64, f64, f64); 2] = [("h100", 44.0, 44.0, 10.0), ("a100", 25.0, 25.0, 10.0)];

/// A stored bandwidth: finite and > 0 GB/s.
fn rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let x = <f64 as serde::Deserialize>::deserialize(d)?;
    HostLink::new(x, x, 0.0)
        .map(|_| x)
        .map_err(serde::de::Error::custom)
}

/// A stored latency: finite and >= 0 µs.
fn latency<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let x = <f64 as serde::Deserialize>::deserialize(d)?;
    HostLink::new(1.0, 1.0, x)
        .map(|_| x)
        .map_err(serde::de::Error::custom)
}

impl HostLink {
    /// A link from its rates: GB/s to host and to device (finite, > 0) and µs per copy
    /// (finite, >= 0).
    pub fn new(
        to_host_gbps: f64,
        to_device_gbps: f64,
        latency_us: f64,
    ) -> Result<HostLink, String> {
        let rate = |x: f64| x.is_finite() && x > 0.0;
        if !rate(to_host_gbps) || !rate(to_device_gbps) {
            return Err(format!(
                "host link bandwidths must be finite and > 0 GB/s, got {to_host_gbps} and {to_device_gbps}"
            ));
        }
        if !(latency_us.is_finite() && latency_us >= 0.0) {
            return Err(format!(
                "host link latency must be finite and >= 0 µs, got {latency_us}"
            ));
        }
        Ok(HostLink {
            to_host_gbps,
            to_device_gbps,
            latency_us,
        })
    }

    /// A link written `TO_HOST,TO_DEVICE[,LATENCY_US]` (GB/s, GB/s, µs; latency 10 µs
    /// when left out) or as a profile name with a known link (`h100`, `a100`).
    pub fn parse(text: &str) -> Result<HostLink, String> {
        if let Some(l) = HostLink::named(text.trim()) {
            return Ok(l);
        }
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let num = |s: &str| {
            s.parse::<f64>()
                .map_err(|_| format!("`{s}` in host link `{text}` is not a number"))
        };
        match parts.as_slice() {
            [h, d] => HostLink::new(num(h)?, num(d)?, 10.0),
            [h, d, l] => HostLink::new(num(h)?, num(d)?, num(l)?),
            _ => Err(format!(
                "host link `{text}`: write TO_HOST_GBPS,TO_DEVICE_GBPS[,LATENCY_US] (e.g. 44,44,10) or a profile name ({})",
                NAMED.iter().map(|n| n.0).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// The host link of a named device profile (`h100`, `a100`), if this table has it.
    pub fn named(profile: &str) -> Option<HostLink> {
        let lower = profile.to_ascii_lowercase();
        NAMED
            .iter()
            .find(|n| n.0 == lower)
            .map(|&(_, to_host, to_device, latency)| HostLink {
                to_host_gbps: to_host,
                to_device_gbps: to_device,
                latency_us: latency,
            })
    }

    /// The time of one copy of `bytes` in direction `dir`, microseconds.
    pub fn copy_us(&self, dir: Direction, bytes: u64) -> f64 {
        let gbps = match dir {
            Direction::ToHost => self.to_host_gbps,
            Direction::ToDevice => self.to_device_gbps,
        };
        self.latency_us + bytes as f64 / (gbps * 1e3)
    }
}

/// Which way a copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Device to host (an offload).
    ToHost,
    /// Host to device (a prefetch).
    ToDevice,
}

/// One copy between device and host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Transfer {
    pub dir: Direction,
    pub bytes: u64,
    /// The copy starts after this step (by index) ended: the step that last uses the
    /// source on the device, or that frees room for the destination.
    pub after: Option<usize>,
    /// The copy ends before this step starts: the step that first reads what it brings.
    pub before: Option<usize>,
    /// The copy starts after this copy (by index) ended: a prefetch after its offload.
    pub follows: Option<usize>,
}

/// When one step or copy ran, microseconds from the start of the step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    pub start: f64,
    pub end: f64,
}

/// The replay of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Each compute step's span, in order.
    pub steps: Vec<Span>,
    /// Each copy's span, in the order given.
    pub copies: Vec<Span>,
    /// When the last step or copy ended.
    pub total_us: f64,
    /// The sum of the steps' durations: the step time without copies.
    pub compute_us: f64,
}

impl Timeline {
    /// What the copies added to the step: its time minus its compute time.
    pub fn exposed_us(&self) -> f64 {
        self.total_us - self.compute_us
    }

    /// The time the compute stream waited before step `i`.
    pub fn stall_before(&self, i: usize) -> f64 {
        let ready = if i == 0 { 0.0 } else { self.steps[i - 1].end };
        self.steps[i].start - ready
    }
}

/// Why a set of copies cannot be replayed.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum StreamError {
    #[error("copy {copy} names step {step}, but the step has only {steps} steps")]
    NoSuchStep {
        copy: usize,
        step: usize,
        steps: usize,
    },
    #[error("copy {copy} follows copy {follows}, which is not an earlier copy")]
    BadFollows { copy: usize, follows: usize },
    #[error("copy {copy} must end before step {before} but may start only after step {after}")]
    Backwards {
        copy: usize,
        after: usize,
        before: usize,
    },
    #[error("step {step} waits for copy {copy}, which is queued behind copy {blocked} that waits for step {waits_for}: reorder the {dir:?} stream")]
    Deadlock {
        step: usize,
        copy: usize,
        blocked: usize,
        waits_for: usize,
        dir: Direction,
    },
    #[error("step {step} takes {us} µs: a duration must be a finite number >= 0")]
    BadDuration { step: usize, us: f64 },
}

/// Replays `steps` (each compute step's duration, microseconds) with `copies` on `link`:
/// see the [module docs](self).
pub fn simulate(
    steps: &[f64],
    copies: &[Transfer],
    link: &HostLink,
) -> Result<Timeline, StreamError> {
    check(steps, copies)?;
    let mut r = Replay {
        copies,
        link,
        step_spans: Vec::with_capacity(steps.len()),
        copy_spans: vec![None; copies.len()],
        queues: [Direction::ToHost, Direction::ToDevice].map(|d| Queue::new(copies, d)),
    };
    let mut waits: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (c, copy) in copies.iter().enumerate() {
        if let Some(b) = copy.before {
            waits[b].push(c);
        }
    }
    for (i, &us) in steps.iter().enumerate() {
        let mut start = r.step_spans.last().map_or(0.0, |s: &Span| s.end);
        for &c in &waits[i] {
            start = start.max(r.run_until(c, i)?.end);
        }
        r.step_spans.push(Span {
            start,
            end: start + us,
        });
    }
    for c in 0..copies.len() {
        r.run_until(c, steps.len())?;
    }
    let copy_spans: Vec<Span> = r.copy_spans.into_iter().flatten().collect();
    let last_step = r.step_spans.last().map_or(0.0, |s| s.end);
    let total_us = copy_spans.iter().map(|s| s.end).fold(last_step, f64::max);
    Ok(Timeline {
        steps: r.step_spans,
        copies: copy_spans,
        total_us,
        compute_us: steps.iter().sum(),
    })
}

/// The copies of one direction, in queue order, and how far the stream has run.
struct Queue {
    order: Vec<usize>,
    next: usize,
    free_at: f64,
}

impl Queue {
    fn new(copies: &[Transfer], dir: Direction) -> Queue {
        Queue {
            order: (0..copies.len())
                .filter(|&c| copies[c].dir == dir)
                .collect(),
            next: 0,
            free_at: 0.0,
        }
    }
}

struct Replay<'a> {
    copies: &'a [Transfer],
    link: &'a HostLink,
    step_spans: Vec<Span>,
    copy_spans: Vec<Option<Span>>,
    queues: [Queue; 2],
}

impl Replay<'_> {
    /// Runs copy `c`'s stream up to and including `c`, when only steps before `step` have
    /// run (`step` = the number of steps: all have).
    fn run_until(&mut self, c: usize, step: usize) -> Result<Span, StreamError> {
        if let Some(span) = self.copy_spans[c] {
            return Ok(span);
        }
        let dir = self.copies[c].dir;
        let q = match dir {
            Direction::ToHost => 0,
            Direction::ToDevice => 1,
        };
        loop {
            let next = self.queues[q].order[self.queues[q].next];
            let copy = &self.copies[next];
            if let Some(a) = copy.after.filter(|&a| a >= step) {
                return Err(StreamError::Deadlock {
                    step,
                    copy: c,
                    blocked: next,
                    waits_for: a,
                    dir,
                });
            }
            let mut start = self.queues[q].free_at;
            if let Some(a) = copy.after {
                start = start.max(self.step_spans[a].end);
            }
            if let Some(f) = copy.follows {
                start = start.max(self.run_until(f, step)?.end);
            }
            let end = start + self.link.copy_us(dir, copy.bytes);
            let span = Span { start, end };
            self.copy_spans[next] = Some(span);
            self.queues[q].free_at = end;
            self.queues[q].next += 1;
            if next == c {
                return Ok(span);
            }
        }
    }
}

/// The copies' references name existing, earlier things.
fn check(steps: &[f64], copies: &[Transfer]) -> Result<(), StreamError> {
    for (i, &us) in steps.iter().enumerate() {
        if !(us.is_finite() && us >= 0.0) {
            return Err(StreamError::BadDuration { step: i, us });
        }
    }
    for (c, copy) in copies.iter().enumerate() {
        for step in copy.after.into_iter().chain(copy.before) {
            if step >= steps.len() {
                let steps = steps.len();
                return Err(StreamError::NoSuchStep {
                    copy: c,
                    step,
                    steps,
                });
            }
        }
        if let (Some(after), Some(before)) = (copy.after, copy.before) {
            if after >= before {
                return Err(StreamError::Backwards {
                    copy: c,
                    after,
                    before,
                });
            }
        }
        if let Some(f) = copy.follows.filter(|&f| f >= c) {
            return Err(StreamError::BadFollows {
                copy: c,
                follows: f,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 GB/s each way (1 byte = 1e-3 µs) and no latency, so times are easy to read.
    const LINK: HostLink = HostLink {
        to_host_gbps: 1.0,
        to_device_gbps: 1.0,
        latency_us: 0.0,
    };

    fn copy(dir: Direction, bytes: u64, after: Option<usize>, before: Option<usize>) -> Transfer {
        Transfer {
            dir,
            bytes,
            after,
            before,
            follows: None,
        }
    }

    #[test]
    fn a_stored_link_with_a_bad_rate_is_refused() {
        let read = |t: &str| serde_json::from_str::<HostLink>(t);
        let good = read(r#"{"to_host_gbps": 44, "to_device_gbps": 40, "latency_us": 10}"#);
        assert_eq!(good.unwrap(), HostLink::new(44.0, 40.0, 10.0).unwrap());
        for bad in [
            r#"{"to_host_gbps": 0, "to_device_gbps": 40, "latency_us": 10}"#,
            r#"{"to_host_gbps": 44, "to_device_gbps": -1, "latency_us": 10}"#,
            r#"{"to_host_gbps": 44, "to_device_gbps": 40, "latency_us": -1}"#,
        ] {
            let e = read(bad).expect_err(bad).to_string();
            assert!(e.contains("host link"), "{bad}: {e}");
        }
        assert_eq!(
            HostLink::parse("h100"),
            Ok(HostLink::named("h100").unwrap())
        );
        assert_eq!(HostLink::parse("20,25"), HostLink::new(20.0, 25.0, 10.0));
        assert!(HostLink::parse("fast")
            .unwrap_err()
            .contains("TO_HOST_GBPS"));
    }

    #[test]
    fn no_copies_is_the_sum_of_the_steps() {
        let t = simulate(&[1.0, 2.0, 3.0], &[], &LINK).unwrap();
        assert_eq!(t.total_us, 6.0);
        assert_eq!(t.exposed_us(), 0.0);
        assert_eq!(
            t.steps[2],
            Span {
                start: 3.0,
                end: 6.0
            }
        );
    }

    #[test]
    fn a_copy_hidden_under_compute_costs_nothing() {
        // Offload after step 0 (2 µs of copy) while steps 1 and 2 take 10 µs; prefetch
        // before step 4, issued after step 2.
        let mut back = copy(Direction::ToDevice, 2000, Some(2), Some(4));
        back.follows = Some(0);
        let copies = [copy(Direction::ToHost, 2000, Some(0), None), back];
        let t = simulate(&[1.0, 5.0, 5.0, 5.0, 1.0], &copies, &LINK).unwrap();
        assert_eq!(t.exposed_us(), 0.0);
        assert_eq!(
            t.copies[0],
            Span {
                start: 1.0,
                end: 3.0
            }
        );
        assert_eq!(
            t.copies[1],
            Span {
                start: 11.0,
                end: 13.0
            }
        );
    }

    #[test]
    fn a_late_prefetch_stalls_the_step_that_reads_it() {
        // The prefetch is issued after step 1 and takes 10 µs; step 2 waits for it.
        let copies = [copy(Direction::ToDevice, 10_000, Some(1), Some(2))];
        let t = simulate(&[1.0, 1.0, 1.0], &copies, &LINK).unwrap();
        assert_eq!(t.steps[2].start, 12.0);
        assert_eq!(t.stall_before(2), 10.0);
        assert_eq!(t.exposed_us(), 10.0);
    }

    #[test]
    fn copies_of_one_direction_queue_and_directions_overlap() {
        let copies = [
            copy(Direction::ToHost, 4000, Some(0), None),
            copy(Direction::ToHost, 4000, Some(0), None),
            copy(Direction::ToDevice, 4000, Some(0), None),
        ];
        let t = simulate(&[1.0, 1.0], &copies, &LINK).unwrap();
        assert_eq!(
            t.copies[1],
            Span {
                start: 5.0,
                end: 9.0
            }
        );
        assert_eq!(
            t.copies[2],
            Span {
                start: 1.0,
                end: 5.0
            }
        );
        // The copies outlast the compute: the step ends when the last copy does.
        assert_eq!(t.total_us, 9.0);
    }

    #[test]
    fn a_prefetch_follows_its_offload() {
        let mut back = copy(Direction::ToDevice, 1000, None, Some(2));
        back.follows = Some(0);
        let copies = [copy(Direction::ToHost, 5000, Some(0), None), back];
        let t = simulate(&[1.0, 1.0, 1.0], &copies, &LINK).unwrap();
        assert_eq!(t.copies[1].start, 6.0);
        assert_eq!(t.steps[2].start, 7.0);
    }

    #[test]
    fn named_links_are_the_profiles_with_published_figures() {
        let h100 = HostLink::named("H100").unwrap();
        // 64 MiB at 44 GB/s: about 1.5 ms plus the latency.
        let us = h100.copy_us(Direction::ToHost, 64 << 20);
        assert!((us - (10.0 + 67_108_864.0 / 44_000.0)).abs() < 1e-9, "{us}");
        assert!(HostLink::named("a100").is_some());
        assert!(HostLink::named("t4").is_none());
    }

    #[test]
    fn latency_counts_once_per_copy() {
        let link = HostLink {
            latency_us: 3.0,
            ..LINK
        };
        assert_eq!(link.copy_us(Direction::ToHost, 2000), 5.0);
    }

    #[test]
    fn an_order_that_can_never_run_is_refused() {
        // The device-bound stream queues a copy that waits for step 2 ahead of one that
        // step 1 needs.
        let copies = [
            copy(Direction::ToDevice, 1, Some(2), None),
            copy(Direction::ToDevice, 1, Some(0), Some(1)),
        ];
        let err = simulate(&[1.0, 1.0, 1.0], &copies, &LINK).unwrap_err();
        assert!(
            matches!(
                err,
                StreamError::Deadlock {
                    step: 1,
                    copy: 1,
                    blocked: 0,
                    waits_for: 2,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn bad_references_are_refused() {
        let bad = |copies: &[Transfer]| simulate(&[1.0, 1.0], copies, &LINK).unwrap_err();
        assert!(matches!(
            bad(&[copy(Direction::ToHost, 1, Some(2), None)]),
            StreamError::NoSuchStep { .. }
        ));
        assert!(matches!(
            bad(&[copy(Direction::ToHost, 1, Some(1), Some(1))]),
            StreamError::Backwards { .. }
        ));
        let mut c = copy(Direction::ToHost, 1, None, None);
        c.follows = Some(0);
        assert!(matches!(bad(&[c]), StreamError::BadFollows { .. }));
        let err = simulate(&[f64::NAN], &[], &LINK).unwrap_err();
        assert!(matches!(err, StreamError::BadDuration { step: 0, .. }));
    }
}
