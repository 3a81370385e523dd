//! One malformed file per rule of the format doc ("Rules a reader enforces"), plus unknown
//! fields, wrong types, bad `batch_dim` and bad `inplace` pairs. Every case starts from the
//! doc's example graph and changes one thing; it asserts the typed [`GraphError`] variant
//! and that the message names the offending op or tensor (or value).

use sgc_ir::testgen::{doc_example_room_for, DOC_EXAMPLE};
use sgc_ir::{format, load_any, parse_any, GraphError, LoadError};

/// Rejects `text` with a `GraphError` matching the pattern, whose message contains every
/// given string; `parse_any` must give the same error. Returns the error.
macro_rules! rejects {
    ($text:expr, $pat:pat $(if $guard:expr)?, [$($name:expr),+ $(,)?]) => {{
        let text: &str = &$text;
        let e = format::from_str(text).expect_err("the graph must be rejected");
        assert!(matches!(e, $pat $(if $guard)?), "wrong variant: {e:?}");
        let msg = e.to_string();
        $( let name = ($name).to_string(); assert!(msg.contains(&name), "{msg:?} does not mention {name:?}"); )+
        assert_eq!(parse_any(text).expect_err("parse_any must reject it too"), e);
        e
    }};
}

/// The example with each `(from, to)` applied once; `from` must occur.
fn edit(pairs: &[(&str, &str)]) -> String {
    let mut s = DOC_EXAMPLE.to_string();
    for (from, to) in pairs {
        assert!(s.contains(from), "the doc example has no {from:?}");
        s = s.replacen(from, to, 1);
    }
    s
}

/// The line declaring the tensor or op `name` (names are unique across both in the example).
fn line_of(text: &str, name: &str) -> (usize, usize) {
    let key = format!("{{\"name\": \"{name}\",");
    let start = text.find(&key).unwrap_or_else(|| panic!("no entry {name}"));
    let end = start + text[start..].find('\n').unwrap();
    (start, end)
}

/// The example with `field` added to the entry of tensor or op `name`.
fn add_field(name: &str, field: &str) -> String {
    add_field_to(DOC_EXAMPLE, name, field)
}

fn add_field_to(text: &str, name: &str, field: &str) -> String {
    let (start, end) = line_of(text, name);
    let close = start + text[start..end].rfind('}').unwrap();
    format!("{}, {field}{}", &text[..close], &text[close..])
}

/// The example with the operand lists of op `act` (it reads `h` and writes `y`) replaced by
/// `io`.
fn act_io(io: &str) -> String {
    edit(&[(r#""inputs": ["h"], "outputs": ["y"]"#, io)])
}

/// `name` in backquotes, as messages write op and tensor names.
fn q(name: &str) -> String {
    format!("`{name}`")
}

#[test]
fn the_unmodified_example_is_valid() {
    let g = format::from_str(DOC_EXAMPLE).unwrap();
    assert_eq!(g.num_ops(), 6);
}

// ----- JSON syntax -----

/// 1-based line and column of byte `at`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count()
        + 1;
    (line, col)
}

fn json_error_at(text: &str, at: usize) {
    let e = rejects!(text, GraphError::Json { .. }, ["line", "column"]);
    let GraphError::Json { line, column, .. } = e else {
        unreachable!()
    };
    assert_eq!((line, column), line_col(text, at), "{e}");
}

#[test]
fn json_missing_comma_reports_line_and_column() {
    let text = edit(&[(r#"{"name": "h",  "dtype""#, r#"{"name": "h"  "dtype""#)]);
    let at = text.find(r#""h"  "dtype""#).unwrap() + 5;
    json_error_at(&text, at);
}

#[test]
fn json_bad_token_reports_line_and_column() {
    let text = edit(&[(r#""outputs": ["y"]}"#, r#""outputs": ["y"]x}"#)]);
    let at = text.find(r#"["y"]x"#).unwrap() + 5;
    json_error_at(&text, at);
}

#[test]
fn json_truncated_file_reports_the_end() {
    // At the end of the input the column is that of the last character read.
    let text = &DOC_EXAMPLE[..DOC_EXAMPLE.find(r#""outputs": ["loss""#).unwrap()];
    json_error_at(text, text.len() - 1);
}

#[test]
fn json_nan_and_infinity_are_not_json() {
    // The column is that of the first character that cannot continue a JSON value.
    for (bad, offset) in [("NaN", 0), ("Infinity", 0), ("-Infinity", 1), ("nan", 1)] {
        let text = edit(&[(r#""flops": 256}"#, &format!(r#""flops": {bad}}}"#))]);
        let at = text.find(bad).unwrap() + offset;
        json_error_at(&text, at);
    }
}

#[test]
fn json_trailing_garbage_is_an_error() {
    let text = format!("{DOC_EXAMPLE}\n{{}}");
    json_error_at(&text, text.len() - 2);
}

#[test]
fn json_columns_count_characters_not_bytes() {
    // `é` and `ü` are two bytes each: serde_json's column would be two too far.
    let text = edit(&[(r#""name": "tiny""#, r#""name": "tiny café ü" 7"#)]);
    json_error_at(&text, text.find(" 7").unwrap() + 1);
}

// ----- format, version, vocabularies -----

#[test]
fn unknown_format() {
    let text = edit(&[(r#""format": "sgc-graph""#, r#""format": "onnx""#)]);
    rejects!(text, GraphError::UnknownFormat(ref f) if f == "\"onnx\"", ["onnx"]);
    let text = edit(&[(r#""format": "sgc-graph""#, r#""format": 1"#)]);
    rejects!(text, GraphError::UnknownFormat(_), ["1"]);
    let text = edit(&[(r#""format": "sgc-graph", "#, "")]);
    rejects!(text, GraphError::MissingField { ref field, .. } if field == "format", ["format"]);
}

#[test]
fn unsupported_version() {
    for v in ["2", "0", "\"1\"", "1.5", "-1", "18446744073709551617"] {
        let text = edit(&[(r#""version": 1"#, &format!(r#""version": {v}"#))]);
        rejects!(text, GraphError::UnsupportedVersion(ref s) if s == v, [v]);
    }
    let text = edit(&[(r#""version": 1, "#, "")]);
    rejects!(text, GraphError::MissingField { ref field, .. } if field == "version", ["version"]);
}

#[test]
fn unknown_dtype() {
    let text = edit(&[(
        r#"{"name": "h",  "dtype": "f32""#,
        r#"{"name": "h",  "dtype": "f8""#,
    )]);
    rejects!(text, GraphError::UnknownDtype { ref tensor, ref dtype } if tensor == "h" && dtype == "f8", [q("h"), "f8"]);
    // Names are case-sensitive.
    let text = edit(&[(
        r#"{"name": "h",  "dtype": "f32""#,
        r#"{"name": "h",  "dtype": "F32""#,
    )]);
    rejects!(text, GraphError::UnknownDtype { .. }, [q("h")]);
}

#[test]
fn unknown_kind() {
    let text = edit(&[(r#""kind": "param""#, r#""kind": "weight""#)]);
    rejects!(text, GraphError::UnknownKind { ref tensor, ref kind } if tensor == "w" && kind == "weight", [q("w"), "weight"]);
}

#[test]
fn unknown_phase() {
    let text = add_field("act", r#""phase": "backwards""#);
    rejects!(text, GraphError::UnknownPhase { ref op, .. } if op == "act", [q("act"), "backwards"]);
}

// ----- names -----

#[test]
fn duplicate_tensor() {
    let y = r#"{"name": "y",  "dtype": "f32", "shape": [8, 4]},"#;
    let text = edit(&[(y, &format!("{y}\n    {y}"))]);
    rejects!(text, GraphError::DuplicateTensor(ref t) if t == "y", [q("y")]);
}

#[test]
fn duplicate_op() {
    let text = edit(&[(r#"{"name": "act_grad","#, r#"{"name": "act","#)]);
    rejects!(text, GraphError::DuplicateOp(ref o) if o == "act", [q("act")]);
}

#[test]
fn op_reads_an_undeclared_tensor() {
    let text = act_io(r#""inputs": ["hh"], "outputs": ["y"]"#);
    rejects!(text, GraphError::UndeclaredTensor { ref op, ref tensor } if op == "act" && tensor == "hh", [q("act"), q("hh")]);
}

#[test]
fn op_writes_an_undeclared_tensor() {
    let text = act_io(r#""inputs": ["h"], "outputs": ["yy"]"#);
    rejects!(text, GraphError::UndeclaredTensor { ref op, ref tensor } if op == "act" && tensor == "yy", [q("act"), q("yy")]);
}

// ----- producers -----

#[test]
fn activation_produced_twice() {
    let text = act_io(r#""inputs": ["h"], "outputs": ["y", "h"]"#);
    rejects!(
        text,
        GraphError::ProducedTwice { ref tensor, ref first, ref second }
            if tensor == "h" && first == "fc" && second == "act",
        [q("h"), q("fc"), q("act")]
    );
}

#[test]
fn activation_never_produced() {
    let dw = r#"{"name": "dw", "dtype": "f32", "shape": [4, 4]}"#;
    let text = edit(&[(
        dw,
        &format!("{dw},\n    {{\"name\": \"orphan\", \"dtype\": \"f32\", \"shape\": [2]}}"),
    )]);
    rejects!(text, GraphError::NeverProduced(ref t) if t == "orphan", [q("orphan")]);
}

#[test]
fn non_activation_produced_by_an_op() {
    for kind in ["input", "param", "state", "const"] {
        let text = add_field("dw", &format!(r#""kind": "{kind}""#));
        rejects!(
            text,
            GraphError::NonActivationProduced { ref op, ref tensor, kind: ref k }
                if op == "fc_grad_w" && tensor == "dw" && k == kind,
            [q("fc_grad_w"), q("dw"), kind]
        );
    }
}

#[test]
fn op_reads_an_activation_before_its_producer() {
    let fc = r#"    {"name": "fc",   "op": "matmul",      "inputs": ["x", "w"], "outputs": ["h"], "flops": 256},"#;
    let act = r#"    {"name": "act",  "op": "relu",        "inputs": ["h"], "outputs": ["y"]},"#;
    let text = edit(&[(&format!("{fc}\n{act}"), &format!("{act}\n{fc}"))]);
    rejects!(
        text,
        GraphError::ReadBeforeProduced { ref op, ref tensor, ref producer }
            if op == "act" && tensor == "h" && producer == "fc",
        [q("act"), q("h"), q("fc")]
    );
}

#[test]
fn op_reads_its_own_output() {
    let text = act_io(r#""inputs": ["h", "y"], "outputs": ["y"]"#);
    rejects!(text, GraphError::ReadBeforeProduced { ref op, ref producer, .. } if op == "act" && producer == "act", [q("act"), q("y")]);
}

// ----- outputs and loss -----

#[test]
fn outputs_names_an_undeclared_tensor() {
    let text = edit(&[(
        r#""outputs": ["loss", "dw"]"#,
        r#""outputs": ["loss", "dz"]"#,
    )]);
    rejects!(text, GraphError::UndeclaredOutput(ref t) if t == "dz", [q("dz")]);
}

#[test]
fn loss_names_an_undeclared_tensor() {
    let text = edit(&[("\"loss\": \"loss\"\n}", "\"loss\": \"l0ss\"\n}")]);
    rejects!(text, GraphError::UndeclaredLoss(ref t) if t == "l0ss", [q("l0ss")]);
}

// ----- sizes -----

const H: &str = r#"{"name": "h",  "dtype": "f32", "shape": [8, 4]}"#;

fn with_h(h: &str) -> String {
    edit(&[(H, h)])
}

#[test]
fn shape_product_overflows() {
    let text = with_h(r#"{"name": "h",  "dtype": "u8", "shape": [4294967296, 4294967296]}"#);
    rejects!(text, GraphError::SizeOverflow { ref tensor, ref what } if tensor == "h" && what.contains("product of its shape"), [q("h"), "64 bits"]);
}

#[test]
fn shape_product_times_dtype_size_overflows() {
    // 2^62 elements fit, 2^62 * 4 bytes do not.
    let text = with_h(r#"{"name": "h",  "dtype": "f32", "shape": [4611686018427387904]}"#);
    rejects!(text, GraphError::SizeOverflow { ref tensor, ref what } if tensor == "h" && what.contains("size_of(dtype)"), [q("h")]);
    let text = with_h(r#"{"name": "h",  "dtype": "u8", "shape": [4611686018427387904, 4]}"#);
    rejects!(text, GraphError::SizeOverflow { ref what, .. } if what.contains("product of its shape"), [q("h")]);
    // The largest size that fits, with every other storage of the example (456 bytes), is
    // accepted; one byte more passes 64 bits in the sum, and the error names the tensor at
    // which the sum overflows (the last one, `dw`, in file order).
    let fits = doc_example_room_for("h");
    let text = with_h(&format!(
        r#"{{"name": "h",  "dtype": "u8", "shape": [{fits}]}}"#
    ));
    assert!(format::from_str(&text).is_ok());
    let text = with_h(&format!(
        r#"{{"name": "h",  "dtype": "u8", "shape": [{}]}}"#,
        fits + 1
    ));
    rejects!(text, GraphError::SizeOverflow { ref tensor, ref what } if tensor == "dw" && what.contains("storage"), [q("dw"), "64 bits"]);
}

#[test]
fn shape_entry_above_u64_max() {
    let text = with_h(r#"{"name": "h",  "dtype": "f32", "shape": [18446744073709551616, 4]}"#);
    rejects!(text, GraphError::SizeOverflow { ref tensor, ref what } if tensor == "h" && what.contains("18446744073709551616"), [q("h"), "18446744073709551616"]);
    let text =
        with_h(r#"{"name": "h",  "dtype": "f32", "shape": [8, 123456789012345678901234567890]}"#);
    rejects!(text, GraphError::SizeOverflow { .. }, [q("h")]);
}

#[test]
fn bytes_above_u64_max() {
    let text = add_field("h", r#""bytes": 18446744073709551616"#);
    rejects!(text, GraphError::SizeOverflow { ref tensor, ref what } if tensor == "h" && what.contains("bytes"), [q("h")]);
}

#[test]
fn shape_entries_and_bytes_must_be_integers_at_least_zero() {
    for bad in ["-1", "2.5", "8.0", "1e3", "\"8\"", "null", "-0"] {
        let text = with_h(&format!(
            r#"{{"name": "h",  "dtype": "f32", "shape": [8, {bad}]}}"#
        ));
        rejects!(text, GraphError::BadShape { ref tensor, .. } if tensor == "h", [q("h")]);
        let text = add_field("h", &format!(r#""bytes": {bad}"#));
        rejects!(text, GraphError::BadShape { ref tensor, .. } if tensor == "h", [q("h")]);
    }
}

// ----- costs -----

fn with_fc_cost(field: &str, value: &str) -> String {
    edit(&[(r#""flops": 256}"#, &format!(r#""{field}": {value}}}"#))])
}

#[test]
fn negative_cost() {
    for field in ["time_us", "flops"] {
        for v in ["-1", "-0.5", "-1e-300"] {
            let text = with_fc_cost(field, v);
            rejects!(text, GraphError::BadCost { ref op, field: ref f, ref value } if op == "fc" && f == field && value == v, [q("fc"), field, v]);
        }
    }
}

#[test]
fn infinite_cost() {
    for field in ["time_us", "flops"] {
        for v in ["1e999", "-1e999", "1.5e309"] {
            let text = with_fc_cost(field, v);
            rejects!(text, GraphError::BadCost { ref op, field: ref f, .. } if op == "fc" && f == field, [q("fc"), field, "finite"]);
        }
    }
}

#[test]
fn nan_cost_cannot_be_written_and_strings_are_wrong_types() {
    // NaN is not JSON (see json_nan_and_infinity_are_not_json); as a string it is a wrong
    // type naming the op.
    for field in ["time_us", "flops"] {
        let text = with_fc_cost(field, "\"NaN\"");
        rejects!(text, GraphError::WrongType { ref context, field: ref f, .. } if context.contains("fc") && f == field, [q("fc"), field]);
    }
}

#[test]
fn zero_and_tiny_costs_are_accepted() {
    for v in ["0", "0.0", "-0", "5e-324", "1e-400"] {
        let g = format::from_str(&with_fc_cost("time_us", v)).unwrap();
        let t = g.op(g.op_by_name("fc").unwrap()).time_us.unwrap();
        assert!(t == 0.0 || t == 5e-324, "{v} -> {t}");
    }
}

// ----- alias_of -----

#[test]
fn alias_of_an_undeclared_tensor() {
    let text = add_field("y", r#""alias_of": "hh""#);
    rejects!(text, GraphError::UndeclaredAlias { ref tensor, ref alias_of } if tensor == "y" && alias_of == "hh", [q("y"), q("hh")]);
}

#[test]
fn alias_of_itself_is_a_cycle() {
    let text = add_field("h", r#""alias_of": "h""#);
    rejects!(text, GraphError::AliasCycle(ref t) if t == "h", [q("h")]);
}

#[test]
fn alias_two_cycle() {
    let text = add_field_to(
        &add_field("h", r#""alias_of": "y""#),
        "y",
        r#""alias_of": "h""#,
    );
    rejects!(text, GraphError::AliasCycle(ref t) if t == "h" || t == "y", ["alias_of"]);
}

#[test]
fn alias_chain_into_a_cycle_names_a_tensor_on_the_cycle() {
    // x -> h -> y -> h: the cycle is h <-> y; x only leads into it.
    let text = add_field("x", r#""alias_of": "h""#);
    let text = add_field_to(&text, "h", r#""alias_of": "y""#);
    let text = add_field_to(&text, "y", r#""alias_of": "h""#);
    rejects!(text, GraphError::AliasCycle(ref t) if t == "h" || t == "y", ["cycle"]);
}

#[test]
fn view_made_before_its_base_is_produced() {
    // y is made by `act`, its base dy only later by `mse_grad`: y's storage does not exist yet.
    let text = add_field("y", r#""alias_of": "dy""#);
    rejects!(
        text,
        GraphError::ViewBeforeBase { ref op, ref view, ref base, ref producer }
            if op == "act" && view == "y" && base == "dy" && producer == "mse_grad",
        [q("act"), q("y"), q("dy"), q("mse_grad")]
    );
}

#[test]
fn persistent_view_read_before_its_base_is_produced() {
    // w (read by fc) views h, which fc itself produces.
    let text = add_field("w", r#""alias_of": "h""#);
    rejects!(text, GraphError::ViewBeforeBase { ref op, ref view, .. } if op == "fc" && view == "w", [q("fc"), q("w"), q("h")]);
}

#[test]
fn views_of_earlier_storage_are_accepted() {
    // dh views y (made earlier by act); w2 views the param w.
    let text = add_field("dh", r#""alias_of": "y""#);
    let g = format::from_str(&text).unwrap();
    assert!(g.memory_profile().peak >= g.lower_bound().bytes);
}

// ----- unknown fields -----

#[test]
fn unknown_top_level_field() {
    let text = edit(&[(r#""name": "tiny","#, r#""name": "tiny", "batch": 8,"#)]);
    rejects!(text, GraphError::UnknownField { ref context, ref field } if context == "graph" && field == "batch", ["batch"]);
}

#[test]
fn unknown_tensor_and_op_fields() {
    for (entry, field, value) in [("h", "stride", "1"), ("act", "device", r#""cuda""#)] {
        let text = add_field(entry, &format!(r#""{field}": {value}"#));
        rejects!(text, GraphError::UnknownField { field: ref f, .. } if f == field, [q(entry), field]);
    }
}

// ----- wrong types and missing fields -----

#[test]
fn top_level_wrong_types() {
    rejects!(
        "[]",
        GraphError::NotAnObject { .. },
        ["top level", "JSON object", "[]"]
    );
    for (from, to, field) in [
        (r#""name": "tiny""#, r#""name": 7"#, "name"),
        (
            r#""outputs": ["loss", "dw"]"#,
            r#""outputs": "loss""#,
            "outputs",
        ),
        (
            r#""outputs": ["loss", "dw"]"#,
            r#""outputs": ["loss", 3]"#,
            "outputs",
        ),
        ("\"loss\": \"loss\"\n}", "\"loss\": [\"loss\"]\n}", "loss"),
        (
            "\"loss\": \"loss\"\n}",
            "\"loss\": \"loss\", \"meta\": [1]\n}",
            "meta",
        ),
    ] {
        let text = edit(&[(from, to)]);
        rejects!(text, GraphError::WrongType { ref context, field: ref f, .. } if context == "graph" && f == field, [field]);
    }
}

/// The example with one top-level field replaced by `value`.
fn with_top_level(field: &str, value: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(DOC_EXAMPLE).unwrap();
    v[field] = serde_json::from_str(value).unwrap();
    serde_json::to_string_pretty(&v).unwrap()
}

#[test]
fn top_level_lists_of_the_wrong_type() {
    for (field, value) in [("tensors", "{}"), ("ops", "\"fc\""), ("tensors", "null")] {
        let text = with_top_level(field, value);
        rejects!(text, GraphError::WrongType { ref context, field: ref f, .. } if context == "graph" && f == field, [field]);
    }
    let text = with_top_level("ops", "[7]");
    rejects!(text, GraphError::NotAnObject { ref context, .. } if context.starts_with("op #0"), ["op #0", "`ops`", "7"]);
}

#[test]
fn missing_top_level_fields() {
    for (from, to, field) in [
        (r#""outputs": ["loss", "dw"],"#, "", "outputs"),
        (r#""tensors": ["#, r#""tensorz": ["#, "tensors"),
        (r#""ops": ["#, r#""opz": ["#, "ops"),
    ] {
        let text = edit(&[(from, to)]);
        let e = format::from_str(&text).unwrap_err();
        // A renamed field is first an unknown field; a removed one is missing.
        match e {
            GraphError::MissingField { field: ref f, .. } => assert_eq!(f, field),
            GraphError::UnknownField { field: ref f, .. } => {
                assert!(f.starts_with(field.trim_end_matches('s')))
            }
            ref other => panic!("{field}: {other:?}"),
        }
        assert!(e.to_string().contains(field.trim_end_matches('s')), "{e}");
    }
}

#[test]
fn tensor_wrong_types() {
    for (from, to, field) in [
        (
            r#""dtype": "f32", "shape": [8, 4]}"#,
            r#""dtype": 32, "shape": [8, 4]}"#,
            "dtype",
        ),
        (
            r#""dtype": "f32", "shape": [8, 4]}"#,
            r#""dtype": "f32", "shape": "8x4"}"#,
            "shape",
        ),
        (
            r#""dtype": "f32", "shape": [8, 4]}"#,
            r#""dtype": "f32", "shape": [8, 4], "kind": 3}"#,
            "kind",
        ),
        (
            r#""dtype": "f32", "shape": [8, 4]}"#,
            r#""dtype": "f32", "shape": [8, 4], "alias_of": 0}"#,
            "alias_of",
        ),
    ] {
        let text = edit(&[(
            &format!(r#"{{"name": "h",  {from}"#),
            &format!(r#"{{"name": "h",  {to}"#),
        )]);
        rejects!(text, GraphError::WrongType { ref context, field: ref f, .. } if context == "tensor `h`" && f == field, [q("h"), field]);
    }
}

#[test]
fn tensor_entry_without_a_usable_name_is_named_by_position() {
    let text = edit(&[(r#"{"name": "h",  "dtype""#, r#"{"name": 2,  "dtype""#)]);
    rejects!(text, GraphError::WrongType { ref context, .. } if context == "tensor #2", ["tensor #2"]);
    let text = edit(&[(r#"{"name": "h",  "dtype""#, r#"{"dtype""#)]);
    rejects!(text, GraphError::MissingField { ref context, ref field } if context == "tensor #2" && field == "name", ["tensor #2"]);
    let text = edit(&[(H, "\"h\"")]);
    rejects!(text, GraphError::NotAnObject { ref context, .. } if context.starts_with("tensor #2"), ["tensor #2", "`tensors`"]);
}

#[test]
fn tensor_missing_fields() {
    for (field, h) in [
        ("dtype", r#"{"name": "h",  "shape": [8, 4]}"#),
        ("shape", r#"{"name": "h",  "dtype": "f32"}"#),
    ] {
        rejects!(with_h(h), GraphError::MissingField { ref context, field: ref f } if context == "tensor `h`" && f == field, [q("h"), field]);
    }
}

#[test]
fn op_wrong_types() {
    for (field, value) in [
        ("inputs", r#""h""#),
        ("outputs", r#"[1]"#),
        ("recomputable", r#""no""#),
        ("attrs", r#"[1, 2]"#),
        ("phase", r#"1"#),
        ("time_us", r#"true"#),
    ] {
        let text = edit(&[(
            r#"{"name": "act",  "op": "relu",        "inputs": ["h"], "outputs": ["y"]}"#,
            &match field {
                "inputs" | "outputs" => format!(
                    r#"{{"name": "act",  "op": "relu", {}}}"#,
                    if field == "inputs" {
                        format!(r#""inputs": {value}, "outputs": ["y"]"#)
                    } else {
                        format!(r#""inputs": ["h"], "outputs": {value}"#)
                    }
                ),
                _ => format!(
                    r#"{{"name": "act",  "op": "relu", "inputs": ["h"], "outputs": ["y"], "{field}": {value}}}"#
                ),
            },
        )]);
        rejects!(text, GraphError::WrongType { ref context, field: ref f, .. } if context == "op `act`" && f == field, [q("act"), field]);
    }
}

#[test]
fn op_missing_fields() {
    let text = edit(&[(r#""op": "relu",        "#, "")]);
    rejects!(text, GraphError::MissingField { ref context, ref field } if context == "op `act`" && field == "op", [q("act")]);
    let text = act_io(r#""outputs": ["y"]"#);
    rejects!(text, GraphError::MissingField { ref field, .. } if field == "inputs", [q("act")]);
    let text = edit(&[(r#"{"name": "act",  "op""#, r#"{"op""#)]);
    rejects!(text, GraphError::MissingField { ref context, .. } if context == "op #1", ["op #1"]);
}

// ----- effects: the op table decides what may be recomputed -----

/// The example with op `act` of type `ty`, its `recomputable` field written as `flag`
/// (nothing when `None`).
fn act_of_type(ty: &str, flag: Option<&str>) -> String {
    let field = flag.map_or(String::new(), |f| format!(r#", "recomputable": {f}"#));
    edit(&[(
        r#"{"name": "act",  "op": "relu",        "inputs": ["h"], "outputs": ["y"]}"#,
        &format!(r#"{{"name": "act",  "op": "{ty}", "inputs": ["h"], "outputs": ["y"]{field}}}"#),
    )])
}

#[test]
fn random_or_writing_op_marked_recomputable() {
    use sgc_ir::ops::OpKind;
    for (kind, effect) in [
        (OpKind::AtenDropout, "draws random numbers"),
        (OpKind::AtenBernoulli, "draws random numbers"),
        (OpKind::AtenCopyInPlace, "writes state"),
        (OpKind::SgdUpdate, "writes state"),
    ] {
        let text = act_of_type(kind.name(), Some("true"));
        rejects!(text, GraphError::EffectfulRecomputable { ref op, ref op_type, .. } if op == "act" && op_type == kind.name(),
            [q("act"), q(kind.name()), effect, r#""recomputable": true"#, "leave the field out"]);
        // Absent: the table's answer, as explicit `false`.
        for flag in [None, Some("false")] {
            let g = format::from_str(&act_of_type(kind.name(), flag)).unwrap();
            assert!(!g.op(g.op_by_name("act").unwrap()).recomputable, "{flag:?}");
        }
    }
}

#[test]
fn the_file_flag_holds_for_pure_and_unknown_ops() {
    for (ty, flag, recomputable) in [
        ("relu", None, true),
        ("relu", Some("false"), false),
        ("my_random_op", None, true),
        ("my_random_op", Some("false"), false),
    ] {
        let g = format::from_str(&act_of_type(ty, flag)).unwrap();
        assert_eq!(
            g.op(g.op_by_name("act").unwrap()).recomputable,
            recomputable,
            "{ty} {flag:?}"
        );
    }
}

// ----- batch_dim -----

#[test]
fn batch_dim_outside_the_shape() {
    for (tensor, bd) in [("x", "2"), ("x", "-1"), ("x", "1.0"), ("loss", "0")] {
        let text = if tensor == "x" {
            edit(&[(r#""batch_dim": 0"#, &format!(r#""batch_dim": {bd}"#))])
        } else {
            add_field(tensor, &format!(r#""batch_dim": {bd}"#))
        };
        rejects!(text, GraphError::BadBatchDim { tensor: ref t, ref batch_dim, .. } if t == tensor && batch_dim == bd, [q(tensor), bd]);
    }
    let text = edit(&[(r#""batch_dim": 0"#, r#""batch_dim": "0""#)]);
    rejects!(text, GraphError::WrongType { ref field, .. } if field == "batch_dim", [q("x")]);
}

// ----- inplace -----

#[test]
fn inplace_index_out_of_range() {
    for (pair, why) in [("[1, 0]", "1 outputs"), ("[0, 1]", "1 inputs")] {
        let text = add_field("act", &format!(r#""inplace": [{pair}]"#));
        rejects!(text, GraphError::BadInplace { ref op, .. } if op == "act", [q("act"), pair, why]);
    }
    let text = add_field("fc", r#""inplace": [[0, 1], [0, 2]]"#);
    rejects!(text, GraphError::BadInplace { ref op, .. } if op == "fc", [q("fc"), "[0, 2]"]);
}

#[test]
fn inplace_malformed_pairs() {
    for bad in [
        "[[0]]",
        "[0, 0]",
        "[[-1, 0]]",
        "[[0, 0, 0]]",
        "{}",
        "[[0.5, 0]]",
        "[[\"0\", 0]]",
    ] {
        let text = add_field("act", &format!(r#""inplace": {bad}"#));
        rejects!(text, GraphError::WrongType { ref field, .. } if field == "inplace", [q("act"), "inplace"]);
    }
    let g = format::from_str(&add_field("act", r#""inplace": [[0, 0]]"#)).unwrap();
    assert_eq!(g.op(g.op_by_name("act").unwrap()).inplace, vec![(0, 0)]);
}

// ----- files -----

fn temp_file(tag: &str, text: &str) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("sgc-malformed-{}-{tag}.json", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn load_errors_name_the_path() {
    let path = temp_file(
        "dtype",
        &with_h(r#"{"name": "h",  "dtype": "f8", "shape": [8, 4]}"#),
    );
    let errors: Vec<LoadError> = vec![
        format::load(&path).unwrap_err(),
        load_any(&path).unwrap_err(),
    ];
    std::fs::remove_file(&path).unwrap();
    for e in errors {
        let msg = e.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains(&q("h")), "{msg}");
        assert!(
            matches!(e.graph_error(), Some(GraphError::UnknownDtype { .. })),
            "{e:?}"
        );
    }
}

#[test]
fn load_syntax_errors_name_the_path_line_and_column() {
    let path = temp_file("syntax", &DOC_EXAMPLE[..40]);
    let e = format::load(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("line 2"),
        "{msg}"
    );
    assert!(
        matches!(e.graph_error(), Some(GraphError::Json { line: 2, .. })),
        "{e:?}"
    );
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let path = std::env::temp_dir().join("sgc-malformed-no-such-file.json");
    for e in [
        format::load(&path).unwrap_err(),
        load_any(&path).unwrap_err(),
    ] {
        assert!(matches!(e, LoadError::Io { .. }), "{e:?}");
        assert!(e.graph_error().is_none());
        assert!(
            e.to_string().contains("sgc-malformed-no-such-file.json"),
            "{e}"
        );
    }
}
