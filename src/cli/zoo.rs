//! `sgc zoo`: write the model zoo's graph files.

use super::CliResult;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Folder to write `<model>.json` files into (created if missing).
    #[arg(long, default_value = "graphs")]
    out: PathBuf,
    /// Only these models (by name); default: all.
    #[arg(long = "model")]
    models: Vec<String>,
    /// List the models and exit.
    #[arg(long)]
    list: bool,
}

pub fn run(args: Args) -> CliResult {
    let models = sgc::ir::zoo::models();
    if args.list {
        for m in &models {
            println!("{:<20} {}", m.name, m.description);
        }
        return Ok(());
    }
    for name in &args.models {
        if !models.iter().any(|m| m.name == name) {
            let known: Vec<&str> = models.iter().map(|m| m.name).collect();
            return Err(format!("unknown zoo model {name:?}; known: {}", known.join(", ")).into());
        }
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("{}: cannot create folder: {e}", args.out.display()))?;
    for m in models
        .iter()
        .filter(|m| args.models.is_empty() || args.models.iter().any(|n| n == m.name))
    {
        let path = args.out.join(format!("{}.json", m.name));
        let graph = (m.build)();
        sgc::ir::format::save(&graph, &path)
            .map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
        println!(
            "wrote {} ({} ops, {} tensors)",
            path.display(),
            graph.num_ops(),
            graph.num_tensors()
        );
    }
    Ok(())
}
