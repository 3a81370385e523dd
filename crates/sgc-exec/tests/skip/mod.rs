//! A test harness (libtest-mimic, `harness = false`) whose tests can be skipped at run time:
//! a test that needs something this machine lacks (a CUDA device, NVRTC) prints why and is
//! counted as ignored, never as passed, so `cargo test`'s summary says what did not run.

use libtest_mimic::{Arguments, Trial};

/// A test running `f`.
pub fn test(name: &str, f: fn()) -> Trial {
    Trial::test(name, move || {
        f();
        Ok(())
    })
}

/// `trial`, skipped (counted as ignored) with `reason` printed when there is one.
pub fn unless(trial: Trial, reason: &Option<String>) -> Trial {
    match reason {
        Some(why) => {
            println!("skipped {}: {why}", trial.name());
            trial.with_ignored_flag(true)
        }
        None => trial,
    }
}

/// Runs the trials with the arguments `cargo test` passed and exits.
pub fn run(trials: Vec<Trial>) -> ! {
    libtest_mimic::run(&Arguments::from_args(), trials).exit()
}
