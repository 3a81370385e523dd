//! Report wording users read: a ratio says which way it points, and no figure reads
//! negative where only a non-negative one makes sense.

use std::process::Command;

fn sgc(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn run_compare_states_the_ratios_direction() {
    let g = concat!(env!("CARGO_MANIFEST_DIR"), "/graphs/tiny_cnn.json");
    let out = sgc(&[
        "run",
        g,
        "--steps",
        "1",
        "--strategy",
        "sublinear",
        "--compare",
    ]);
    let line = out
        .lines()
        .find(|l| l.starts_with("planned vs unplanned"))
        .unwrap();
    assert!(
        line.contains("planned / unplanned: memory ") && line.contains("x, time "),
        "{line}"
    );
    assert!(!line.contains("less"), "{line}");
}

#[test]
fn fragmentation_never_reads_negative() {
    for name in [
        "tiny_mlp",
        "tiny_cnn",
        "tiny_transformer",
        "unet",
        "resnet50",
    ] {
        let g = format!("{}/graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
        for out in [
            sgc(&["plan", &g, "--genetic-iters", "0"]),
            sgc(&["inspect", &g]),
        ] {
            assert!(!out.contains("fragmentation -"), "{name}: {out}");
        }
    }
    // VGG-16's in-place pairs pack its arena below the aligned live peak: said so.
    let g = format!("{}/graphs/vgg16.json", env!("CARGO_MANIFEST_DIR"));
    let out = sgc(&["plan", &g, "--genetic-iters", "0"]);
    assert!(out.contains("below it through in-place sharing"), "{out}");
}
