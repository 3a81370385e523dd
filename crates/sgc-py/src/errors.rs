//! The exceptions of the `sgc` module and the conversion of the library's errors into
//! them. Every exception carries the message the command line prints after `error: `
//! (the file, then the library's one-line message); some carry the error's figures as
//! attributes too (`BudgetNotMet.budget`, `PlanRejected.violations`). Where the library's
//! message names a command-line option (`--genetic-iters`), the exception names the
//! keyword argument instead (`genetic_iters`).

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use sgc::ir::LoadError;
use sgc::plan::fit::FitError;
use sgc::plan::{CheckError, PlanError as RustPlanError};

create_exception!(
    sgc,
    SgcError,
    PyException,
    "Base class of every error sgc raises."
);
create_exception!(
    sgc,
    GraphError,
    SgcError,
    "A graph could not be read or is not valid: the message names the file, the JSON line and column, or the op or tensor at fault."
);
create_exception!(
    sgc,
    PlanError,
    SgcError,
    "No plan could be made, read or accepted."
);
create_exception!(
    sgc,
    BudgetNotMet,
    PlanError,
    "No plan fits the budget: attributes budget, best_device (None when no plan was placed), best_peak and lower_bound, in bytes."
);
create_exception!(
    sgc,
    GraphMismatch,
    PlanError,
    "A plan was made for another graph (its fingerprint differs)."
);
create_exception!(
    sgc,
    PlanRejected,
    PlanError,
    "The verifier refuses the plan: attribute violations lists every violation found."
);

/// `"{file}: {message}"`, or the message alone when the input was not a file; in Python's
/// words ([`python_words`]).
fn located(file: Option<&str>, message: impl std::fmt::Display) -> String {
    let message = python_words(&message.to_string());
    match file {
        Some(f) => format!("{f}: {message}"),
        None => message,
    }
}

/// The library's messages name the command line's options (`--genetic-iters`); from
/// Python they are the keyword arguments of the same name (`genetic_iters`).
pub(crate) fn python_words(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("--") {
        let (before, flag) = rest.split_at(at);
        out.push_str(before);
        let starts_word = before
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || "(`/".contains(c));
        let name_len = flag[2..]
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(flag.len() - 2);
        let name = &flag[2..2 + name_len];
        if starts_word && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push_str(&name.replace('-', "_"));
            rest = &flag[2 + name_len..];
        } else {
            out.push_str("--");
            rest = &flag[2..];
        }
    }
    out.push_str(rest);
    out
}

/// An exception of type `T` with `message` and these attributes set on it.
fn with_attrs<T: pyo3::PyTypeInfo>(
    py: Python<'_>,
    message: String,
    attrs: &[(&str, Py<PyAny>)],
) -> PyErr {
    let err = PyErr::new::<T, _>(message);
    let value = err.value(py);
    for (name, v) in attrs {
        if let Err(e) = value.setattr(*name, v) {
            return e;
        }
    }
    err
}

/// A file that could not be read, or a graph that is not valid.
pub fn load_error(e: &LoadError) -> PyErr {
    GraphError::new_err(python_words(&e.to_string()))
}

/// A graph text (not a file) that is not valid.
pub fn graph_error(e: &sgc::ir::GraphError) -> PyErr {
    GraphError::new_err(python_words(&e.to_string()))
}

/// `BudgetNotMet` for a budget below a bound, no plan made: no peak or device bytes reached.
fn unreached(py: Python<'_>, message: String, budget: u64, bound: u64) -> PyErr {
    let int = |v: u64| v.into_pyobject(py).map(|b| b.into_any().unbind());
    match (int(budget), int(bound)) {
        (Ok(b), Ok(l)) => with_attrs::<BudgetNotMet>(
            py,
            message,
            &[
                ("budget", b),
                ("best_peak", py.None()),
                ("best_device", py.None()),
                ("lower_bound", l),
            ],
        ),
        _ => BudgetNotMet::new_err(message),
    }
}

/// A planner error, prefixed by the graph's file when there is one.
pub fn plan_error(py: Python<'_>, e: RustPlanError, file: Option<&str>) -> PyErr {
    let message = located(file, &e);
    let int = |v: u64| v.into_pyobject(py).map(|b| b.into_any().unbind());
    let none = || py.None();
    match e {
        RustPlanError::BudgetNotMet {
            budget,
            best_peak,
            best_device,
            lower_bound,
            ..
        } => {
            let device = best_device.map_or_else(|| Ok(none()), int);
            match (int(budget), int(best_peak), device, int(lower_bound)) {
                (Ok(b), Ok(p), Ok(d), Ok(l)) => with_attrs::<BudgetNotMet>(
                    py,
                    message,
                    &[
                        ("budget", b),
                        ("best_peak", p),
                        ("best_device", d),
                        ("lower_bound", l),
                    ],
                ),
                _ => BudgetNotMet::new_err(message),
            }
        }
        RustPlanError::BudgetBelowLowerBound {
            budget,
            lower_bound,
            ..
        } => unreached(py, message, budget, lower_bound),
        // For a budget of saved bytes the bound is the least any partition keeps.
        RustPlanError::SavedBudgetNotMet { budget, lowest } => {
            unreached(py, message, budget, lowest)
        }
        RustPlanError::Rejected { violations, .. } => {
            let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
            rejected(py, message, list)
        }
        RustPlanError::GraphMismatch { .. } => GraphMismatch::new_err(message),
        // A strategy that does not apply to this graph is a wrong argument, like a bad option.
        RustPlanError::InvalidOption(_) | RustPlanError::NotAChain(_) => {
            PyValueError::new_err(message)
        }
        _ => PlanError::new_err(message),
    }
}

/// `PlanRejected` listing `violations`.
fn rejected(py: Python<'_>, message: String, violations: Vec<String>) -> PyErr {
    match violations.into_pyobject(py) {
        Ok(list) => with_attrs::<PlanRejected>(py, message, &[("violations", list.unbind())]),
        Err(e) => e,
    }
}

/// Why [`sgc::plan::check`] refused a plan.
pub fn check_error(py: Python<'_>, e: CheckError, file: Option<&str>) -> PyErr {
    let message = located(file, &e);
    let violations = match e {
        CheckError::Violations(v) => v.iter().map(ToString::to_string).collect(),
        CheckError::OverBudget { .. } | CheckError::Summary(_) => vec![e.to_string()],
    };
    rejected(py, message, violations)
}

/// Why a fit search could not run.
pub fn fit_error(py: Python<'_>, e: FitError, file: Option<&str>) -> PyErr {
    match e {
        FitError::Rescale(r) => GraphError::new_err(located(file, r)),
        FitError::Plan {
            batch,
            strategy,
            source,
        } => {
            let file = located(file, format!("batch {batch}, strategy {strategy}"));
            plan_error(py, source, Some(&file))
        }
        FitError::PersistentAboveLimit { persistent, limit } => {
            unreached(py, located(file, &e), limit, persistent)
        }
    }
}

/// Registers the exception classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SgcError", py.get_type::<SgcError>())?;
    m.add("GraphError", py.get_type::<GraphError>())?;
    m.add("PlanError", py.get_type::<PlanError>())?;
    m.add("BudgetNotMet", py.get_type::<BudgetNotMet>())?;
    m.add("GraphMismatch", py.get_type::<GraphMismatch>())?;
    m.add("PlanRejected", py.get_type::<PlanRejected>())?;
    Ok(())
}
