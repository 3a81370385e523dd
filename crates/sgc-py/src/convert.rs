//! Arguments from Python (graphs, plans, sizes, names) and results to Python (serde data
//! as dicts, through the `json` module, so a dict is exactly the JSON the CLI writes).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};
use serde::Serialize;
use std::path::PathBuf;

/// Where a graph or a plan comes from: a file, or JSON text (a `str` starting with `{`,
/// or a dict dumped by `json.dumps`).
pub enum Source {
    Path(PathBuf),
    Text(String),
}

impl Source {
    /// `obj` as a source: a dict, JSON text, or a path (`str` or `os.PathLike`).
    pub fn of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Source> {
        if obj.cast::<PyDict>().is_ok() {
            let json = obj.py().import("json")?;
            return Ok(Source::Text(json.call_method1("dumps", (obj,))?.extract()?));
        }
        if let Ok(s) = obj.cast::<PyString>() {
            let text: String = s.extract()?;
            if text.trim_start().starts_with('{') {
                return Ok(Source::Text(text));
            }
            return Ok(Source::Path(PathBuf::from(text)));
        }
        obj.extract::<PathBuf>().map(Source::Path).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be a path, JSON text or a dict, not {}",
                type_name(obj)
            ))
        })
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

/// A size in bytes: an int, or a string the command line accepts (`10GiB`, `1.5GB`, `512`).
pub fn size(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if obj.cast::<PyBool>().is_ok() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a size in bytes (an int or a string such as \"10GiB\"), not a bool"
        )));
    }
    if obj.cast::<PyInt>().is_ok() {
        return obj.extract::<u64>().map_err(|_| {
            PyValueError::new_err(format!(
                "invalid size {obj} for {what}: a size is at least 0 and at most {} bytes",
                u64::MAX
            ))
        });
    }
    if let Ok(s) = obj.cast::<PyString>() {
        let text: String = s.extract()?;
        return sgc::units::parse_size(&text).map_err(PyValueError::new_err);
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be a size in bytes (an int or a string such as \"10GiB\"), not {}",
        type_name(obj)
    )))
}

/// A count argument (`genetic_iters=20`): an int in `range`, taken signed. A bool or
/// another type is a `TypeError`; an int out of range a `ValueError` naming the argument as
/// the CLI names its flag ("genetic_iters must be a whole number of 0 or more, got -5";
/// pyo3's own conversion raised `OverflowError: can't convert negative int to unsigned`).
pub fn count(
    obj: &Bound<'_, PyAny>,
    what: &str,
    range: std::ops::RangeInclusive<u64>,
) -> PyResult<u64> {
    if obj.cast::<PyBool>().is_ok() || obj.cast::<PyInt>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            type_name(obj)
        )));
    }
    obj.extract::<i128>()
        .ok()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "{what} must be {}, got {obj}",
                sgc::units::count_takes(&range)
            ))
        })
}

/// The count arguments, each by its name and range (for `#[pyo3(from_py_with = ...)]`);
/// an optional one (`workers=None`) is None when given None.
pub mod counts {
    use super::count;
    use pyo3::prelude::*;

    fn to<T: TryFrom<u64>>(n: u64, what: &str) -> PyResult<T> {
        T::try_from(n).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!("{what}={n}: too large here"))
        })
    }

    macro_rules! named_counts {
        ($($name:ident: $t:ty = $range:expr),* $(,)?) => {$(
            pub fn $name(obj: &Bound<'_, PyAny>) -> PyResult<$t> {
                to(count(obj, stringify!($name), $range)?, stringify!($name))
            }
        )*};
    }
    macro_rules! optional_counts {
        ($($name:ident: $t:ty = $range:expr),* $(,)?) => {$(
            pub fn $name(obj: &Bound<'_, PyAny>) -> PyResult<Option<$t>> {
                if obj.is_none() {
                    return Ok(None);
                }
                to(count(obj, stringify!($name), $range)?, stringify!($name)).map(Some)
            }
        )*};
    }
    named_counts!(
        genetic_iters: usize = 0..=u64::MAX,
        thresh_tries: usize = 0..=u64::MAX,
        pool_size: usize = 0..=u64::MAX,
        seed: u64 = 0..=u64::MAX,
        steps: usize = 0..=u64::MAX,
        top: usize = 0..=u64::MAX,
        world_size: u64 = 1..=u64::MAX,
    );
    optional_counts!(
        workers: usize = sgc::defaults::WORKERS,
        time_limit_s: u64 = 1..=u64::MAX,
    );
    /// `execute`'s seed (None: the graph's own values).
    pub fn opt_seed(obj: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        if obj.is_none() {
            return Ok(None);
        }
        seed(obj).map(Some)
    }
}

/// An optional size.
pub fn opt_size(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<u64>> {
    obj.filter(|o| !o.is_none())
        .map(|o| size(o, what))
        .transpose()
}

/// `budget=`: a size ([`size`]), or a string share of the unplanned figure (`"70%"`,
/// [`sgc::budget::Budget::parse`]); `None` stays `None`.
pub fn budget(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<sgc::budget::Budget>> {
    let Some(o) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if let Ok(s) = o.cast::<PyString>() {
        let text: String = s.extract()?;
        return sgc::budget::Budget::parse(&text)
            .map(Some)
            .map_err(|e| PyValueError::new_err(format!("budget: {e}")));
    }
    size(o, "budget").map(|b| Some(sgc::budget::Budget::Bytes(b)))
}

/// A value parsed from its command-line name (`FromStr` with the CLI's message).
pub fn named<T>(text: &str) -> PyResult<T>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    text.parse::<T>()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Serde data as the Python object `json.loads` makes of its JSON.
pub fn to_py<T: Serialize>(py: Python<'_>, value: &T) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(value)
        .map_err(|e| PyValueError::new_err(format!("cannot serialise: {e}")))?;
    json_loads(py, &text)
}

/// `json.loads(text)`.
pub fn json_loads(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

/// A host link as `--host-link` takes it: a profile name (`h100`) or
/// `TO_HOST_GBPS,TO_DEVICE_GBPS[,LATENCY_US]`.
pub fn host_link(text: &str) -> PyResult<sgc::plan::streams::HostLink> {
    sgc::plan::streams::HostLink::parse(text).map_err(PyValueError::new_err)
}

/// Op indices as the graph's op ids, each checked.
pub fn op_ids(graph: &sgc::ir::Graph, indices: &[usize]) -> PyResult<Vec<sgc::ir::OpId>> {
    let ids: Vec<sgc::ir::OpId> = graph.op_ids().collect();
    indices
        .iter()
        .map(|&i| {
            ids.get(i).copied().ok_or_else(|| {
                PyValueError::new_err(format!(
                    "step op {i} is not an op of the graph (it has {} ops, indices 0..{})",
                    ids.len(),
                    ids.len()
                ))
            })
        })
        .collect()
}

/// A Python object (through `json.dumps`) as serde data.
pub fn from_py<T: serde::de::DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    let json = obj.py().import("json")?;
    let text: String = json
        .call_method1("dumps", (obj,))
        .map_err(|e| PyTypeError::new_err(format!("{what}: not JSON data: {e}")))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}
