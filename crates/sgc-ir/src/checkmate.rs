//! Import of Checkmate / Moccasin graphs (NetworkX node-link JSON) into ordinary graphs.
//!
//! Two variants exist (see `benches/data/checkmate/README.md`):
//! - model graphs: nodes carry `id`, `name`, `cost_ram`, `cost_cpu`, `backward`; links
//!   have `source`/`target` node ids; ids in increasing order are the execution order.
//! - random layered graphs: nodes carry `name` (the id), `out_cost`, `duration`,
//!   `param_cost`; links use the keys `"0"` (source) and `"1"` (target); `graph.order`
//!   gives the execution order.
//!
//! Each node becomes an op with one activation output of the node's bytes (dtype `u8`,
//! shape `[bytes]`) and the node's cost as `time_us` (the unit is arbitrary, recorded in
//! `meta`). An edge u -> v makes v read u's output. `outputs` is empty, as in Checkmate's
//! own model, so a node nothing reads is freed right after it is made.

use crate::error::GraphError;
use crate::format::{missing, wrong};
use crate::graph::{Graph, GraphDef, OpDef, TensorDef};
use crate::ids::{DType, Phase};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Whether a parsed JSON document looks like NetworkX node-link data.
pub fn is_node_link(v: &Value) -> bool {
    v.get("nodes").is_some_and(Value::is_array) && v.get("links").is_some_and(Value::is_array)
}

/// Imports a node-link document.
pub fn import(v: &Value) -> Result<Graph, GraphError> {
    Graph::from_def(import_def(v)?)
}

struct Node {
    /// Position in `nodes`.
    index: usize,
    name: String,
    bytes: u64,
    /// The field the bytes came from (`cost_ram` or `out_cost`).
    bytes_field: &'static str,
    cost: f64,
    backward: Option<bool>,
}

fn duplicate(ctx: &str, what: &'static str, value: &str, first: usize) -> GraphError {
    GraphError::DuplicateNode {
        context: ctx.to_string(),
        what,
        value: value.to_string(),
        first,
    }
}

/// `n[a]`, else `n[b]`, with the name of the field found.
fn field<'v>(n: &'v Value, a: &'static str, b: &'static str) -> Option<(&'static str, &'v Value)> {
    n.get(a)
        .map(|v| (a, v))
        .or_else(|| n.get(b).map(|v| (b, v)))
}

/// Converts a node-link document into a graph definition. Every error is in the file's
/// own terms (node #position and name, link #position, the field as written): the
/// definition it returns always validates, so no error speaks of ops and tensors that the
/// file never mentions.
pub fn import_def(v: &Value) -> Result<GraphDef, GraphError> {
    let nodes_v = v["nodes"]
        .as_array()
        .ok_or_else(|| wrong("graph", "nodes", "an array"))?;
    let links_v = v["links"]
        .as_array()
        .ok_or_else(|| wrong("graph", "links", "an array"))?;
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    let mut key_order: Vec<(KeyOrd, String)> = Vec::new();
    let mut first_with_name: HashMap<String, usize> = HashMap::new();
    let mut total = 0u64;
    for (i, n) in nodes_v.iter().enumerate() {
        let (key, node) = node(n, i)?;
        let ctx = format!("node #{i} (`{}`)", node.name);
        if let Some(first) = nodes.get(&key).map(|f| f.index) {
            return Err(duplicate(&ctx, "id", &key, first));
        }
        if let Some(&first) = first_with_name.get(&node.name) {
            return Err(duplicate(&ctx, "name", &node.name, first));
        }
        total = total.checked_add(node.bytes).ok_or_else(|| {
            wrong(
                &ctx,
                node.bytes_field,
                "a size that, added to the nodes before it, fits in 64 bits (the sum overflows)",
            )
        })?;
        key_order.push((KeyOrd::of(n.get("id").unwrap_or(&n["name"])), key.clone()));
        first_with_name.insert(node.name.clone(), i);
        nodes.insert(key, node);
    }
    let (order, order_source) = execution_order(v, key_order)?;
    let position: HashMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(p, k)| (k.as_str(), p))
        .collect();
    let mut preds: HashMap<String, Vec<String>> = HashMap::new();
    for (i, l) in links_v.iter().enumerate() {
        let (s, t) = link(l, i)?;
        for (end, key) in [("source", &s), ("target", &t)] {
            if !nodes.contains_key(key) {
                return Err(GraphError::UnknownNode {
                    link: i,
                    end,
                    node: key.clone(),
                });
            }
        }
        if position[s.as_str()] >= position[t.as_str()] {
            let why = if s == t {
                "is a self-loop"
            } else {
                "goes backwards"
            };
            return Err(GraphError::LinkAgainstOrder {
                link: i,
                from: nodes[&s].name.clone(),
                to: nodes[&t].name.clone(),
                why,
                order: order_source,
            });
        }
        preds.entry(t).or_default().push(s);
    }
    let out = |key: &str| format!("{}:out", nodes[key].name);
    let mut tensors = Vec::with_capacity(order.len());
    let mut ops = Vec::with_capacity(order.len());
    for key in &order {
        let node = &nodes[key];
        tensors.push(TensorDef::new(out(key), DType::U8, vec![node.bytes]));
        let mut inputs: Vec<String> = preds
            .get(key)
            .into_iter()
            .flatten()
            .map(|p| out(p))
            .collect();
        inputs.sort();
        inputs.dedup();
        let mut op = OpDef::new(node.name.clone(), "checkmate_node", inputs, vec![out(key)]);
        op.time_us = Some(node.cost);
        op.phase = node
            .backward
            .map(|b| if b { Phase::Backward } else { Phase::Forward });
        ops.push(op);
    }
    let mut meta = Map::new();
    meta.insert("source".into(), Value::from("checkmate node-link import"));
    meta.insert(
        "cost_unit".into(),
        Value::from("profiled cost in an arbitrary unit, stored as time_us"),
    );
    let name = v
        .get("graph")
        .and_then(|g| g.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(GraphDef {
        name,
        tensors,
        ops,
        outputs: Vec::new(),
        loss: None,
        meta: Some(meta),
    })
}

fn node(n: &Value, i: usize) -> Result<(String, Node), GraphError> {
    if !n.is_object() {
        return Err(wrong("graph", &format!("nodes[{i}]"), "an object"));
    }
    let ctx = format!("node #{i}");
    let key_v = n
        .get("id")
        .or_else(|| n.get("name"))
        .ok_or_else(|| missing(&ctx, "id"))?;
    let key = scalar_key(key_v).ok_or_else(|| wrong(&ctx, "id", "a number or string"))?;
    let name = n
        .get("name")
        .and_then(scalar_key)
        .unwrap_or_else(|| key.clone());
    let name = if n.get("id").is_some() {
        name
    } else {
        format!("node{name}")
    };
    // From here on, errors name the node as well as its position.
    let ctx = format!("node #{i} (`{name}`)");
    // A missing field is named as the file's variant spells it.
    let (ram, cpu) = if n.get("id").is_some() {
        ("cost_ram", "cost_cpu")
    } else {
        ("out_cost", "duration")
    };
    let (bytes_field, bytes_v) =
        field(n, "cost_ram", "out_cost").ok_or_else(|| missing(&ctx, ram))?;
    let bytes = bytes_v.as_u64().ok_or_else(|| {
        wrong(
            &ctx,
            bytes_field,
            &format!(
                "a whole number of bytes within 64 bits (found {})",
                short(bytes_v)
            ),
        )
    })?;
    let (cost_field, cost_v) =
        field(n, "cost_cpu", "duration").ok_or_else(|| missing(&ctx, cpu))?;
    let cost = cost_v
        .as_number()
        .and_then(|c| c.to_string().parse::<f64>().ok())
        .filter(|c| c.is_finite() && *c >= 0.0)
        .ok_or_else(|| {
            wrong(
                &ctx,
                cost_field,
                &format!("a finite number >= 0 (found {})", short(cost_v)),
            )
        })?;
    let backward = match n.get("backward") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_bool()
                .ok_or_else(|| wrong(&ctx, "backward", "true or false"))?,
        ),
    };
    Ok((
        key,
        Node {
            index: i,
            name,
            bytes,
            bytes_field,
            cost,
            backward,
        },
    ))
}

/// A value's JSON text for a message, cut at 40 characters.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(37).collect::<String>())
    } else {
        s
    }
}

fn link(l: &Value, i: usize) -> Result<(String, String), GraphError> {
    let ctx = format!("link #{i}");
    if !l.is_object() {
        return Err(wrong(
            "graph",
            &format!("links[{i}]"),
            "an object with source and target",
        ));
    }
    let end = |a: &'static str, b: &'static str| {
        let (name, v) = field(l, a, b).ok_or_else(|| missing(&ctx, a))?;
        scalar_key(v).ok_or_else(|| wrong(&ctx, name, "a node id (a number or string)"))
    };
    Ok((end("source", "0")?, end("target", "1")?))
}

/// Node ids in numeric order when they are numbers (`graph.order` wins when present), and
/// how the order was given, for messages.
fn execution_order(
    v: &Value,
    mut keys: Vec<(KeyOrd, String)>,
) -> Result<(Vec<String>, &'static str), GraphError> {
    if let Some(order) = v.get("graph").and_then(|g| g.get("order")) {
        let arr = order
            .as_array()
            .ok_or_else(|| wrong("graph", "graph.order", "an array"))?;
        let order: Vec<String> = arr
            .iter()
            .map(|k| {
                scalar_key(k).ok_or_else(|| wrong("graph", "graph.order", "an array of node ids"))
            })
            .collect::<Result<_, _>>()?;
        let known: HashSet<&String> = keys.iter().map(|(_, k)| k).collect();
        let mut listed = HashSet::new();
        for k in &order {
            if !known.contains(k) {
                return Err(wrong(
                    "graph",
                    "graph.order",
                    &format!("a list of the node ids (`{k}` is not a node)"),
                ));
            }
            if !listed.insert(k) {
                return Err(wrong(
                    "graph",
                    "graph.order",
                    &format!("a list of the node ids, each once (`{k}` is listed twice)"),
                ));
            }
        }
        if order.len() != keys.len() {
            return Err(wrong(
                "graph",
                "graph.order",
                &format!(
                    "a list of all {} nodes (it has {})",
                    keys.len(),
                    order.len()
                ),
            ));
        }
        return Ok((order, "the order of `graph.order`"));
    }
    keys.sort();
    Ok((
        keys.into_iter().map(|(_, k)| k).collect(),
        "node ids in ascending order",
    ))
}

/// Sort key: numbers by value, then strings.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum KeyOrd {
    Num(i128),
    Text(String),
}

impl KeyOrd {
    fn of(v: &Value) -> Self {
        match v.as_i64() {
            Some(n) => KeyOrd::Num(n as i128),
            None => KeyOrd::Text(scalar_key(v).unwrap_or_default()),
        }
    }
}

fn scalar_key(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
