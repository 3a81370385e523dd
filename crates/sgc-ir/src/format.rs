//! Reading and writing the version-1 graph format (`docs/graph-format.md`).
//!
//! Reading goes JSON text -> `serde_json::Value` (syntax errors carry line and column)
//! -> [`GraphDef`] by hand, field by field, so that every field-level problem (an unknown
//! field, a wrong type, an unknown dtype, a shape entry that overflows 64 bits, an
//! infinite cost) names the tensor or op it is in -> [`Graph`] through the semantic
//! rules of `validate.rs`. The crate enables serde_json's `arbitrary_precision`, so
//! a number is seen exactly as written and `1e999` is reported, not rounded.
//!
//! Writing puts every tensor and op on a line of its own: files stay small and diff well.
//! [`load`] and [`save`] read and write gzip too (`.json.gz`, see [`crate::file`]).

use crate::error::{GraphError, LoadError};
use crate::graph::{Graph, GraphDef, OpDef, TensorDef};
use crate::ids::{DType, Phase, TensorKind};
use crate::ops::OpKind;
use serde_json::{Map, Number, Value};
use std::path::Path;

/// The fields of a graph file's top-level object. These three lists are the reader's whole
/// vocabulary: the parser refuses any other field, and `tests/spec.rs` checks that the
/// tables of `docs/graph-format.md` name exactly these.
pub const GRAPH_FIELDS: &[&str] = &[
    "format", "version", "name", "tensors", "ops", "outputs", "loss", "meta",
];
/// The fields of an entry of `tensors`.
pub const TENSOR_FIELDS: &[&str] = &[
    "name",
    "dtype",
    "shape",
    "bytes",
    "kind",
    "alias_of",
    "batch_dim",
];
/// The fields of an entry of `ops`.
pub const OP_FIELDS: &[&str] = &[
    "name",
    "op",
    "inputs",
    "outputs",
    "phase",
    "time_us",
    "flops",
    "attrs",
    "inplace",
    "recomputable",
];

/// Parses and validates a graph from JSON text.
pub fn from_str(text: &str) -> Result<Graph, GraphError> {
    Graph::from_def(def_from_str(text)?)
}

/// Parses JSON text into a definition without the semantic rules.
pub fn def_from_str(text: &str) -> Result<GraphDef, GraphError> {
    def_from_value(&parse_json(text)?)
}

/// JSON text as a value, strictly ([`crate::json`]): no byte order mark, no duplicate keys,
/// no object posing as a number; an empty text says so.
pub(crate) fn parse_json(text: &str) -> Result<Value, GraphError> {
    if text.starts_with('\u{feff}') {
        return Err(GraphError::Json {
            line: 1,
            column: 1,
            message: "the text starts with a byte order mark (U+FEFF): save the file as UTF-8 without a BOM".into(),
        });
    }
    if text.trim().is_empty() {
        return Err(GraphError::Empty);
    }
    crate::json::check_duplicate_keys(text).map_err(|e| GraphError::from_json(&e, text))?;
    serde_json::from_str(text).map_err(|e| GraphError::from_json(&e, text))
}

/// Reads a graph file, plain or gzip ([`crate::file`]); the error carries the path.
pub fn load(path: impl AsRef<Path>) -> Result<Graph, LoadError> {
    let path = path.as_ref();
    let text = crate::file::read_text(path)?;
    from_str(&text).map_err(|source| LoadError::Graph {
        path: path.display().to_string(),
        source,
    })
}

/// Serialises a graph: one tensor or op per line.
pub fn to_string(graph: &Graph) -> String {
    def_to_string(&graph.to_def())
}

/// Writes a graph file, gzip-compressed when the path ends in `.gz` ([`crate::file`]).
pub fn save(graph: &Graph, path: impl AsRef<Path>) -> std::io::Result<()> {
    crate::file::write_text(path.as_ref(), &to_string(graph))
}

/// Serialises a definition: one tensor or op per line.
pub fn def_to_string(def: &GraphDef) -> String {
    let j = |v: &dyn erased::Ser| v.json();
    let mut s = String::from("{\n  \"format\": \"sgc-graph\",\n  \"version\": 1,\n");
    if let Some(name) = &def.name {
        s += &format!("  \"name\": {},\n", j(name));
    }
    if let Some(loss) = &def.loss {
        s += &format!("  \"loss\": {},\n", j(loss));
    }
    s += &format!("  \"outputs\": {},\n", j(&def.outputs));
    if let Some(meta) = &def.meta {
        s += &format!("  \"meta\": {},\n", j(meta));
    }
    s += &list("tensors", &def.tensors, true);
    s += &list("ops", &def.ops, false);
    s += "}\n";
    s
}

fn list<T: serde::Serialize>(key: &str, items: &[T], comma: bool) -> String {
    let mut s = format!("  \"{key}\": [");
    for (i, item) in items.iter().enumerate() {
        s += if i == 0 { "\n    " } else { ",\n    " };
        s += &serde_json::to_string(item).expect("graph definitions always serialise");
    }
    s += if items.is_empty() { "]" } else { "\n  ]" };
    s += if comma { ",\n" } else { "\n" };
    s
}

mod erased {
    /// Object-safe JSON serialisation, to format heterogeneous fields in one helper.
    pub trait Ser {
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Ser for T {
        fn json(&self) -> String {
            serde_json::to_string(self).expect("graph definitions always serialise")
        }
    }
}

/// Converts a parsed JSON document into a definition.
pub fn def_from_value(v: &Value) -> Result<GraphDef, GraphError> {
    let obj = as_object(v, "the top level of a graph file")?;
    check_fields(obj, GRAPH_FIELDS, "graph")?;
    match obj.get("format") {
        Some(Value::String(f)) if f == "sgc-graph" => {}
        Some(other) => return Err(GraphError::UnknownFormat(display(other))),
        None => return Err(missing("graph", "format")),
    }
    match obj.get("version") {
        Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
        Some(other) => return Err(GraphError::UnsupportedVersion(display(other))),
        None => return Err(missing("graph", "version")),
    }
    let tensors = required_array(obj, "graph", "tensors")?
        .iter()
        .enumerate()
        .map(|(i, t)| tensor_def(t, i))
        .collect::<Result<Vec<_>, _>>()?;
    let ops = required_array(obj, "graph", "ops")?
        .iter()
        .enumerate()
        .map(|(i, o)| op_def(o, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(GraphDef {
        name: opt_string(obj, "graph", "name")?,
        tensors,
        ops,
        outputs: string_list(obj, "graph", "outputs")?,
        loss: opt_string(obj, "graph", "loss")?,
        meta: opt_object(obj, "graph", "meta")?,
    })
}

/// Entry `index` of list `list` as an object of `fields` only, with its name and the
/// context its errors give (`tensor `x``; before the name is known, `tensor #3`).
fn entry<'a>(
    v: &'a Value,
    what: &str,
    list: &str,
    index: usize,
    fields: &[&str],
) -> Result<(&'a Map<String, Value>, String, String), GraphError> {
    let fallback = format!("{what} #{index}");
    let obj = as_object(v, &format!("{fallback} (an entry of `{list}`)"))?;
    let name = required_string(obj, &fallback, "name")?;
    let ctx = format!("{what} `{name}`");
    check_fields(obj, fields, &ctx)?;
    Ok((obj, name, ctx))
}

fn tensor_def(v: &Value, index: usize) -> Result<TensorDef, GraphError> {
    let (obj, name, ctx) = entry(v, "tensor", "tensors", index, TENSOR_FIELDS)?;
    let dtype_name = required_string(obj, &ctx, "dtype")?;
    let dtype = DType::parse(&dtype_name).ok_or_else(|| GraphError::UnknownDtype {
        tensor: name.clone(),
        dtype: dtype_name,
    })?;
    let kind = match opt_string(obj, &ctx, "kind")? {
        None => TensorKind::Activation,
        Some(k) => TensorKind::parse(&k).ok_or(GraphError::UnknownKind {
            tensor: name.clone(),
            kind: k,
        })?,
    };
    let shape = match obj.get("shape") {
        None => return Err(missing(&ctx, "shape")),
        Some(Value::Array(a)) => a
            .iter()
            .map(|d| size_value(d, &name, "a shape entry"))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(wrong(&ctx, "shape", "an array of integers >= 0")),
    };
    let bytes = match obj.get("bytes") {
        None => None,
        Some(b) => Some(size_value(b, &name, "bytes")?),
    };
    let batch_dim = match obj.get("batch_dim") {
        None => None,
        Some(Value::Number(n)) => Some(n.as_u64().ok_or_else(|| GraphError::BadBatchDim {
            tensor: name.clone(),
            batch_dim: n.to_string(),
            rank: shape.len(),
        })?),
        Some(_) => return Err(wrong(&ctx, "batch_dim", "an integer axis index")),
    };
    Ok(TensorDef {
        alias_of: opt_string(obj, &ctx, "alias_of")?,
        name,
        dtype,
        shape,
        bytes,
        kind,
        batch_dim,
    })
}

/// A size (shape entry or byte count): an integer >= 0 that fits in 64 bits.
fn size_value(v: &Value, tensor: &str, what: &str) -> Result<u64, GraphError> {
    let bad = |value: String| GraphError::BadShape {
        tensor: tensor.to_string(),
        what: what.to_string(),
        value,
    };
    let Value::Number(n) = v else {
        return Err(bad(display(v)));
    };
    if let Some(x) = n.as_u64() {
        return Ok(x);
    }
    let text = n.to_string();
    if text.bytes().all(|b| b.is_ascii_digit()) {
        Err(GraphError::SizeOverflow {
            tensor: tensor.to_string(),
            what: format!("{what} {text}"),
        })
    } else {
        Err(bad(text))
    }
}

fn op_def(v: &Value, index: usize) -> Result<OpDef, GraphError> {
    let (obj, name, ctx) = entry(v, "op", "ops", index, OP_FIELDS)?;
    let phase = match opt_string(obj, &ctx, "phase")? {
        None => None,
        Some(p) => Some(Phase::parse(&p).ok_or(GraphError::UnknownPhase {
            op: name.clone(),
            phase: p,
        })?),
    };
    let inplace = match obj.get("inplace") {
        None => Vec::new(),
        Some(v) => inplace_pairs(v, &ctx)?,
    };
    let op = required_string(obj, &ctx, "op")?;
    // Absent: the op table's answer (an op that writes state or draws random numbers is
    // not recomputable; a type the table does not know is).
    let recomputable = optional(obj, &ctx, "recomputable", "true or false", Value::as_bool)?
        .unwrap_or_else(|| OpKind::parse(&op).is_none_or(|k| k.spec().recomputable()));
    Ok(OpDef {
        op,
        inputs: string_list(obj, &ctx, "inputs")?,
        outputs: string_list(obj, &ctx, "outputs")?,
        phase,
        time_us: cost(obj, &name, "time_us")?,
        flops: cost(obj, &name, "flops")?,
        attrs: opt_object(obj, &ctx, "attrs")?,
        inplace,
        recomputable,
        name,
    })
}

fn inplace_pairs(v: &Value, ctx: &str) -> Result<Vec<(u64, u64)>, GraphError> {
    let err = || {
        wrong(
            ctx,
            "inplace",
            "an array of [output_index, input_index] pairs",
        )
    };
    let Value::Array(pairs) = v else {
        return Err(err());
    };
    pairs
        .iter()
        .map(|p| match p.as_array().map(|a| a.as_slice()) {
            Some([Value::Number(a), Value::Number(b)]) => {
                Ok((a.as_u64().ok_or_else(err)?, b.as_u64().ok_or_else(err)?))
            }
            _ => Err(err()),
        })
        .collect()
}

/// A cost: a finite number >= 0. Infinite and negative values name the op.
fn cost(obj: &Map<String, Value>, op: &str, field: &str) -> Result<Option<f64>, GraphError> {
    match obj.get(field) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            let x = number_f64(n);
            if x.is_finite() && x >= 0.0 {
                Ok(Some(x))
            } else {
                Err(GraphError::BadCost {
                    op: op.to_string(),
                    field: field.to_string(),
                    value: n.to_string(),
                })
            }
        }
        Some(_) => Err(wrong(&format!("op `{op}`"), field, "a number >= 0")),
    }
}

fn number_f64(n: &Number) -> f64 {
    n.to_string().parse::<f64>().unwrap_or(f64::NAN)
}

fn check_fields(obj: &Map<String, Value>, allowed: &[&str], ctx: &str) -> Result<(), GraphError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(GraphError::UnknownField {
            context: ctx.to_string(),
            field: k.clone(),
        }),
        None => Ok(()),
    }
}

fn as_object<'a>(v: &'a Value, ctx: &str) -> Result<&'a Map<String, Value>, GraphError> {
    v.as_object().ok_or_else(|| GraphError::NotAnObject {
        context: ctx.to_string(),
        found: display(v),
    })
}

fn required_array<'a>(
    obj: &'a Map<String, Value>,
    ctx: &str,
    field: &str,
) -> Result<&'a Vec<Value>, GraphError> {
    match obj.get(field) {
        None => Err(missing(ctx, field)),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(wrong(ctx, field, "an array")),
    }
}

fn required_string(obj: &Map<String, Value>, ctx: &str, field: &str) -> Result<String, GraphError> {
    opt_string(obj, ctx, field)?.ok_or_else(|| missing(ctx, field))
}

fn opt_string(
    obj: &Map<String, Value>,
    ctx: &str,
    field: &str,
) -> Result<Option<String>, GraphError> {
    optional(obj, ctx, field, "a string", |v| {
        v.as_str().map(str::to_string)
    })
}

fn opt_object(
    obj: &Map<String, Value>,
    ctx: &str,
    field: &str,
) -> Result<Option<Map<String, Value>>, GraphError> {
    optional(obj, ctx, field, "a JSON object", |v| v.as_object().cloned())
}

/// `obj[field]` as `read` takes it, `None` when absent; a value `read` refuses is a wrong
/// type, `expected` saying what it must be.
fn optional<T>(
    obj: &Map<String, Value>,
    ctx: &str,
    field: &str,
    expected: &str,
    read: impl Fn(&Value) -> Option<T>,
) -> Result<Option<T>, GraphError> {
    obj.get(field)
        .map(|v| read(v).ok_or_else(|| wrong(ctx, field, expected)))
        .transpose()
}

fn string_list(
    obj: &Map<String, Value>,
    ctx: &str,
    field: &str,
) -> Result<Vec<String>, GraphError> {
    required_array(obj, ctx, field)?
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.clone()),
            _ => Err(wrong(ctx, field, "an array of tensor names (strings)")),
        })
        .collect()
}

pub(crate) fn missing(ctx: &str, field: &str) -> GraphError {
    GraphError::MissingField {
        context: ctx.to_string(),
        field: field.to_string(),
    }
}

pub(crate) fn wrong(ctx: &str, field: &str, expected: &str) -> GraphError {
    GraphError::WrongType {
        context: ctx.to_string(),
        field: field.to_string(),
        expected: expected.to_string(),
    }
}

/// A value as a message shows it: its JSON text, cut at 60 characters; a large array or
/// object by its length (not serialised whole only to be cut).
fn display(v: &Value) -> String {
    match v {
        Value::Array(a) if a.len() > 8 => return format!("an array of {} entries", a.len()),
        Value::Object(m) if m.len() > 8 => return format!("an object of {} fields", m.len()),
        _ => {}
    }
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(57).collect::<String>())
    } else {
        s
    }
}
