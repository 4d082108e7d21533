#![cfg(not(loom))]
//! The operator's workflow in `apf` (issue 13): a configuration file goes
//! on top of the built-in objects as a cluster would apply it, `--replace`
//! uses the file alone, and the report says which objects came from where.

use std::process::Output;

mod support;
use support::{apf, scratch, stderr, stdout};

/// One FlowSchema for tenants, its new level, and a replaced workload-low.
fn overrides() -> String {
    format!(
        "{}/../tests/data/operator-overrides.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// A node's heartbeat: matched by the built-in `system-node-high` schema only.
const HEARTBEAT: &[&str] = &[
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
];

fn schema_and_level(out: &Output) -> (String, String) {
    assert!(out.status.success(), "{}", stderr(out));
    let text = stdout(out);
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{key} in {text}"))
            .to_string()
    };
    (field("flow schema:"), field("priority level:"))
}

#[test]
fn a_file_adds_to_and_overrides_the_builtin_objects() {
    let file = overrides();
    // Before issue 13 the file replaced everything: the heartbeat fell to
    // catch-all. Now the built-in schema still takes it ...
    let mut args = HEARTBEAT.to_vec();
    args.extend(["--config", &file]);
    assert_eq!(
        schema_and_level(&apf(&args)),
        ("system-node-high".into(), "node-high".into())
    );
    // ... and the file's own schema takes what it matches.
    let tenant = apf(&[
        "classify",
        "--config",
        &file,
        "--user",
        "system:serviceaccount:t1:app",
        "--group",
        "system:serviceaccounts",
        "--group",
        "system:authenticated",
        "--verb",
        "get",
        "--resource",
        "configmaps",
        "--namespace",
        "t1",
    ]);
    assert_eq!(
        schema_and_level(&tenant),
        ("tenants".into(), "tenant-level".into())
    );
    // --replace: the file alone (and the mandatory objects).
    args.push("--replace");
    assert_eq!(
        schema_and_level(&apf(&args)),
        ("catch-all".into(), "catch-all".into())
    );
}

#[test]
fn the_report_says_where_each_object_came_from() {
    let file = overrides();
    let out = apf(&["simulate", "--config", &file, "--duration", "1s"]);
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 3),
        "{}",
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(
        text.contains("on top of Kubernetes' built-in configuration"),
        "{text}"
    );
    assert!(
        text.contains(
            "priority levels: tenant-level (new), workload-low (replaces the built-in one)"
        ),
        "{text}"
    );
    assert!(text.contains("flow schemas: tenants (new)"), "{text}");
    assert!(
        text.contains("7 priority levels, 11 flow schemas"),
        "{text}"
    );
    // 8 built-in levels, one replaced, one added.
    assert!(
        text.contains("9 priority levels, 12 flow schemas"),
        "{text}"
    );

    let out = apf(&[
        "simulate",
        "--config",
        &file,
        "--replace",
        "--duration",
        "1s",
    ]);
    let text = stdout(&out);
    assert!(text.contains("alone (--replace)"), "{text}");
    assert!(!text.contains("replaces the built-in one"), "{text}");
}

#[test]
fn replace_needs_a_config() {
    let out = apf(&["simulate", "--replace"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(stderr(&out).contains("--config"), "{}", stderr(&out));
}

#[test]
fn the_guides_sample_service_configuration_is_valid_and_protects_its_tenants() {
    // docs/writing-flowschemas.md walks through these two files.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let config = format!("{root}/examples/configs/small-service.yaml");
    let workload = format!("{root}/examples/configs/small-service-workload.yaml");
    let out = apf(&["check", &config]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("valid: 5 priority levels, 7 flow schemas"));
    let out = apf(&[
        "simulate",
        "--config",
        &config,
        "--replace",
        "--workload",
        &workload,
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "verdict passes:\n{text}");
    for (flow, level) in [
        ("paid-tenant ×20", "interactive"),
        ("acme-exports", "exports"),
        ("free-tenant ×5", "free-tier"),
        ("probes", "exempt"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(flow) && l.split_whitespace().any(|w| w == level)),
            "{flow} on {level}:\n{text}"
        );
    }
    // A tenant's API key classifies as the guide says.
    let out = apf(&[
        "classify",
        "--config",
        &config,
        "--replace",
        "--user",
        "key:acme-ci",
        "--group",
        "tenant:acme",
        "--group",
        "plan:paid",
        "--group",
        "system:authenticated",
        "--verb",
        "list",
        "--api-group",
        "shop.example",
        "--resource",
        "orders",
        "--namespace",
        "acme",
    ]);
    assert_eq!(
        schema_and_level(&out),
        ("paid-tenants".into(), "interactive".into())
    );
    assert!(
        stdout(&out).contains("distinguisher:  acme (by namespace)"),
        "{}",
        stdout(&out)
    );
}

/// Checks that `text` is well-formed markup as far as the charts use it:
/// every element closed in order, attributes quoted. (The machine has no
/// headless browser, so the page is checked by parsing, not rendering.)
fn well_formed(text: &str) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        if let Some(body) = rest.strip_prefix("!--") {
            let end = body.find("-->").ok_or("unclosed comment")?;
            rest = &body[end + 3..];
            continue;
        }
        let end = rest.find('>').ok_or("unclosed tag")?;
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if !tag.matches('"').count().is_multiple_of(2) {
            return Err(format!("unbalanced quotes in <{tag}>"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            match open.pop() {
                Some(o) if o == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().unwrap_or_default();
            open.push(name.to_string());
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed: {open:?}"))
    }
}

#[test]
fn out_writes_an_index_page_with_the_report_and_every_chart() {
    let dir = scratch("page");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = apf(&[
        "simulate",
        "--config",
        &format!("{root}/examples/configs/small-service.yaml"),
        "--replace",
        "--workload",
        &format!("{root}/examples/configs/small-service-workload.yaml"),
        "--duration",
        "5s",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 3),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("index.html"), "{}", stdout(&out));
    let html = std::fs::read_to_string(dir.join("index.html")).expect("index.html");
    assert!(html.starts_with("<!DOCTYPE html>"));
    // The report as printed, escaped (the flow label's "×" survives).
    assert!(
        html.contains("<pre>apf simulate: workload &quot;small-service&quot;"),
        "{html}"
    );
    assert!(html.contains("paid-tenant ×20"));
    assert!(html.contains("verdict: "));
    let images: Vec<&str> = html
        .split("<img src=\"")
        .skip(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect();
    assert_eq!(
        images,
        [
            "seat-share.svg",
            "throughput.svg",
            "rejections.svg",
            "queue-length.svg",
            "level-seats.svg",
            "wait-time.svg"
        ]
    );
    for image in images {
        let svg = std::fs::read_to_string(dir.join(image)).expect(image);
        assert!(
            svg.starts_with("<svg") && svg.contains("xmlns=\"http://www.w3.org/2000/svg\""),
            "{image}"
        );
        well_formed(&svg).unwrap_or_else(|e| panic!("{image}: {e}"));
    }
    // The page itself, void elements aside.
    let page = html
        .replace("<meta charset=\"utf-8\">", "")
        .replace("<!DOCTYPE html>", "");
    let page = page
        .split("<img ")
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part.to_string()
            } else {
                part[part.find('>').unwrap() + 1..].to_string()
            }
        })
        .collect::<String>();
    well_formed(&page).unwrap_or_else(|e| panic!("index.html: {e}"));
}

#[test]
fn the_report_explains_lending_borrowing_and_queue_totals_where_they_occur() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = apf(&[
        "simulate",
        "--config",
        &format!("{root}/examples/configs/small-service.yaml"),
        "--replace",
        "--workload",
        &format!("{root}/examples/configs/small-service-workload.yaml"),
        "--duration",
        "10s",
    ]);
    let text = stdout(&out);
    assert!(
        text.contains("note: exports: limit avg")
            && text.contains("is below its nominal 22: it lent seats"),
        "{text}"
    );
    assert!(
        text.contains("note: interactive: limit avg") && text.contains("it borrowed seats"),
        "{text}"
    );
    assert!(
        text.contains("note: exports: queue max") && text.contains("handSize × queueLengthLimit"),
        "{text}"
    );
    // Levels that neither lent, borrowed nor queued get no note.
    assert!(!text.contains("note: free-tier"), "{text}");
}

#[test]
fn compare_fairness_names_the_policy_it_compares_and_refuses_unknown_ones() {
    let workload = format!(
        "{}/../examples/workloads/minimal.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    for (flag, policy) in [
        ("--compare-fairness", "flow"),
        ("--compare-fairness=flow-maxmin", "flow-maxmin"),
    ] {
        let out = apf(&[
            "simulate",
            flag,
            "--workload",
            &workload,
            "--duration",
            "1s",
        ]);
        assert!(out.status.success(), "{flag}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(
            text.contains(&format!("avg seats k8s -> {policy} ")),
            "{flag}: {text}"
        );
    }
    let out = apf(&[
        "simulate",
        "--compare-fairness=fair",
        "--workload",
        &workload,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("unknown fairness policy \"fair\": one of kubernetes, flow, flow-maxmin"),
        "{}",
        stderr(&out)
    );
}
