//! The format doc and the loader agree on the fields: each field table of
//! `docs/graph-format.md` (File, Tensor, Op) names exactly the fields the loader accepts for
//! that object ([`format::GRAPH_FIELDS`], [`format::TENSOR_FIELDS`], [`format::OP_FIELDS`]),
//! so a field cannot be added to the reader without its line in the spec, nor listed in the
//! spec without the reader taking it.

use sgc_ir::format;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn spec() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/graph-format.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The field names in the first column of the tables of section `## {heading}`, up to the
/// next section of that level or above.
fn table_fields(doc: &str, heading: &str) -> BTreeSet<String> {
    let start = doc
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("the spec has no section `## {heading}`"));
    let body = &doc[start + heading.len() + 5..];
    let end = body.find("\n## ").map_or(body.len(), |i| i);
    body[..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name.to_string()))
        .collect()
}

#[test]
fn the_spec_names_exactly_the_fields_the_loader_accepts() {
    let doc = spec();
    for (heading, accepted) in [
        ("File", format::GRAPH_FIELDS),
        ("Tensor", format::TENSOR_FIELDS),
        ("Op", format::OP_FIELDS),
    ] {
        let accepted: BTreeSet<String> = accepted.iter().map(|f| f.to_string()).collect();
        let documented = table_fields(&doc, heading);
        let undocumented: Vec<_> = accepted.difference(&documented).collect();
        let unread: Vec<_> = documented.difference(&accepted).collect();
        assert!(
            undocumented.is_empty(),
            "`## {heading}`: the loader accepts {undocumented:?}, which docs/graph-format.md does not name: add a row for each"
        );
        assert!(
            unread.is_empty(),
            "`## {heading}`: docs/graph-format.md names {unread:?}, which the loader refuses"
        );
    }
}

/// A field outside the lists is refused (they are the lists the parser checks against).
#[test]
fn a_field_the_spec_does_not_name_is_refused() {
    let text = sgc_ir::testgen::DOC_EXAMPLE.replacen(
        r#""name": "tiny","#,
        r#""name": "tiny", "not_in_the_spec": 1,"#,
        1,
    );
    let e = format::from_str(&text).expect_err("an unknown field");
    assert!(
        matches!(e, sgc_ir::GraphError::UnknownField { ref field, .. } if field == "not_in_the_spec"),
        "{e:?}"
    );
}
