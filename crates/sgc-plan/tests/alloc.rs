//! Static memory sharing: the minimalloc / SOMAS instances, malformed CSV, in-place pairs,
//! random instances (proptest) and determinism. Every placement goes through `validate`.

use proptest::prelude::*;
use sgc_plan::alloc::{
    allocate, allocate_with, csv, lower_bound, validate, validate_in_place, Algorithm, AllocError,
    AllocOptions, AllocViolation, Buffer, Effort, InPlace, Placement, SearchStop, SearchSummary,
};
use std::path::PathBuf;

fn dsa(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../benches/data/dsa")
        .join(file)
}

const FILES: [&str; 6] = [
    "input.12.csv",
    "A.1048576.csv",
    "C.1048576.csv",
    "E.1048576.csv",
    "somas_resnet50.csv",
    "somas_tiny_bert.csv",
];

/// A small search budget: debug builds are slow, and the point here is validity.
fn small(align: u64) -> AllocOptions {
    AllocOptions {
        align,
        effort: Effort {
            search_work: 200_000,
            search_max_buffers: 400,
            time_cap: None,
            ..Effort::DEFAULT
        },
        in_place: Vec::new(),
    }
}

fn b(lower: u64, upper: u64, size: u64) -> Buffer {
    Buffer { lower, upper, size }
}

/// `small(align)` with `search_work` steps for the branch and bound, on up to 100 buffers.
fn searching(align: u64, search_work: u64) -> AllocOptions {
    AllocOptions {
        effort: Effort {
            search_work,
            search_max_buffers: 100,
            time_cap: None,
            ..Effort::DEFAULT
        },
        ..small(align)
    }
}

#[test]
fn every_dsa_instance_allocates_validly_and_never_below_the_bound() {
    for file in FILES {
        let rows = csv::read(dsa(file)).unwrap();
        let buffers = csv::buffers(&rows);
        for align in [1, 256] {
            let p = allocate(&buffers, &small(align)).unwrap();
            validate(&buffers, &p, align).unwrap_or_else(|v| panic!("{file}: {:?}", &v[..1]));
            assert_eq!(p.lower_bound, lower_bound(&buffers, align), "{file}");
            assert!(p.arena >= p.lower_bound, "{file}: {} < bound", p.arena);
            let best_trial = p.trials.iter().map(|t| t.arena).min().unwrap();
            assert_eq!(p.arena, best_trial, "{file}: the best trial is kept");
        }
    }
}

#[test]
fn dsa_lower_bounds_match_the_readme() {
    let want = [12, 1048576, 1039360, 1048576, 1515472556, 758936113];
    for (file, want) in FILES.iter().zip(want) {
        let buffers = csv::buffers(&csv::read(dsa(file)).unwrap());
        assert_eq!(lower_bound(&buffers, 1), want, "{file}");
    }
}

#[test]
fn input_12_reaches_12() {
    let buffers = csv::buffers(&csv::read(dsa("input.12.csv")).unwrap());
    let p = allocate(&buffers, &AllocOptions::default()).unwrap();
    validate(&buffers, &p, 1).unwrap();
    assert_eq!(p.arena, 12);
}

#[test]
fn the_same_input_gives_the_same_placement() {
    let buffers = csv::buffers(&csv::read(dsa("C.1048576.csv")).unwrap());
    let a = allocate(&buffers, &small(1)).unwrap();
    let b = allocate(&buffers, &small(1)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn alignment_pads_sizes_and_aligns_offsets() {
    let buffers = [b(0, 2, 1), b(1, 3, 300), b(0, 3, 0)];
    let p = allocate(&buffers, &small(256)).unwrap();
    validate(&buffers, &p, 256).unwrap();
    assert_eq!(lower_bound(&buffers, 256), 256 + 512);
    assert_eq!(p.arena, 768);
    assert!(p.offsets.iter().all(|o| o % 256 == 0));
}

#[test]
fn validate_reports_overlaps_misalignment_and_a_small_arena() {
    let buffers = [b(0, 4, 8), b(2, 6, 8), b(6, 8, 8)];
    let bad = Placement {
        offsets: vec![0, 4, 2],
        arena: 10,
        lower_bound: 16,
        algorithm: "hand".into(),
        trials: Vec::new(),
        search: SearchSummary::off(16),
        skipped: Vec::new(),
    };
    let v = validate(&buffers, &bad, 2).unwrap_err();
    assert!(v.contains(&AllocViolation::Overlap {
        a: 0,
        b: 1,
        step: 2
    }));
    assert!(v.contains(&AllocViolation::OutsideArena {
        buffer: 1,
        end: 12,
        arena: 10
    }));
    assert!(!v
        .iter()
        .any(|x| matches!(x, AllocViolation::Overlap { b: 2, .. })));
    let v = validate(&buffers, &bad, 4).unwrap_err();
    assert!(v.contains(&AllocViolation::Misaligned {
        buffer: 2,
        offset: 2,
        align: 4
    }));
}

#[test]
fn in_place_pairs_share_an_address_only_when_given() {
    // a dies at step 1, where b is born: b may take a's address.
    let buffers = [b(0, 2, 8), b(1, 3, 8), b(0, 3, 4)];
    let pair = InPlace {
        output: 1,
        input: 0,
    };
    let options = AllocOptions {
        in_place: vec![pair],
        ..small(1)
    };
    let p = allocate(&buffers, &options).unwrap();
    validate_in_place(&buffers, &p, 1, &[pair]).unwrap();
    assert_eq!(p.offsets[0], p.offsets[1]);
    assert_eq!(p.arena, 12, "shared: below the no-sharing bound of 20");
    let v = validate(&buffers, &p, 1).unwrap_err();
    assert_eq!(
        v,
        vec![AllocViolation::Overlap {
            a: 0,
            b: 1,
            step: 1
        }]
    );
}

#[test]
fn bad_inputs_are_typed_errors() {
    let err = allocate(&[b(3, 3, 1)], &small(1)).unwrap_err();
    assert_eq!(
        err,
        AllocError::EmptyLifetime {
            buffer: 0,
            lower: 3,
            upper: 3
        }
    );
    assert_eq!(allocate(&[], &small(0)).unwrap_err(), AllocError::ZeroAlign);
    let far = AllocOptions {
        in_place: vec![InPlace {
            output: 0,
            input: 1,
        }],
        ..small(1)
    };
    let err = allocate(&[b(0, 2, 1), b(0, 5, 1)], &far).unwrap_err();
    assert!(matches!(err, AllocError::InPlaceLifetimes { .. }), "{err}");
    assert_eq!(
        allocate(&[b(0, 1, u64::MAX), b(0, 1, 1)], &small(1)).unwrap_err(),
        AllocError::Overflow
    );
    assert!(allocate(&[], &small(1)).unwrap().offsets.is_empty());
}

/// The minimalloc "challenging" instances among the dsa files: `X.<capacity>.csv`.
fn challenging() -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dsa(""))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let mut parts = name.split('.');
            let (id, cap, ext) = (parts.next()?, parts.next()?, parts.next()?);
            let letter = id.len() == 1 && id.chars().all(|c| c.is_ascii_uppercase());
            (letter && ext == "csv" && parts.next().is_none())
                .then(|| Some((name.clone(), cap.parse().ok()?)))?
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_challenging_instance_fits_its_capacity_with_the_default_effort() {
    let files = challenging();
    assert!(
        files.len() >= 3,
        "A, C and E are in the dsa folder: {files:?}"
    );
    for (file, capacity) in files {
        let buffers = csv::buffers(&csv::read(dsa(&file)).unwrap());
        let p = allocate(&buffers, &AllocOptions::default()).unwrap();
        validate(&buffers, &p, 1).unwrap_or_else(|v| panic!("{file}: {:?}", &v[..1]));
        assert!(
            p.arena <= capacity,
            "{file}: arena {} > {capacity}",
            p.arena
        );
        let greedy = allocate_with(&buffers, &AllocOptions::default(), Algorithm::GreedySize);
        assert!(
            greedy.unwrap().arena > capacity,
            "{file}: the search did the work"
        );
        assert_eq!(p.algorithm, "search", "{file}");
        // A, C and E are packed at their lower bound, which proves the arena optimal.
        assert_eq!(p.arena, p.lower_bound, "{file}");
        assert_eq!(p.search.stop, SearchStop::Optimal, "{file}");
        assert_eq!(p.search.proven_bound, p.arena, "{file}");
    }
}

#[test]
fn somas_lists_reach_their_lower_bound() {
    for file in ["somas_resnet50.csv", "somas_tiny_bert.csv"] {
        let buffers = csv::buffers(&csv::read(dsa(file)).unwrap());
        let p = allocate(&buffers, &AllocOptions::default()).unwrap();
        validate(&buffers, &p, 1).unwrap();
        assert!(
            p.arena as f64 <= 1.01 * p.lower_bound as f64,
            "{file}: {}",
            p.arena
        );
    }
}

#[test]
fn the_search_reports_why_it_did_not_run() {
    let buffers = csv::buffers(&csv::read(dsa("C.1048576.csv")).unwrap());
    let fast = allocate(&buffers, &small(1).with_effort(Effort::FAST)).unwrap();
    assert_eq!(fast.search.stop, SearchStop::Off);
    let few = Effort {
        search_max_buffers: 10,
        ..Effort::DEFAULT
    };
    let p = allocate(&buffers, &small(1).with_effort(few)).unwrap();
    assert_eq!(p.search.stop, SearchStop::TooLarge);
    assert_eq!(p.search.proven_bound, p.lower_bound);
    let easy = [b(0, 2, 4), b(1, 3, 4)];
    let p = allocate(&easy, &AllocOptions::default()).unwrap();
    assert_eq!(p.search.stop, SearchStop::AtLowerBound);
}

#[test]
fn a_spent_budget_is_reported_with_what_is_ruled_out() {
    // E needs far more than this: the search stops on its budget, with the arena above
    // the bound and the bound not ruled out.
    let buffers = csv::buffers(&csv::read(dsa("E.1048576.csv")).unwrap());
    let tiny = Effort {
        search_work: 100_000,
        ..Effort::DEFAULT
    };
    let p = allocate(&buffers, &small(1).with_effort(tiny)).unwrap();
    validate(&buffers, &p, 1).unwrap();
    assert_eq!(p.search.stop, SearchStop::WorkBudget);
    assert!(p.search.work <= p.search.budget);
    assert!(p.arena > p.lower_bound);
    assert_eq!(p.search.proven_bound, p.lower_bound);
}

#[test]
fn a_list_too_large_for_greedy_says_so_and_stays_valid() {
    // 70,000 nested lifetimes (saved activations of a long training step): every pair
    // overlaps, so greedy by size would take ~2.4e9 steps; the sweep places them.
    let n = 70_000u64;
    let buffers: Vec<Buffer> = (0..n).map(|l| b(l, 2 * n - l, 1 + l % 7)).collect();
    let p = allocate(&buffers, &AllocOptions::default()).unwrap();
    validate(&buffers, &p, 1).unwrap();
    assert_eq!(
        p.skipped.len(),
        1,
        "the sweep reaches the bound: no reordering"
    );
    assert_eq!(p.skipped[0].algorithm, "greedy-size");
    assert!(p.skipped[0].reason.contains("time-overlapping pairs"));
    assert_eq!(
        p.arena, p.lower_bound,
        "nested lifetimes stack without gaps"
    );
    assert_eq!(p.search.stop, SearchStop::AtLowerBound);
    let err = allocate_with(&buffers, &AllocOptions::default(), Algorithm::GreedySize);
    assert!(matches!(err, Err(AllocError::Skipped { .. })));
}

/// Cuts the rectangle `[0, width) x [0, steps)` (address x time) into `pieces` rectangles
/// by repeated guillotine cuts; each piece is a buffer. The pieces tile the rectangle, so
/// the optimum arena is exactly `width` (and so is the lower bound).
fn perfect_packing(
    width: u64,
    steps: u64,
    pieces: usize,
    cuts: &[(bool, u64, usize)],
) -> Vec<Buffer> {
    // (offset, size, lower, upper)
    let mut rects = vec![(0u64, width, 0u64, steps)];
    for &(by_time, at, which) in cuts {
        if rects.len() >= pieces {
            break;
        }
        let k = which % rects.len();
        let (o, w, l, u) = rects[k];
        if by_time && u - l >= 2 {
            let t = l + 1 + at % (u - l - 1);
            rects[k] = (o, w, l, t);
            rects.push((o, w, t, u));
        } else if !by_time && w >= 2 {
            let c = 1 + at % (w - 1);
            rects[k] = (o, c, l, u);
            rects.push((o + c, w - c, l, u));
        }
    }
    rects.into_iter().map(|(_, w, l, u)| b(l, u, w)).collect()
}

fn buffers_strategy() -> impl Strategy<Value = Vec<Buffer>> {
    prop::collection::vec((0u64..20, 1u64..8, 0u64..50), 0..14).prop_map(|v| {
        v.into_iter()
            .map(|(lower, len, size)| b(lower, lower + len, size))
            .collect()
    })
}

/// The optimum of a tiny instance: every pushed-down placement, listed by offset, puts each
/// buffer at the highest end among its placed time-overlapping buffers; try every order.
fn brute_force_arena(buffers: &[Buffer]) -> u64 {
    fn go(buffers: &[Buffer], offsets: &mut Vec<Option<u64>>, best: &mut u64) {
        let arena = (0..buffers.len())
            .filter_map(|i| offsets[i].map(|o| o + buffers[i].size))
            .max()
            .unwrap_or(0);
        if arena >= *best {
            return;
        }
        if offsets.iter().all(Option::is_some) {
            *best = arena;
            return;
        }
        for i in 0..buffers.len() {
            if offsets[i].is_some() {
                continue;
            }
            let bi = buffers[i];
            let at = (0..buffers.len())
                .filter_map(|j| offsets[j].map(|o| (j, o)))
                .filter(|&(j, _)| buffers[j].lower < bi.upper && bi.lower < buffers[j].upper)
                .map(|(j, o)| o + buffers[j].size)
                .max()
                .unwrap_or(0);
            offsets[i] = Some(at);
            go(buffers, offsets, best);
            offsets[i] = None;
        }
    }
    let mut best = u64::MAX;
    go(buffers, &mut vec![None; buffers.len()], &mut best);
    best
}

/// Given room, the branch and bound places the buffers `(lower, length, size)` validly at
/// the brute-force optimum.
fn search_finds_the_optimum(v: Vec<(u64, u64, u64)>) -> Result<(), TestCaseError> {
    let buffers: Vec<Buffer> = v.into_iter().map(|(l, len, s)| b(l, l + len, s)).collect();
    let p = allocate(&buffers, &searching(1, 5_000_000)).unwrap();
    prop_assert!(validate(&buffers, &p, 1).is_ok());
    prop_assert_eq!(p.arena, brute_force_arena(&buffers));
    Ok(())
}

/// Every overlap by comparing every pair: what `validate` must report.
fn overlaps_pairwise(buffers: &[Buffer], offsets: &[u64]) -> Vec<AllocViolation> {
    let live = |i: usize| buffers[i].size > 0 && buffers[i].lower < buffers[i].upper;
    let mut out = Vec::new();
    for j in 0..buffers.len() {
        for i in 0..j {
            let (x, y) = (buffers[i], buffers[j]);
            let in_time = x.lower < y.upper && y.lower < x.upper;
            let in_space = offsets[i] < offsets[j] + y.size && offsets[j] < offsets[i] + x.size;
            if live(i) && live(j) && in_time && in_space {
                let step = x.lower.max(y.lower);
                out.push(AllocViolation::Overlap { a: i, b: j, step });
            }
        }
    }
    out.sort_by_key(|v| format!("{v:?}"));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The validator's sweep finds exactly the overlaps a pairwise comparison finds, on
    /// random (mostly invalid) placements.
    #[test]
    fn validate_finds_every_overlap(
        v in prop::collection::vec((0u64..30, 1u64..10, 0u64..12, 0u64..40), 0..40),
    ) {
        let buffers: Vec<Buffer> = v.iter().map(|&(l, len, s, _)| b(l, l + len, s)).collect();
        let offsets: Vec<u64> = v.iter().map(|&(_, _, _, o)| o).collect();
        let p = Placement {
            offsets: offsets.clone(),
            arena: u64::MAX,
            lower_bound: 0,
            algorithm: "random".into(),
            trials: Vec::new(),
            search: SearchSummary::off(0),
            skipped: Vec::new(),
        };
        let mut found = validate(&buffers, &p, 1).err().unwrap_or_default();
        found.sort_by_key(|v| format!("{v:?}"));
        prop_assert_eq!(found, overlaps_pairwise(&buffers, &offsets));
    }

    /// Every placement is valid (no two live buffers overlap), aligned, at or above the
    /// bound, and never worse than any heuristic alone (the search starts from their best).
    #[test]
    fn random_instances_place_validly(buffers in buffers_strategy(), align in prop::sample::select(vec![1u64, 3, 8])) {
        let p = allocate(&buffers, &small(align)).unwrap();
        prop_assert!(validate(&buffers, &p, align).is_ok(), "{:?}", validate(&buffers, &p, align));
        prop_assert!(p.arena >= lower_bound(&buffers, align));
        prop_assert!(p.offsets.iter().all(|o| o % align == 0));
        prop_assert_eq!(p.arena % align, 0);
        for alg in [Algorithm::GreedySize, Algorithm::GreedyReorder, Algorithm::BestFitSweep, Algorithm::Pushdown] {
            let h = allocate_with(&buffers, &small(align), alg).unwrap();
            prop_assert!(validate(&buffers, &h, align).is_ok());
            prop_assert!(p.arena <= h.arena, "{} beats the portfolio", alg);
        }
    }

    /// Without the search, the portfolio's placement is the one its heuristics run one by
    /// one give (the smallest, the earlier of `ALL` on a tie, greedy-reorder only where the
    /// others left the arena above a thousandth over the bound), on one thread and on two
    /// (greedy by size and the sweeps run side by side).
    #[test]
    fn the_portfolio_places_as_its_heuristics_one_by_one(
        v in prop::collection::vec((0u64..40, 1u64..12, 1u64..5000), 0..60),
        align in prop::sample::select(vec![1u64, 8]),
    ) {
        let buffers: Vec<Buffer> = v.into_iter().map(|(l, len, s)| b(l, l + len, s)).collect();
        let options = AllocOptions {
            effort: Effort { search_work: 0, ..Effort::DEFAULT },
            ..small(align)
        };
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| allocate(&buffers, &options).unwrap())
        };
        let (one, two) = (on(1), on(2));
        prop_assert_eq!(&one.offsets, &two.offsets);
        let alone = |alg| allocate_with(&buffers, &options, alg).unwrap();
        let mut best = alone(Algorithm::GreedySize);
        for alg in [Algorithm::BestFitSweep, Algorithm::Pushdown] {
            let h = alone(alg);
            if h.arena < best.arena {
                best = h;
            }
        }
        let lb = lower_bound(&buffers, align) / align;
        if best.arena / align > lb + lb / 1000 {
            let h = alone(Algorithm::GreedyReorder);
            if h.arena < best.arena {
                best = h;
            }
        }
        prop_assert_eq!(one.arena, best.arena);
        prop_assert_eq!(&one.offsets, &best.offsets);
        prop_assert_eq!(&one.algorithm, &best.algorithm);
    }

    /// Larger random instances with a real search budget: still valid, never worse than
    /// greedy, and the proven bound never above the arena.
    #[test]
    fn the_search_is_never_worse_than_greedy(
        v in prop::collection::vec((0u64..60, 1u64..20, 1u64..64), 20..80),
        align in prop::sample::select(vec![1u64, 4]),
    ) {
        let buffers: Vec<Buffer> = v.into_iter().map(|(l, len, s)| b(l, l + len, s * 8)).collect();
        let options = searching(align, 2_000_000);
        let p = allocate(&buffers, &options).unwrap();
        prop_assert!(validate(&buffers, &p, align).is_ok());
        let greedy = allocate_with(&buffers, &options, Algorithm::GreedySize).unwrap();
        prop_assert!(p.arena <= greedy.arena);
        prop_assert!(p.search.proven_bound <= p.arena);
        prop_assert!(p.search.proven_bound >= p.lower_bound);
        if p.search.stop == SearchStop::Optimal {
            prop_assert_eq!(p.search.proven_bound, p.arena);
        }
    }

    /// With budget to spare, the branch and bound is exact on tiny instances: it finds the
    /// optimum, so its pruning rules never cut the best placement off.
    #[test]
    fn search_reaches_the_optimum_of_tiny_instances(
        v in prop::collection::vec((0u64..8, 1u64..5, 1u64..20), 1..7)
    ) {
        search_finds_the_optimum(v)?;
    }

    /// Few distinct lifetimes and sizes: many identical buffers (placed in a fixed order
    /// by the symmetry rule) and tight sections (exact-cover branching). Still exact.
    #[test]
    fn search_is_exact_with_twins_and_tight_sections(
        v in prop::collection::vec((0u64..3, 1u64..3, 1u64..4), 1..8)
    ) {
        search_finds_the_optimum(v)?;
    }

    /// Rectangles cut from a width x time rectangle pack perfectly: the search finds an
    /// arena of exactly the width, which is also the lower bound.
    #[test]
    fn search_reaches_the_bound_on_perfect_packings(
        width in 16u64..400,
        steps in 4u64..40,
        pieces in 6usize..28,
        cuts in prop::collection::vec((any::<bool>(), 0u64..1000, 0usize..64), 40),
    ) {
        let buffers = perfect_packing(width, steps, pieces, &cuts);
        prop_assert_eq!(lower_bound(&buffers, 1), width);
        let options = searching(1, 3_000_000);
        let p = allocate(&buffers, &options).unwrap();
        prop_assert!(validate(&buffers, &p, 1).is_ok());
        prop_assert_eq!(p.arena, width, "{:?}", buffers);
    }
}
