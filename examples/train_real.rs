//! Trains a real PyTorch export under a memory budget through the library API (no CLI):
//! loads the graph, plans it with the sublinear search under the budget, and trains it for
//! some steps on the CPU or a CUDA device, printing each step's loss, the bytes allocated
//! against the plan's promise, and the step's device time.
//!
//! ```text
//! cargo run --release --example train_real -- [GRAPH] [--device cpu|cuda] [--steps N] [--budget SIZE]
//! cargo run --release --features cuda --example train_real -- graphs/real/resnet50.json.gz --device cuda
//! ```
//!
//! GRAPH defaults to `graphs/real/resnet18.json.gz`, the device to `cpu`, the steps to 5,
//! the budget to three quarters of the unplanned schedule's device bytes (arena plus
//! persistent). A budget the planner cannot meet is reported and the plan closest to it
//! (the lowest peak it found) runs instead.
//!
//! The corpus exports carry no optimizer (`meta.update` is `none`: each parameter's
//! gradient is a graph output named `<param>.grad`), so between steps the loop applies
//! plain SGD on the host: it reads every gradient, and binds the parameter minus `--lr`
//! (default 0.01) times it. Step times are the device's (the executor's marks around the
//! step's launches), without this host work. A graph exported with an SGD update does it
//! in place on the device and has no gradients to read here.

use sgc::exec::{Backend, CpuBackend, CudaBackend, ExecError, Executor, HostTensor};
use sgc::ir::Graph;
use sgc::ir::TensorKind;
use sgc::plan::{Plan, PlanError, PlanOptions, Strategy};
use sgc::units::human_bytes;
use std::error::Error;
use std::path::PathBuf;

/// What to train, where, for how long, under what budget.
pub struct Args {
    pub graph: PathBuf,
    pub cuda: bool,
    pub steps: usize,
    /// Device bytes (arena plus persistent); `None`: 3/4 of the unplanned schedule's.
    pub budget: Option<u64>,
    /// Learning rate of the host-side SGD (see the module docs).
    pub lr: f32,
}

impl Args {
    /// From the command line (see the module docs).
    pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, Box<dyn Error>> {
        let mut a = Args {
            graph: PathBuf::from("graphs/real/resnet18.json.gz"),
            cuda: false,
            steps: 5,
            budget: None,
            lr: 0.01,
        };
        while let Some(arg) = it.next() {
            let mut value = || it.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "--device" => a.cuda = matches!(value()?.as_str(), "cuda"),
                "--steps" => a.steps = value()?.parse()?,
                "--budget" => a.budget = Some(sgc::units::parse_size(&value()?)?),
                "--lr" => a.lr = value()?.parse()?,
                flag if flag.starts_with("--") => {
                    return Err(format!("unknown option {flag}").into())
                }
                path => a.graph = PathBuf::from(path),
            }
        }
        Ok(a)
    }
}

/// What a training run measured.
pub struct Trained {
    pub losses: Vec<f32>,
    /// Bytes the backend allocated (its peak) and what the plan promised.
    pub allocated: u64,
    pub promised: u64,
    /// Device seconds of each step.
    pub step_seconds: Vec<f64>,
    pub recomputed_ops: usize,
}

/// The sublinear plan of `graph` under `budget` device bytes (3/4 of the unplanned
/// schedule's when `None`), or the lowest-peak plan when the budget cannot be met.
pub fn plan_under(graph: &Graph, budget: Option<u64>) -> Result<Plan, Box<dyn Error>> {
    let device_bytes =
        |p: &Plan| p.arena.as_ref().map_or(0, |a| a.size) + p.summary.persistent_bytes;
    let unplanned = sgc::plan::plan(
        graph,
        &PlanOptions {
            strategy: Strategy::None,
            ..Default::default()
        },
        &Default::default(),
    )?;
    let budget = budget.unwrap_or(device_bytes(&unplanned) / 4 * 3);
    let options = |budget: Option<u64>| PlanOptions {
        strategy: Strategy::Sublinear,
        budget,
        ..Default::default()
    };
    let plan = match sgc::plan::plan(graph, &options(Some(budget)), &Default::default()) {
        Err(PlanError::BudgetNotMet { best_peak, .. }) => {
            println!(
                "budget {} not met: the lowest peak found is {}; training that plan",
                human_bytes(budget),
                human_bytes(best_peak)
            );
            sgc::plan::plan(graph, &options(None), &Default::default())?
        }
        other => other?,
    };
    println!(
        "plan: {} on the device (budget {}, unplanned {}), {} ops recomputed, {:.1}% of a step's cost",
        human_bytes(device_bytes(&plan)),
        human_bytes(budget),
        human_bytes(device_bytes(&unplanned)),
        plan.summary.recomputed_ops,
        100.0 * plan.summary.recompute_share
    );
    Ok(plan)
}

/// Trains `graph` by `plan` on `backend` for `steps` steps, printing every step.
pub fn train_on<B: Backend>(
    graph: &Graph,
    plan: &Plan,
    backend: B,
    args: &Args,
) -> Result<Trained, Box<dyn Error>> {
    let steps = args.steps;
    let mut ex = Executor::from_plan(graph, plan, backend)?;
    ex.bind_seeded(0)?;
    let pairs = sgd_pairs(graph);
    println!(
        "step  loss          allocated / promised       time ({})",
        B::CLOCK
    );
    let mut losses = Vec::with_capacity(steps);
    for step in 1..=steps {
        let loss = ex.run(1)?.first().copied().unwrap_or(f32::NAN);
        losses.push(loss);
        sgd(&mut ex, &pairs, args.lr)?;
        let r = ex.report();
        let secs = ex.step_seconds().last().copied().unwrap_or(0.0);
        println!(
            "{step:>4}  {loss:<12.6}  {:>10} / {:<10}  {:>9.3} ms{}",
            human_bytes(r.allocator.allocated_bytes),
            human_bytes(r.planned_bytes),
            secs * 1e3,
            if step == 1 {
                " (first step: one-off costs)"
            } else {
                ""
            }
        );
    }
    let r = ex.report();
    Ok(Trained {
        losses,
        allocated: r.allocator.peak_bytes,
        promised: r.planned_bytes,
        step_seconds: r.step_seconds,
        recomputed_ops: plan.summary.recomputed_ops,
    })
}

/// Each parameter with a gradient among the graph's outputs: (parameter, gradient).
fn sgd_pairs(graph: &Graph) -> Vec<(String, String)> {
    graph
        .tensor_ids()
        .filter(|&t| graph.tensor(t).kind == TensorKind::Param)
        .filter_map(|t| {
            let p = graph.tensor(t).name.clone();
            let g = format!("{p}.grad");
            let id = graph.tensor_by_name(&g)?;
            graph.outputs().contains(&id).then_some((p, g))
        })
        .collect()
}

/// One SGD update on the host: each parameter of `pairs` minus `lr` times its gradient.
fn sgd<B: Backend>(
    ex: &mut Executor<B>,
    pairs: &[(String, String)],
    lr: f32,
) -> Result<(), ExecError> {
    for (p, g) in pairs {
        let (param, grad) = (ex.read(p)?, ex.read(g)?);
        if let (Some(w), Some(d)) = (param.as_f32(), grad.as_f32()) {
            let next = w.iter().zip(d).map(|(w, d)| w - lr * d).collect();
            ex.bind(p, &HostTensor::f32(param.shape.clone(), next))?;
        }
    }
    Ok(())
}

/// Loads, plans and trains as `args` says (the device is opened first: a missing one
/// fails before the planning).
pub fn train(args: &Args) -> Result<Trained, Box<dyn Error>> {
    if args.cuda {
        train_with(args, CudaBackend::new(0)?)
    } else {
        train_with(args, CpuBackend::new())
    }
}

fn train_with<B: Backend>(args: &Args, backend: B) -> Result<Trained, Box<dyn Error>> {
    let graph =
        sgc::ir::load_any(&args.graph).map_err(|e| format!("{}: {e}", args.graph.display()))?;
    println!(
        "{}: {} ops, {} tensors, on {}",
        args.graph.display(),
        graph.num_ops(),
        graph.num_tensors(),
        backend.name()
    );
    let plan = plan_under(&graph, args.budget)?;
    train_on(&graph, &plan, backend, args)
}

#[allow(dead_code)] // the test includes this file as a module and calls `train`
fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse(std::env::args().skip(1))?;
    let t = train(&args)?;
    let mut later = t.step_seconds.iter().skip(1).copied().collect::<Vec<_>>();
    later.sort_by(f64::total_cmp);
    if let Some(median) = later.get(later.len() / 2) {
        println!(
            "median step after the first: {:.3} ms; {} recomputed ops; allocated {} = promised {}",
            median * 1e3,
            t.recomputed_ops,
            human_bytes(t.allocated),
            human_bytes(t.promised)
        );
    }
    if t.allocated != t.promised {
        return Err(format!(
            "allocated {} B, the plan promised {} B",
            t.allocated, t.promised
        )
        .into());
    }
    Ok(())
}
