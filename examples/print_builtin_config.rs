//! Prints Kubernetes' bootstrap API Priority and Fairness configuration, as
//! built into libapf, in a form `kubectl apply -f -` accepts.
//!
//! `cargo run --example print_builtin_config > apf.yaml`

fn main() {
    print!("{}", apf::config::Config::builtin().to_yaml());
}
