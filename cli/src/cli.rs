//! The tool proper (see main.rs).

use apf::classification::{Classifier, RequestDigest};
use apf::config::{Config, ConfigErrors, DistinguisherMethod};
use apf::simulator::{self, Report, RunStats, Workload};
use clap::{Args, Parser, Subcommand};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Exit status when the simulation's verdict fails.
const EXIT_VERDICT_FAILED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "apf",
    version,
    about = "API Priority and Fairness (KEP-1040): simulate, check and inspect configurations",
    after_help = "With no command, `apf [OPTIONS]` runs `apf simulate [OPTIONS]`: by default \
                  Kubernetes' built-in configuration against a built-in noisy-neighbour scenario.\n\nExit status: 0 on success, 1 \
                  for invalid input, 2 for usage errors, 3 when a simulation's verdict fails."
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no command, `apf [OPTIONS]` is `apf simulate [OPTIONS]`.
    #[command(flatten)]
    simulate: SimulateArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workload against a configuration on a simulated clock and
    /// report what each flow and level got
    Simulate(SimulateArgs),
    /// Validate a configuration file (or, with --workload, a workload file)
    Check(CheckArgs),
    /// Show which flow schema, priority level and flow a request lands in
    Classify(ClassifyArgs),
    /// Print the built-in configuration as YAML that `kubectl apply -f` accepts
    Defaults,
}

#[derive(Args)]
struct SimulateArgs {
    /// FlowSchemas and PriorityLevelConfigurations (YAML or JSON, as
    /// `kubectl get flowschemas,prioritylevelconfigurations -o yaml` prints
    /// them) [default: Kubernetes' built-in configuration]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The workload (see docs/workload-format.md) [default: the built-in
    /// noisy-neighbour scenario]
    #[arg(long, value_name = "FILE")]
    workload: Option<PathBuf>,
    /// Write charts (SVG) into this directory
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Seed of every random choice [default: the workload's]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Simulated time, e.g. 30s or 5m [default: the workload's]
    #[arg(long, value_name = "DURATION", value_parser = simulator::parse_duration)]
    duration: Option<Duration>,
}

#[derive(Args)]
struct CheckArgs {
    /// The file to check
    file: PathBuf,
    /// The file is a workload, not a configuration
    #[arg(long)]
    workload: bool,
}

#[derive(Args)]
struct ClassifyArgs {
    /// The configuration [default: Kubernetes' built-in configuration]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The authenticated user name
    #[arg(long)]
    user: String,
    /// A group of the user (repeat for several)
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// Kubernetes' verb (get, list, watch, create, update, patch, delete, ...)
    #[arg(long)]
    verb: String,
    /// The resource, for a resource request
    #[arg(long, required_unless_present = "non_resource")]
    resource: Option<String>,
    /// The API group ("" for the core group)
    #[arg(long, default_value = "")]
    api_group: String,
    #[arg(long, default_value = "")]
    subresource: String,
    /// The namespace ("" for a cluster-scoped request)
    #[arg(long, default_value = "")]
    namespace: String,
    /// The object's name
    #[arg(long, default_value = "")]
    name: String,
    /// The URL path (what non-resource rules match)
    #[arg(long, required_if_eq("non_resource", "true"), default_value = "")]
    path: String,
    /// A non-resource request (such as /healthz or /metrics)
    #[arg(long, conflicts_with_all = ["resource", "api_group", "subresource", "namespace", "name"])]
    non_resource: bool,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => simulate(cli.simulate),
        Some(Command::Simulate(args)) => simulate(args),
        Some(Command::Check(args)) => check(&args),
        Some(Command::Classify(args)) => classify(&args),
        Some(Command::Defaults) => {
            print!("{}", Config::builtin().to_yaml());
            Ok(ExitCode::SUCCESS)
        }
    };
    result.unwrap_or_else(|message| {
        eprintln!("apf: {message}");
        ExitCode::FAILURE
    })
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn load_config(path: Option<&Path>) -> Result<(Config, String), String> {
    match path {
        None => Ok((
            Config::builtin(),
            "Kubernetes' built-in configuration".to_string(),
        )),
        Some(p) => {
            let config = Config::from_slice(&read(p)?).map_err(|e| config_errors(p, &e))?;
            Ok((config, format!("the configuration in {}", p.display())))
        }
    }
}

fn config_errors(path: &Path, errors: &ConfigErrors) -> String {
    let mut out = format!("{}: {} error(s)", path.display(), errors.len());
    for e in errors.iter() {
        out.push_str("\n  ");
        out.push_str(&e.to_string());
    }
    out
}

fn simulate(args: SimulateArgs) -> Result<ExitCode, String> {
    let (config, config_name) = load_config(args.config.as_deref())?;
    let valid = config
        .validate()
        .map_err(|e| config_errors(args.config.as_deref().unwrap_or(Path::new("config")), &e))?;
    let (mut workload, source) = match &args.workload {
        None => (simulator::noisy_neighbour(), "built in".to_string()),
        Some(p) => {
            let mut w = Workload::from_slice(&read(p)?).map_err(|e| {
                format!(
                    "{}:\n  {}",
                    p.display(),
                    e.to_string().replace('\n', "\n  ")
                )
            })?;
            if w.name.is_empty() {
                w.name = p
                    .file_stem()
                    .map_or("workload".into(), |s| s.to_string_lossy().into_owned());
            }
            (w, p.display().to_string())
        }
    };
    if let Some(d) = args.duration {
        workload = workload
            .with_duration(d)
            .map_err(|e| format!("--duration: {e}"))?;
    }
    let seed = args.seed.unwrap_or(workload.seed);
    println!(
        "apf simulate: workload {:?} ({source}) against {config_name}",
        workload.name
    );
    if !workload.description.is_empty() {
        println!("{}", wrap(&workload.description, 96, "  "));
    }
    println!(
        "  {} priority levels, {} flow schemas; server concurrency limit {}; {} simulated; seed {seed}",
        valid.priority_levels().len(),
        valid.flow_schemas().len(),
        workload.server.concurrency_limit,
        simulator::format_duration(workload.duration),
    );
    println!();
    let mut bar = Progress::new();
    let (report, stats) = simulator::run(&config, &workload, seed, &mut |f| bar.update(f))
        .map_err(|e| e.to_string())?;
    bar.finish();
    print!("{}", report.render());
    println!();
    println!("{}", speed(&stats));
    charts(&report, args.out.as_deref())?;
    Ok(if report.verdict().pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_VERDICT_FAILED)
    })
}

fn speed(stats: &RunStats) -> String {
    // The line always reads "... on one core ..." whatever the machine's
    // speed: the CPU-time rate is only appended when the run was long enough
    // for the CPU clock to measure it, so nothing that reads this line (a
    // test, a script) depends on how fast the machine is.
    let mut line = format!(
        "simulated {} requests in {:.2} s on one core: {} requests/s",
        simulator::format_count(stats.requests),
        stats.wall.as_secs_f64(),
        rate(stats.requests_per_second()),
    );
    if let Some(per_cpu) = stats.requests_per_cpu_second() {
        line.push_str(&format!(" ({} per second of CPU time)", rate(per_cpu)));
    }
    line
}

/// `1.43 million` or `859,464`.
fn rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} million", r / 1e6)
    } else {
        simulator::format_count(r.round() as u64)
    }
}

fn charts(report: &Report, out: Option<&Path>) -> Result<(), String> {
    match out {
        None => println!("charts: add --out DIR to write SVG charts of seat share, queue length, seats and waits"),
        Some(dir) => {
            let paths = simulator::write_charts(report, dir)
                .map_err(|e| format!("writing charts to {}: {e}", dir.display()))?;
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            println!("charts: {}", names.join(", "));
        }
    }
    Ok(())
}

/// Wraps `text` at `width` columns, each line indented.
fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut lines = vec![String::from(indent)];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if line.len() > indent.len() && line.len() + 1 + word.len() > width {
            lines.push(format!("{indent}{word}"));
        } else {
            if line.len() > indent.len() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join("\n")
}

/// A progress bar on stderr, only when it is a terminal and the run lasts.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    started: std::time::Instant,
    enabled: bool,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            bar: None,
            started: std::time::Instant::now(),
            enabled: std::io::stderr().is_terminal(),
        }
    }

    fn update(&mut self, fraction: f64) {
        if !self.enabled {
            return;
        }
        if self.bar.is_none() && self.started.elapsed() > Duration::from_millis(500) {
            let bar = indicatif::ProgressBar::new(1000);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "simulating {wide_bar} {percent:>3}% (eta {eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_position((fraction.clamp(0.0, 1.0) * 1000.0) as u64);
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

fn check(args: &CheckArgs) -> Result<ExitCode, String> {
    let bytes = read(&args.file)?;
    let name = args.file.display();
    if args.workload {
        let w = Workload::from_slice(&bytes).map_err(|e| {
            format!(
                "{name}: {} error(s)\n  {}",
                e.0.len(),
                e.to_string().replace('\n', "\n  ")
            )
        })?;
        let replicas: u64 = w.flows.iter().map(|f| f.replicas as u64).sum();
        println!(
            "{name}: valid workload {:?}: {} flows ({replicas} with replicas), {} simulated",
            w.name,
            w.flows.len(),
            simulator::format_duration(w.duration)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let config = Config::from_slice(&bytes).map_err(|e| config_errors(&args.file, &e))?;
    let valid = config
        .validate()
        .map_err(|e| config_errors(&args.file, &e))?;
    println!(
        "{name}: valid: {} priority levels, {} flow schemas",
        valid.priority_levels().len(),
        valid.flow_schemas().len()
    );
    for notice in valid.notices() {
        println!("  note: {notice}");
    }
    Ok(ExitCode::SUCCESS)
}

fn classify(args: &ClassifyArgs) -> Result<ExitCode, String> {
    let (config, _) = load_config(args.config.as_deref())?;
    let valid = config
        .validate()
        .map_err(|e| config_errors(args.config.as_deref().unwrap_or(Path::new("config")), &e))?;
    let classifier = Classifier::new(&valid);
    let groups: Vec<&str> = args.groups.iter().map(String::as_str).collect();
    let digest = RequestDigest {
        user: &args.user,
        groups: &groups,
        verb: &args.verb,
        is_resource_request: !args.non_resource,
        api_group: &args.api_group,
        resource: args.resource.as_deref().unwrap_or(""),
        subresource: &args.subresource,
        namespace: &args.namespace,
        name: &args.name,
        path: &args.path,
    };
    let c = classifier.classify(&digest);
    let fallback = if c.fallback {
        " (no schema matched; taken as Kubernetes does for a user in neither system:authenticated nor system:unauthenticated)"
    } else {
        ""
    };
    println!(
        "flow schema:    {} (matching precedence {}){fallback}",
        c.schema.name, c.schema.matching_precedence
    );
    let level = if c.level.exempt {
        "exempt: never queued, never rejected".to_string()
    } else if c.level.queues == 0 {
        "rejects when full, no queues".to_string()
    } else {
        format!("{} queues", c.level.queues)
    };
    println!("priority level: {} ({level})", c.level.name);
    let method = match c.schema.distinguisher {
        Some(DistinguisherMethod::ByUser) => "by user",
        Some(DistinguisherMethod::ByNamespace) => "by namespace",
        None => "none",
    };
    let distinguisher = if c.flow_distinguisher.is_empty() {
        "\"\"".to_string()
    } else {
        c.flow_distinguisher.to_string()
    };
    println!("distinguisher:  {distinguisher} ({method})");
    println!("flow hash:      {:#018x}", c.flow_hash);
    Ok(ExitCode::SUCCESS)
}
