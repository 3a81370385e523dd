//! Typed errors of the IR crate. Every variant names the op or tensor at fault (or the
//! JSON line and column) and its message ends with what to do about it.

use thiserror::Error;

/// Why a graph could not be loaded, validated or built.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum GraphError {
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the text is empty: a graph file is one JSON object with \"format\": \"sgc-graph\"")]
    Empty,
    #[error("{context} must be a JSON object, found {found}")]
    NotAnObject { context: String, found: String },
    #[error("{context}: missing required field `{field}`")]
    MissingField { context: String, field: String },
    #[error("{context}: field `{field}` must be {expected}")]
    WrongType {
        context: String,
        field: String,
        expected: String,
    },
    #[error("{context}: unknown field `{field}` (a version-1 reader accepts only the fields of the format doc)")]
    UnknownField { context: String, field: String },
    #[error("unknown format {0}: a graph file has \"format\": \"sgc-graph\"")]
    UnknownFormat(String),
    #[error("unsupported version {0}: this reader understands version 1")]
    UnsupportedVersion(String),
    #[error("tensor `{tensor}`: unknown dtype {dtype:?} (one of f64 f32 f16 bf16 i64 i32 i16 i8 u8 bool)")]
    UnknownDtype { tensor: String, dtype: String },
    #[error(
        "tensor `{tensor}`: unknown kind {kind:?} (one of activation input param state const)"
    )]
    UnknownKind { tensor: String, kind: String },
    #[error("op `{op}`: unknown phase {phase:?} (one of forward backward update)")]
    UnknownPhase { op: String, phase: String },
    #[error("tensor `{0}` is declared twice: tensor names must be unique")]
    DuplicateTensor(String),
    #[error("op `{0}` is declared twice: op names must be unique")]
    DuplicateOp(String),
    #[error("op `{op}` names tensor `{tensor}`, which is not declared in `tensors`")]
    UndeclaredTensor { op: String, tensor: String },
    #[error("tensor `{tensor}` is produced twice, by op `{first}` and by op `{second}`: an activation has one producer")]
    ProducedTwice {
        tensor: String,
        first: String,
        second: String,
    },
    #[error("tensor `{0}` is an activation that no op produces: add its producer or declare it as an input, param, state or const")]
    NeverProduced(String),
    #[error(
        "op `{op}` produces tensor `{tensor}` of kind {kind}: ops may only produce activations"
    )]
    NonActivationProduced {
        op: String,
        tensor: String,
        kind: String,
    },
    #[error("op `{op}` reads tensor `{tensor}` before op `{producer}` produces it: `ops` must be in a valid execution order")]
    ReadBeforeProduced {
        op: String,
        tensor: String,
        producer: String,
    },
    #[error("`outputs` names tensor `{0}`, which is not declared in `tensors`")]
    UndeclaredOutput(String),
    #[error("`loss` names tensor `{0}`, which is not declared in `tensors`")]
    UndeclaredLoss(String),
    #[error("tensor `{tensor}`: {what} overflows 64 bits")]
    SizeOverflow { tensor: String, what: String },
    #[error("tensor `{tensor}`: {what} {value} is not an integer >= 0")]
    BadShape {
        tensor: String,
        /// `shape entry` or `bytes`.
        what: String,
        value: String,
    },
    #[error("tensor `{tensor}`: batch_dim {batch_dim} is not an axis of its {rank}-d shape")]
    BadBatchDim {
        tensor: String,
        batch_dim: String,
        rank: usize,
    },
    #[error("op `{op}`: {field} is {value}; a cost must be a finite number >= 0")]
    BadCost {
        op: String,
        field: String,
        value: String,
    },
    #[error("op `{op}` (type `{op_type}`) {effect} but is marked recomputable (\"recomputable\": true): a planner would run it again; leave the field out (the op table's default) or set it to false")]
    EffectfulRecomputable {
        op: String,
        op_type: String,
        /// What the op table says the type does: `draws random numbers` or `writes state`.
        effect: &'static str,
    },
    #[error("op `{op}`: inplace pair {pair} is invalid: {why}")]
    BadInplace {
        op: String,
        pair: String,
        why: String,
    },
    #[error("tensor `{tensor}`: alias_of names tensor `{alias_of}`, which is not declared")]
    UndeclaredAlias { tensor: String, alias_of: String },
    #[error(
        "tensor `{0}`: alias_of forms a cycle; a view must lead back to a tensor that owns storage"
    )]
    AliasCycle(String),
    #[error("op `{op}` uses view `{view}` of tensor `{base}` before op `{producer}` produces `{base}`: a view's storage must exist when the view is made or read")]
    ViewBeforeBase {
        op: String,
        view: String,
        base: String,
        producer: String,
    },
    #[error("link #{link}: {end} `{node}` is not the id of any node")]
    UnknownNode {
        link: usize,
        /// `source` or `target`.
        end: &'static str,
        node: String,
    },
    #[error("{context}: {what} `{value}` is also the {what} of node #{first}: node ids and names must be unique")]
    DuplicateNode {
        context: String,
        /// `id` or `name`.
        what: &'static str,
        value: String,
        first: usize,
    },
    #[error("link #{link} from node `{from}` to node `{to}` {why}: a node reads only nodes that run before it ({order})")]
    LinkAgainstOrder {
        link: usize,
        from: String,
        to: String,
        /// `goes backwards` or `is a self-loop`.
        why: &'static str,
        /// How the execution order was given (`graph.order` or ascending node ids).
        order: &'static str,
    },
}

impl GraphError {
    /// Builds a [`GraphError::Json`] from a serde_json error on `text`. serde_json counts
    /// columns in bytes; the error counts characters, as editors show them (a line with
    /// `é` before the error would otherwise point one column too far).
    pub fn from_json(e: &serde_json::Error, text: &str) -> Self {
        let message = e.to_string();
        // serde_json appends " at line L column C"; keep the message without it.
        let message = match message.rfind(" at line ") {
            Some(i) => message[..i].to_string(),
            None => message,
        };
        let line = e.line();
        let bytes = text
            .split('\n')
            .nth(line.saturating_sub(1))
            .map_or(&[][..], str::as_bytes);
        // A byte column inside a character counts that character.
        let prefix = &bytes[..e.column().min(bytes.len())];
        GraphError::Json {
            line,
            column: String::from_utf8_lossy(prefix).chars().count(),
            message,
        }
    }

    /// The op or tensor the error is about, when it names one.
    pub fn subject(&self) -> Option<&str> {
        use GraphError::*;
        match self {
            UnknownDtype { tensor, .. }
            | UnknownKind { tensor, .. }
            | SizeOverflow { tensor, .. }
            | BadShape { tensor, .. }
            | BadBatchDim { tensor, .. }
            | UndeclaredAlias { tensor, .. }
            | ProducedTwice { tensor, .. } => Some(tensor),
            DuplicateTensor(t) | NeverProduced(t) | UndeclaredOutput(t) | UndeclaredLoss(t)
            | AliasCycle(t) => Some(t),
            UnknownPhase { op, .. }
            | UndeclaredTensor { op, .. }
            | NonActivationProduced { op, .. }
            | ReadBeforeProduced { op, .. }
            | ViewBeforeBase { op, .. }
            | BadCost { op, .. }
            | BadInplace { op, .. }
            | EffectfulRecomputable { op, .. } => Some(op),
            DuplicateOp(o) => Some(o),
            LinkAgainstOrder { to, .. } => Some(to),
            UnknownNode { node, .. } => Some(node),
            DuplicateNode { value, .. } => Some(value),
            _ => None,
        }
    }
}

/// Loading a file: the graph error plus the path, or an I/O failure.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Graph {
        path: String,
        #[source]
        source: GraphError,
    },
    #[error("{path}: the file starts like gzip but cannot be decompressed ({source}): it is truncated or corrupt; compress the graph again (`gzip -k FILE.json`)")]
    Gzip {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl LoadError {
    /// The graph error, when the file was read but is not a valid graph.
    pub fn graph_error(&self) -> Option<&GraphError> {
        match self {
            LoadError::Graph { source, .. } => Some(source),
            LoadError::Io { .. } | LoadError::Gzip { .. } => None,
        }
    }
}
