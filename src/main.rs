//! The `sgc` command line. Every subcommand lives in its own module under `cli/`; errors
//! become one readable message on stderr and a non-zero exit code.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
