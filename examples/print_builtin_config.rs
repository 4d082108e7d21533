//! Prints Kubernetes' bootstrap API Priority and Fairness configuration, as
//! built into libapf, in a form `kubectl apply -f -` accepts.
//!
//! `cargo run --example print_builtin_config > apf.yaml`

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let yaml = apf::config::Config::builtin().to_yaml();
    match std::io::stdout().write_all(yaml.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("print_builtin_config: {e}");
            ExitCode::FAILURE
        }
    }
}
