//! `examples/train_zoo.rs`, the README's "From Rust": it runs, its plan recomputes, and the
//! planned and unplanned loss curves are the same bits.

#[path = "../examples/train_zoo.rs"]
#[allow(dead_code)]
mod train_zoo;

#[test]
fn the_readme_example_trains_planned_and_unplanned_alike() {
    let t = train_zoo::train("tiny_transformer", 5).expect("the example runs");
    assert_eq!(t.planned.len(), 5);
    assert!(
        t.recompute_steps > 0,
        "the plan recomputes nothing: the example would show nothing"
    );
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&t.planned), bits(&t.unplanned));
    assert!(t.unplanned.last() < t.unplanned.first(), "the loss falls");
}

#[test]
fn an_unknown_model_is_named_with_the_choices() {
    let err = train_zoo::train("resnet9000", 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("resnet9000") && err.contains("tiny_transformer"),
        "{err}"
    );
}
