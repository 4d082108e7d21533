//! The Rust proof of scripts/install-checks.sh: the library alone, as a
//! plain dependency, builds a dispatcher with Kubernetes' configuration.
use apf::clock::Clock;
use apf::dispatcher::Dispatcher;

fn main() {
    let d = Dispatcher::builtin(Default::default(), Clock::real());
    drop(d);
    println!("rust: apf builds as a plain dependency");
}
