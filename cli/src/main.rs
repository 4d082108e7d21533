//! `apf`: try an API Priority and Fairness configuration before it goes
//! live. `apf simulate` runs a workload against it on a simulated clock,
//! `apf check` validates it, `apf classify` shows where a request lands,
//! `apf defaults` prints Kubernetes' built-in configuration.
//!
//! The tool lives in `cli.rs`; loom builds (`scripts/loom.sh`, which model
//! the library's concurrency and compile the binaries for the integration
//! tests) get an empty `main`, as the simulator is left out of them.

#[cfg(not(loom))]
mod cli;

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(loom)]
fn main() {}
