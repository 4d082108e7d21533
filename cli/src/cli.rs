//! The tool proper (see main.rs).

use apf::classification::{Classifier, RequestDigest};
use apf::config::{Config, ConfigErrors, DistinguisherMethod};
use apf::queueset::Fairness;
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

/// Reading the configuration from a live cluster, through `kubectl`.
#[derive(Args, Clone, Default)]
struct ClusterArgs {
    /// Read the FlowSchemas and PriorityLevelConfigurations of the cluster
    /// of the current kubeconfig (runs `kubectl get ... -o yaml`; the
    /// program is $APF_KUBECTL if set)
    #[arg(long)]
    from_cluster: bool,
    /// The kubeconfig to use with --from-cluster
    #[arg(long, value_name = "FILE", requires = "from_cluster")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use with --from-cluster
    #[arg(long, value_name = "NAME", requires = "from_cluster")]
    context: Option<String>,
}

#[derive(Args)]
struct SimulateArgs {
    /// FlowSchemas and PriorityLevelConfigurations (YAML or JSON, as
    /// `kubectl get flowschemas,prioritylevelconfigurations -o yaml` prints
    /// them), applied on top of Kubernetes' built-in ones as a cluster
    /// applies them: same kind and name replaces, others are added
    #[arg(long, value_name = "FILE", conflicts_with = "from_cluster")]
    config: Option<PathBuf>,
    /// With --config: use the file's objects alone (the mandatory `exempt`
    /// and `catch-all` are still added), not on top of the built-in ones
    #[arg(long, requires = "config")]
    replace: bool,
    #[command(flatten)]
    cluster: ClusterArgs,
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
    /// Run the workload twice, every priority level under Kubernetes'
    /// fairness policy and then under POLICY (the apf.libapf.io/fairness
    /// annotation: flow or flow-maxmin; flow when not named), and show per
    /// flow what changes
    #[arg(
        long,
        conflicts_with = "out",
        value_name = "POLICY",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "flow",
        value_parser = parse_fairness
    )]
    compare_fairness: Option<Fairness>,
}

#[derive(Args)]
struct CheckArgs {
    /// The file to check (`-`: standard input)
    #[arg(
        required_unless_present = "from_cluster",
        conflicts_with = "from_cluster"
    )]
    file: Option<PathBuf>,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The file is a workload, not a configuration
    #[arg(long)]
    workload: bool,
}

#[derive(Args)]
struct ClassifyArgs {
    /// A configuration applied on top of Kubernetes' built-in one (as for
    /// `apf simulate --config`)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// With --config: the file's objects alone, not on top of the built-in ones
    #[arg(long, requires = "config")]
    replace: bool,
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

/// `print!`, but a failed write (a full disk, a closed descriptor) returns
/// the error from the enclosing function, to end the command with a clear
/// message and a non-zero exit; `print!` would panic (exit 101).
macro_rules! out {
    ($($arg:tt)*) => {
        std::io::Write::write_fmt(&mut std::io::stdout(), format_args!($($arg)*))
            .map_err(stdout_failed)?
    };
}

/// `println!` as [`out!`] is `print!`.
macro_rules! outln {
    ($($arg:tt)*) => {{
        out!($($arg)*);
        out!("\n");
    }};
}

fn stdout_failed(e: std::io::Error) -> String {
    format!("cannot write to standard output: {e}")
}

pub fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        None => simulate(cli.simulate),
        Some(Command::Simulate(args)) => simulate(args),
        Some(Command::Check(args)) => check(&args),
        Some(Command::Classify(args)) => classify(&args),
        Some(Command::Defaults) => defaults(),
    };
    // What is still buffered goes out now, where a failure can be told.
    let result = result.and_then(|code| {
        std::io::Write::flush(&mut std::io::stdout()).map_err(stdout_failed)?;
        Ok(code)
    });
    result.unwrap_or_else(|message| {
        eprintln!("apf: {message}");
        ExitCode::FAILURE
    })
}

fn defaults() -> Result<ExitCode, String> {
    out!("{}", Config::builtin().to_yaml());
    Ok(ExitCode::SUCCESS)
}

/// At most `apf::input::MAX_INPUT_BYTES`: `apf check /dev/zero` fails
/// promptly, naming the cap. `-` is standard input, as for Unix tools.
fn read(path: &Path) -> Result<Vec<u8>, String> {
    if path == Path::new("-") {
        apf::input::read_stdin()
    } else {
        apf::input::read_file(path)
    }
}

/// How a file given on the command line is named in messages.
fn shown(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

/// The cluster's FlowSchemas and PriorityLevelConfigurations as YAML, from
/// `kubectl` (or $APF_KUBECTL) with the given kubeconfig and context.
fn read_cluster(args: &ClusterArgs) -> Result<Vec<u8>, String> {
    let program = std::env::var_os("APF_KUBECTL").unwrap_or_else(|| "kubectl".into());
    let mut cmd = std::process::Command::new(&program);
    if let Some(k) = &args.kubeconfig {
        cmd.arg("--kubeconfig").arg(k);
    }
    if let Some(c) = &args.context {
        cmd.arg("--context").arg(c);
    }
    cmd.args([
        "get",
        "flowschemas.v1.flowcontrol.apiserver.k8s.io,prioritylevelconfigurations.v1.flowcontrol.apiserver.k8s.io",
        "-o",
        "yaml",
    ]);
    let shown = Path::new(&program).display().to_string();
    let out = cmd.output().map_err(|e| {
        format!("--from-cluster: running {shown}: {e} (install kubectl, or set APF_KUBECTL)")
    })?;
    if !out.status.success() {
        return Err(format!(
            "--from-cluster: {shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// The configuration to simulate: the cluster's objects as they are (a
/// cluster holds its whole configuration), or as `load_config` says.
fn load_source(
    path: Option<&Path>,
    replace: bool,
    cluster: &ClusterArgs,
) -> Result<(Config, String, Vec<String>), String> {
    if !cluster.from_cluster {
        return load_config(path, replace);
    }
    let bytes = read_cluster(cluster)?;
    let config = Config::from_slice(&bytes)
        .map_err(|e| config_errors(Path::new("the cluster's objects"), &e))?;
    Ok((
        config,
        "the cluster's configuration".to_string(),
        Vec::new(),
    ))
}

/// The configuration to run: the built-in one, the file's objects on top
/// of it, or (`--replace`) the file's alone. Also returns how to name it and
/// the lines saying which objects came from where.
fn load_config(
    path: Option<&Path>,
    replace: bool,
) -> Result<(Config, String, Vec<String>), String> {
    let Some(p) = path else {
        return Ok((
            Config::builtin(),
            "Kubernetes' built-in configuration".to_string(),
            Vec::new(),
        ));
    };
    let file = Config::from_slice(&read(p)?).map_err(|e| config_errors(p, &e))?;
    if replace {
        return Ok((
            file,
            format!("the configuration in {} alone (--replace)", p.display()),
            Vec::new(),
        ));
    }
    let builtin = Config::builtin();
    let merged = builtin.with_overrides(&file);
    let origins = origins(&builtin, &file, p);
    Ok((
        merged,
        format!(
            "{} on top of Kubernetes' built-in configuration (--replace for the file alone)",
            p.display()
        ),
        origins,
    ))
}

/// Which objects of a merged configuration came from the file (new, or
/// replacing a built-in one) and how many built-in ones stayed.
fn origins(builtin: &Config, file: &Config, path: &Path) -> Vec<String> {
    let file_levels: Vec<&str> = file
        .priority_levels
        .iter()
        .map(|p| p.metadata.name.as_str())
        .collect();
    let file_schemas: Vec<&str> = file
        .flow_schemas
        .iter()
        .map(|f| f.metadata.name.as_str())
        .collect();
    let describe = |kind: &str, names: &[&str], builtin_names: &[&str]| -> Option<String> {
        if names.is_empty() {
            return None;
        }
        let listed: Vec<String> = names
            .iter()
            .map(|n| {
                let n = apf::input::clip(n, 64);
                if builtin_names.contains(&n.as_ref()) {
                    format!("{n} (replaces the built-in one)")
                } else {
                    format!("{n} (new)")
                }
            })
            .collect();
        Some(format!("{kind}: {}", listed.join(", ")))
    };
    let builtin_levels: Vec<&str> = builtin
        .priority_levels
        .iter()
        .map(|p| p.metadata.name.as_str())
        .collect();
    let builtin_schemas: Vec<&str> = builtin
        .flow_schemas
        .iter()
        .map(|f| f.metadata.name.as_str())
        .collect();
    let mut lines = vec![format!("from {}:", path.display())];
    lines.extend(describe("  priority levels", &file_levels, &builtin_levels));
    lines.extend(describe("  flow schemas", &file_schemas, &builtin_schemas));
    let kept_levels = builtin_levels
        .iter()
        .filter(|n| !file_levels.contains(n))
        .count();
    let kept_schemas = builtin_schemas
        .iter()
        .filter(|n| !file_schemas.contains(n))
        .count();
    lines.push(format!(
        "built in (`apf defaults` prints them): {kept_levels} priority levels, {kept_schemas} flow schemas"
    ));
    lines
}

/// `apf ... | head` ends quietly when `head` has read enough, as `cat` and
/// `grep` do: Rust ignores SIGPIPE, so every `println!` after the reader
/// left would panic ("Broken pipe", exit 101). Restoring the default
/// disposition lets the kernel end the process on the first such write.
fn quiet_on_broken_pipe() {
    // SAFETY: called first thing in `main`, before any thread starts, so
    // nothing races the change of disposition; SIG_DFL is a valid handler
    // for SIGPIPE, and the previous handler (SIG_IGN) needs no cleanup.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn config_errors(path: &Path, errors: &ConfigErrors) -> String {
    let mut out = format!("{}: {} error(s)", shown(path), errors.len());
    for e in errors.iter() {
        out.push_str("\n  ");
        out.push_str(&e.to_string());
    }
    out
}

fn simulate(args: SimulateArgs) -> Result<ExitCode, String> {
    let (config, config_name, origins) =
        load_source(args.config.as_deref(), args.replace, &args.cluster)?;
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
    // Printed as it goes, and kept for the report page (--out).
    let mut text = format!(
        "apf simulate: workload {:?} ({source}) against {config_name}\n",
        workload.name
    );
    if !workload.description.is_empty() {
        text.push_str(&wrap(&workload.description, 96, "  "));
        text.push('\n');
    }
    text.push_str(&format!(
        "  {} priority levels, {} flow schemas; server concurrency limit {}; {} simulated; seed {seed}\n",
        valid.priority_levels().len(),
        valid.flow_schemas().len(),
        match workload.server.adaptive {
            Some(a) => format!(
                "adaptive ({}..{}, seat caps sized for {})",
                a.min_limit, a.max_limit, workload.server.concurrency_limit
            ),
            None => workload.server.concurrency_limit.to_string(),
        },
        simulator::format_duration(workload.duration),
    ));
    for line in &origins {
        text.push_str(&format!("  {line}\n"));
    }
    text.push('\n');
    out!("{text}");
    let mut bar = Progress::new();
    if let Some(against) = args.compare_fairness {
        let comparison =
            simulator::compare_fairness_with(&config, &workload, against, seed, &mut |f| {
                bar.update(f)
            })
            .map_err(|e| e.to_string())?;
        bar.finish();
        out!("{}", comparison.render());
        return Ok(ExitCode::SUCCESS);
    }
    let (report, stats) = simulator::run(&config, &workload, seed, &mut |f| bar.update(f))
        .map_err(|e| e.to_string())?;
    bar.finish();
    let rest = format!("{}\n{}\n", report.render(), speed(&stats));
    out!("{rest}");
    text.push_str(&rest);
    charts(&report, &text, args.out.as_deref())?;
    Ok(if report.verdict().pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_VERDICT_FAILED)
    })
}

fn parse_fairness(name: &str) -> Result<Fairness, String> {
    Fairness::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Fairness::ALL.iter().map(|f| f.as_str()).collect();
        format!(
            "unknown fairness policy {name:?}: one of {}",
            names.join(", ")
        )
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

fn charts(report: &Report, text: &str, out: Option<&Path>) -> Result<(), String> {
    match out {
        None => outln!("charts: add --out DIR to write SVG charts of seat share, throughput against demand, rejections by reason, queue length, seats and waits, and an index.html showing them with this report"),
        Some(dir) => {
            let paths = simulator::write_report_page(report, text, dir)
                .map_err(|e| format!("writing charts to {}: {e}", dir.display()))?;
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            outln!("charts: {}", names.join(", "));
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
    let (bytes, file) = match &args.file {
        Some(f) => (read(f)?, f.clone()),
        None => (
            read_cluster(&args.cluster)?,
            PathBuf::from("the cluster's objects"),
        ),
    };
    let name = shown(&file);
    if args.workload {
        let w = Workload::from_slice(&bytes).map_err(|e| {
            format!(
                "{name}: {} error(s)\n  {}",
                e.0.len(),
                e.to_string().replace('\n', "\n  ")
            )
        })?;
        let replicas: u64 = w.flows.iter().map(|f| f.replicas as u64).sum();
        outln!(
            "{name}: valid workload {:?}: {} flows ({replicas} with replicas), {} simulated",
            w.name,
            w.flows.len(),
            simulator::format_duration(w.duration)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let config = Config::from_slice(&bytes).map_err(|e| config_errors(&file, &e))?;
    // The notices (a dangling schema, mandatory objects added) are shown
    // beside the errors too: fixing the errors would not make them go away.
    let (valid, notices) = config.validate_with_notices(&Default::default());
    let valid = valid.map_err(|e| {
        let mut message = config_errors(&file, &e);
        for notice in &notices {
            message.push_str(&format!("\n  note: {notice}"));
        }
        message
    })?;
    outln!(
        "{name}: valid: {} priority levels, {} flow schemas",
        valid.priority_levels().len(),
        valid.flow_schemas().len()
    );
    for notice in valid.notices() {
        outln!("  note: {notice}");
    }
    Ok(ExitCode::SUCCESS)
}

fn classify(args: &ClassifyArgs) -> Result<ExitCode, String> {
    let (config, _, _) = load_config(args.config.as_deref(), args.replace)?;
    let valid = config
        .validate()
        .map_err(|e| config_errors(args.config.as_deref().unwrap_or(Path::new("config")), &e))?;
    if let Some(warning) = unknown_verb(&args.verb, args.non_resource) {
        eprintln!("apf: warning: {warning}");
    }
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
    outln!(
        "flow schema:    {} (matching precedence {}){fallback}",
        c.schema.name,
        c.schema.matching_precedence
    );
    let level = if c.level.exempt {
        "exempt: never queued, never rejected".to_string()
    } else if c.level.queues == 0 {
        "rejects when full, no queues".to_string()
    } else {
        format!("{} queues", c.level.queues)
    };
    outln!("priority level: {} ({level})", c.level.name);
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
    outln!("distinguisher:  {distinguisher} ({method})");
    outln!("flow hash:      {:#018x}", c.flow_hash);
    Ok(ExitCode::SUCCESS)
}

/// The verbs the API server gives resource requests (RBAC's request verbs).
const RESOURCE_VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "proxy",
];

/// Non-resource requests carry the HTTP method, lower-cased.
const NON_RESOURCE_VERBS: &[&str] = &["get", "head", "post", "put", "patch", "delete", "options"];

/// A warning when Kubernetes never sends `verb` for this kind of request: a
/// typo (`lst`) would otherwise classify silently, matching only `*` rules.
fn unknown_verb(verb: &str, non_resource: bool) -> Option<String> {
    let (known, kind) = if non_resource {
        (NON_RESOURCE_VERBS, "a non-resource request")
    } else {
        (RESOURCE_VERBS, "a resource request")
    };
    if known.contains(&verb) {
        return None;
    }
    Some(format!(
        "--verb {:?} is not a verb Kubernetes uses for {kind} (known: {}); only rules with verbs [\"*\"] match it",
        apf::input::clip(verb, 64),
        known.join(", ")
    ))
}
