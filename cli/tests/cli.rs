#![cfg(not(loom))]
//! The `apf` binary, run as a user would: each subcommand's exit status and
//! the lines a user (or the README) relies on.

use apf::classification::hash_flow_id;
use apf::config::Config;
use std::path::PathBuf;
use std::process::{Command, Output};

mod support;
use support::{apf, scratch, stderr, stdout};

fn workload_example(name: &str) -> String {
    format!(
        "{}/../examples/workloads/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn defaults_prints_the_builtin_configuration_as_a_list_that_loads_back() {
    let out = apf(&["defaults"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("apiVersion: v1\nkind: List\nitems:\n"),
        "{text}"
    );
    let loaded = Config::from_yaml_str(&text).expect("apf defaults loads back");
    assert_eq!(loaded, Config::builtin());
    loaded.validate().expect("and is valid");
    for kind in ["kind: FlowSchema", "kind: PriorityLevelConfiguration"] {
        assert!(text.contains(kind));
    }
    assert!(text.contains("apiVersion: flowcontrol.apiserver.k8s.io/v1\n"));
}

#[test]
fn check_accepts_a_valid_configuration() {
    let dir = scratch("check-valid");
    let file = dir.join("builtin.yaml");
    std::fs::write(&file, Config::builtin().to_yaml()).unwrap();
    let out = apf(&["check", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("builtin.yaml: valid: 8 priority levels"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn check_reports_each_error_with_object_and_field_and_fails() {
    let dir = scratch("check-invalid");
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: batch}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    limitResponse: {type: Queue, queuing: {queues: 4, handSize: 8}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: jobs}
spec:
  priorityLevelConfiguration: {name: batch}
  matchingPrecedence: 20000
  rules: []
",
    )
    .unwrap();
    let out = apf(&["check", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("bad.yaml: 2 error(s)"), "{err}");
    assert!(
        err.contains(
            "PriorityLevelConfiguration \"batch\": \
             spec.limited.limitResponse.queuing.handSize: Invalid value: 8"
        ),
        "{err}"
    );
    assert!(
        err.contains("FlowSchema \"jobs\": spec.matchingPrecedence: Invalid value: 20000"),
        "{err}"
    );
}

#[test]
fn check_accepts_a_cluster_dump_with_a_dangling_flow_schema_and_names_it() {
    // A real `kubectl get` dump whose schema batch-jobs names a level that
    // was deleted: Kubernetes keeps the schema (Dangling, matching nothing),
    // so the dump must load, with the schema named.
    let dump = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/kubectl-get-flowcontrol.yaml"
    ))
    .unwrap();
    let dangling = dump.replacen(
        "priorityLevelConfiguration:\n      name: batch\n",
        "priorityLevelConfiguration:\n      name: deleted-level\n",
        1,
    );
    assert_ne!(dangling, dump, "the fixture names level batch");
    let dir = scratch("check-dangling");
    let file = dir.join("dump.yaml");
    std::fs::write(&file, dangling).unwrap();
    let out = apf(&["check", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.contains("FlowSchema \"batch-jobs\"") && l.contains("deleted-level")),
        "{text}"
    );
}

#[test]
fn check_fails_on_a_missing_file() {
    let out = apf(&["check", "/nonexistent/apf.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("apf: /nonexistent/apf.yaml: "));
}

#[test]
fn check_validates_workloads_too() {
    let out = apf(&[
        "check",
        "--workload",
        &workload_example("deploy-storm.yaml"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("valid workload \"deploy-storm\": 3 flows (12 with replicas), 60 s"),
        "{}",
        stdout(&out)
    );

    let dir = scratch("check-workload");
    let file = dir.join("w.yaml");
    std::fs::write(
        &file,
        "duration: 10s\nflows:\n  - name: a\n    user: u\n    resource: pods\n    rate: 5\n    \
         service: {lognormal: {median: 5ms, sigma: -1}}\n",
    )
    .unwrap();
    let out = apf(&["check", "--workload", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("flows[0].service.lognormal.sigma: must be between 0 and 10"),
        "{}",
        stderr(&out)
    );
}

fn field<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .unwrap_or_else(|| panic!("no {name:?} line in {text}"))
        .trim()
}

#[test]
fn classify_shows_schema_level_distinguisher_and_flow_hash() {
    let out = apf(&[
        "classify",
        "--user",
        "system:node:n1",
        "--group",
        "system:nodes",
        "--group",
        "system:authenticated",
        "--verb",
        "update",
        "--api-group",
        "coordination.k8s.io",
        "--resource",
        "leases",
        "--namespace",
        "kube-node-lease",
        "--name",
        "n1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        field(&text, "flow schema:"),
        "system-node-high (matching precedence 400)"
    );
    assert_eq!(field(&text, "priority level:"), "node-high (64 queues)");
    assert_eq!(field(&text, "distinguisher:"), "system:node:n1 (by user)");
    let hash = hash_flow_id("system-node-high", "system:node:n1");
    assert_eq!(field(&text, "flow hash:"), format!("{hash:#018x}"));
}

#[test]
fn classify_non_resource_requests_and_a_custom_configuration() {
    let out = apf(&[
        "classify",
        "--user",
        "prober",
        "--group",
        "system:authenticated",
        "--verb",
        "get",
        "--non-resource",
        "--path",
        "/healthz",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        field(&text, "flow schema:").starts_with("probes "),
        "{text}"
    );
    assert_eq!(
        field(&text, "priority level:"),
        "exempt (exempt: never queued, never rejected)"
    );

    let dir = scratch("classify-config");
    let file = dir.join("c.yaml");
    std::fs::write(
        &file,
        "apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: ci}
spec:
  priorityLevelConfiguration: {name: global-default}
  matchingPrecedence: 50
  distinguisherMethod: {type: ByNamespace}
  rules:
  - subjects: [{kind: User, user: {name: ci-bot}}]
    resourceRules: [{verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*']}]
",
    )
    .unwrap();
    let mut config = Config::builtin();
    config.flow_schemas.extend(
        Config::from_slice(&std::fs::read(&file).unwrap())
            .unwrap()
            .flow_schemas,
    );
    std::fs::write(&file, config.to_yaml()).unwrap();
    let out = apf(&[
        "classify",
        "--config",
        file.to_str().unwrap(),
        "--user",
        "ci-bot",
        "--group",
        "system:authenticated",
        "--verb",
        "create",
        "--resource",
        "pods",
        "--namespace",
        "team-a",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(field(&text, "flow schema:"), "ci (matching precedence 50)");
    assert_eq!(field(&text, "distinguisher:"), "team-a (by namespace)");
}

#[test]
fn classify_needs_a_resource_or_non_resource() {
    let out = apf(&["classify", "--user", "u", "--verb", "get"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(stderr(&out).contains("--resource"), "{}", stderr(&out));
}

#[test]
fn simulate_a_workload_file_writes_a_report_and_charts() {
    let dir = scratch("simulate");
    let out = apf(&[
        "simulate",
        "--workload",
        &workload_example("minimal.yaml"),
        "--duration",
        "5s",
        "--seed",
        "3",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        "apf simulate: workload \"minimal\" (",
        "server concurrency limit 600; 5 s simulated; seed 3",
        "flow           level          demand/s",
        "shop-frontend  workload-low",
        "verdict: PASS — 1 of 1 flows expected to be served",
        "  ok    shop-frontend  workload-low  100.0% of demand",
        "requests/s",
        " on one core: ",
        "charts: ",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    for chart in [
        "seat-share.svg",
        "throughput.svg",
        "rejections.svg",
        "queue-length.svg",
        "level-seats.svg",
        "wait-time.svg",
    ] {
        let svg = std::fs::read_to_string(dir.join(chart)).expect(chart);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // Every chart names the flow or its level; the rejections chart
        // names the reasons.
        assert!(
            svg.contains("shop-frontend")
                || svg.contains("workload-low")
                || (chart == "rejections.svg" && svg.contains("queue-full")),
            "{chart}"
        );
    }
}

#[test]
fn simulate_exits_3_when_the_verdict_fails() {
    let dir = scratch("simulate-fail");
    let file = dir.join("w.yaml");
    // Twice what a server of 10 seats can do, all expected to be served.
    std::fs::write(
        &file,
        "duration: 5s\nserver: {concurrencyLimit: 10}\nflows:\n  - name: greedy\n    user: u\n    \
         groups: [system:authenticated]\n    resource: pods\n    rate: 4000\n    service: 10ms\n    \
         expect: served\n",
    )
    .unwrap();
    let out = apf(&["simulate", "--workload", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("verdict: FAIL — 0 of 1 flows"), "{text}");
    assert!(text.contains("  FAIL  greedy"), "{text}");
}

#[test]
fn simulate_refuses_bad_input_with_status_1() {
    let out = apf(&["simulate", "--workload", "/nonexistent/w.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let out = apf(&["simulate", "--duration", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--duration: duration: must be positive"));
    let out = apf(&["simulate", "--duration", "soon"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

/// `apf` alone is the README's main command: the built-in configuration
/// against the noisy-neighbour scenario (shortened here: the debug build
/// simulates some fifty times slower than the release build).
#[test]
fn plain_apf_runs_the_noisy_neighbour_scenario() {
    let out = apf(&["--duration", "15s"]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    for line in [
        "apf simulate: workload \"noisy-neighbour\" (built in) against Kubernetes' built-in configuration",
        "8 priority levels",
        "runaway-controller   workload-low",
        "tenant ×40           workload-low",
        "node-heartbeat ×500  node-high",
        "leader-election ×3   leader-election",
        "verdict: PASS — 3 of 3 flows expected to be served",
        "  ok    tenant ×40",
        "  ok    node-heartbeat ×500",
        "  ok    leader-election ×3",
        "queue-full",
        "requests/s",
        " on one core: ",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

/// A stand-in for kubectl: records its arguments, prints `config` (or
/// fails with `fail` on stderr).
fn fake_kubectl(dir: &std::path::Path, config: &str, fail: Option<&str>) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let yaml = dir.join("objects.yaml");
    std::fs::write(&yaml, config).unwrap();
    let script = dir.join("kubectl");
    let body = match fail {
        None => format!(
            "#!/bin/sh\necho \"$@\" > '{}'\ncat '{}'\n",
            dir.join("args").display(),
            yaml.display()
        ),
        Some(msg) => format!("#!/bin/sh\necho '{msg}' >&2\nexit 1\n"),
    };
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn apf_with_kubectl(kubectl: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apf"))
        .args(args)
        .env("APF_KUBECTL", kubectl)
        .output()
        .expect("the apf binary runs")
}

#[test]
fn check_and_simulate_read_a_cluster_through_kubectl() {
    let dir = scratch("from-cluster");
    let kubectl = fake_kubectl(&dir, &Config::builtin().to_yaml(), None);
    let out = apf_with_kubectl(
        &kubectl,
        &[
            "check",
            "--from-cluster",
            "--kubeconfig",
            "/k/config",
            "--context",
            "prod",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("the cluster's objects: valid"),
        "{}",
        stdout(&out)
    );
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    assert!(
        args.starts_with("--kubeconfig /k/config --context prod get flowschemas.v1.flowcontrol.apiserver.k8s.io,"),
        "{args}"
    );
    assert!(args.trim_end().ends_with("-o yaml"), "{args}");

    let out = apf_with_kubectl(
        &kubectl,
        &["simulate", "--from-cluster", "--duration", "2s"],
    );
    assert!(
        out.status.success() || out.status.code() == Some(3),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("the cluster's configuration"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn from_cluster_reports_kubectl_failures_and_invalid_objects() {
    let dir = scratch("from-cluster-fail");
    let kubectl = fake_kubectl(&dir, "", Some("error: You must be logged in to the server"));
    let out = apf_with_kubectl(&kubectl, &["check", "--from-cluster"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("You must be logged in"),
        "{}",
        stderr(&out)
    );

    let bad = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: bad}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 1\n    limitResponse: {type: Queue, queuing: {queues: 4, handSize: 9, queueLengthLimit: 5}}\n";
    let dir = scratch("from-cluster-bad");
    let kubectl = fake_kubectl(&dir, bad, None);
    let out = apf_with_kubectl(&kubectl, &["check", "--from-cluster"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("bad") && stderr(&out).contains("handSize"),
        "{}",
        stderr(&out)
    );

    let missing = apf_with_kubectl(
        std::path::Path::new("/nonexistent/kubectl"),
        &["check", "--from-cluster"],
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("APF_KUBECTL"),
        "{}",
        stderr(&missing)
    );
}
