//! Checkmate / Moccasin graphs from `benches/data/checkmate`: import, round trip, and
//! the unplanned peak and per-op lower bound of its README.

use sgc_ir::{format, load_any};
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../benches/data/checkmate")
        .join(name)
}

/// Rounds to 4 significant digits, the precision of the README's table.
fn sig4(x: u64) -> f64 {
    let x = x as f64;
    let e = x.log10().floor() as i32 - 3;
    (x / 10f64.powi(e)).round() * 10f64.powi(e)
}

/// (file, ops, peak in given order, per-op lower bound) from the README.
const TABLE: [(&str, usize, f64, f64); 4] = [
    ("vgg16_b256_train.json", 45, 1.583e10, 1.315e10),
    ("mobilenet_b512_train.json", 185, 3.470e10, 6.636e9),
    ("random_layered_n100.json", 100, 46320.0, 20020.0),
    ("random_layered_n250.json", 250, 146800.0, 87600.0),
];

#[test]
fn peaks_and_bounds_match_the_readme() {
    for (file, ops, peak, bound) in TABLE {
        let g = load_any(data(file)).unwrap();
        assert_eq!(g.num_ops(), ops, "{file}");
        let p = g.memory_profile().peak;
        let lb = g.lower_bound().bytes;
        assert_eq!(sig4(p), peak, "{file}: peak {p}");
        assert_eq!(sig4(lb), bound, "{file}: lower bound {lb}");
        assert!(lb <= p, "{file}");
    }
}

#[test]
fn imported_graphs_round_trip() {
    for (file, ..) in TABLE {
        let g = load_any(data(file)).unwrap();
        let text = format::to_string(&g);
        let back = format::from_str(&text).unwrap();
        assert_eq!(g, back, "{file}");
        assert_eq!(format::to_string(&back), text, "{file}");
    }
}

#[test]
fn model_graphs_keep_their_phases() {
    let g = load_any(data("vgg16_b256_train.json")).unwrap();
    let backward = g
        .op_ids()
        .filter(|&o| g.phase(o) == Some(sgc_ir::Phase::Backward))
        .count();
    assert!(backward > 0 && backward < g.num_ops());
    let r = load_any(data("random_layered_n100.json")).unwrap();
    assert!(r.op_ids().all(|o| r.phase(o).is_none()));
}
