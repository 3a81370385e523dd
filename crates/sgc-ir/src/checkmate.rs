//! Import of Checkmate / Moccasin graphs (NetworkX node-link JSON) into ordinary graphs.
//!
//! Two variants exist (see `shared/data/checkmate/README.md`):
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
use std::collections::{BTreeMap, HashMap};

/// Whether a parsed JSON document looks like NetworkX node-link data.
pub fn is_node_link(v: &Value) -> bool {
    v.get("nodes").is_some_and(Value::is_array) && v.get("links").is_some_and(Value::is_array)
}

/// Imports a node-link document.
pub fn import(v: &Value) -> Result<Graph, GraphError> {
    Graph::from_def(import_def(v)?)
}

struct Node {
    name: String,
    bytes: u64,
    cost: f64,
    backward: Option<bool>,
}

/// Converts a node-link document into a graph definition.
pub fn import_def(v: &Value) -> Result<GraphDef, GraphError> {
    let nodes_v = v["nodes"]
        .as_array()
        .ok_or_else(|| wrong("graph", "nodes", "an array"))?;
    let links_v = v["links"]
        .as_array()
        .ok_or_else(|| wrong("graph", "links", "an array"))?;
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    let mut key_order: Vec<(KeyOrd, String)> = Vec::new();
    for (i, n) in nodes_v.iter().enumerate() {
        let (key, node) = node(n, i)?;
        key_order.push((KeyOrd::of(n.get("id").unwrap_or(&n["name"])), key.clone()));
        if nodes.insert(key.clone(), node).is_some() {
            return Err(GraphError::DuplicateOp(key));
        }
    }
    let order = execution_order(v, key_order)?;
    let mut preds: HashMap<String, Vec<String>> = HashMap::new();
    for (i, l) in links_v.iter().enumerate() {
        let (s, t) = link(l, i)?;
        for end in [&s, &t] {
            if !nodes.contains_key(end) {
                return Err(GraphError::UndeclaredTensor {
                    op: format!("link #{i}"),
                    tensor: end.clone(),
                });
            }
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
    let bytes_v = n
        .get("cost_ram")
        .or_else(|| n.get("out_cost"))
        .ok_or_else(|| missing(&ctx, "cost_ram"))?;
    let bytes = bytes_v
        .as_u64()
        .ok_or_else(|| wrong(&ctx, "cost_ram", "a whole number of bytes"))?;
    let cost_v = n
        .get("cost_cpu")
        .or_else(|| n.get("duration"))
        .ok_or_else(|| missing(&ctx, "cost_cpu"))?;
    let cost = cost_v
        .to_string()
        .parse::<f64>()
        .ok()
        .filter(|c| c.is_finite() && *c >= 0.0)
        .ok_or_else(|| GraphError::BadCost {
            op: name.clone(),
            field: "cost_cpu".into(),
            value: cost_v.to_string(),
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
            name,
            bytes,
            cost,
            backward,
        },
    ))
}

fn link(l: &Value, i: usize) -> Result<(String, String), GraphError> {
    let ctx = format!("link #{i}");
    let end = |a: &str, b: &str| {
        l.get(a)
            .or_else(|| l.get(b))
            .and_then(scalar_key)
            .ok_or_else(|| missing(&ctx, a))
    };
    Ok((end("source", "0")?, end("target", "1")?))
}

/// Node ids in numeric order when they are numbers (`graph.order` wins when present).
fn execution_order(v: &Value, mut keys: Vec<(KeyOrd, String)>) -> Result<Vec<String>, GraphError> {
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
        if let Some(unknown) = order
            .iter()
            .find(|k| !keys.iter().any(|(_, key)| key == *k))
        {
            return Err(wrong(
                "graph",
                "graph.order",
                &format!("a list of the node ids (`{unknown}` is not a node)"),
            ));
        }
        return Ok(order);
    }
    keys.sort();
    Ok(keys.into_iter().map(|(_, k)| k).collect())
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
