#![cfg(not(loom))]
//! The `apf` binary fed hostile or careless input (issue 13): each case
//! must end promptly with a clear message and status 1 (or, for a reader
//! that went away, quietly), never a panic, a hang or a huge echo.

use std::process::{Command, Stdio};

mod support;
use support::{apf, scratch, stderr, stdout};

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("test file");
    path.to_str().expect("UTF-8 path").to_string()
}

const LEVEL: &str = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: NAME}\nspec: {type: Limited, limited: {limitResponse: {type: Reject}}}\n";

#[test]
fn an_endless_input_fails_at_the_size_cap_naming_it() {
    // Before the cap, `apf check /dev/zero` read forever and grew to
    // gigabytes; now it stops after 16 MiB. Nothing here is timed: a hang
    // would hang the test, a panic would show as status 101.
    for args in [
        vec!["check", "/dev/zero"],
        vec!["check", "--workload", "/dev/zero"],
        vec!["simulate", "--config", "/dev/zero"],
        vec!["simulate", "--workload", "/dev/zero"],
    ] {
        let out = apf(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("/dev/zero") && err.contains("MAX_INPUT_BYTES") && err.contains("16 MiB"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_reader_that_goes_away_ends_apf_quietly() {
    // The pipe's read end is closed before apf starts, so its first write
    // meets a broken pipe for certain (no race with a `head` that exits).
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_apf"))
        .args(["defaults"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("the apf binary runs");
    assert!(
        stderr(&out).is_empty(),
        "no panic message: {}",
        stderr(&out)
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "ended by SIGPIPE as cat or grep would be, not exit 101: {:?}",
        out.status
    );
}

#[test]
fn a_standard_output_that_fails_ends_apf_with_a_message() {
    // /dev/full takes no byte (ENOSPC): not a broken pipe, so no SIGPIPE
    // ends the process; every command must say what failed and exit 1,
    // never panic (exit 101).
    let dir = scratch("stdout_fails");
    let config = write(&dir, "builtin.yaml", &stdout(&apf(&["defaults"])));
    for args in [
        vec!["defaults"],
        vec!["check", &config],
        vec!["simulate", "--duration", "1s"],
        vec![
            "classify",
            "--user",
            "u",
            "--verb",
            "get",
            "--resource",
            "pods",
        ],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = Command::new(env!("CARGO_BIN_EXE_apf"))
            .args(&args)
            .stdout(Stdio::from(full))
            .stderr(Stdio::piped())
            .output()
            .expect("the apf binary runs");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("apf: cannot write to standard output") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_configuration_without_objects_is_refused() {
    let dir = scratch("empty");
    for (name, text) in [
        ("empty.yaml", ""),
        ("comments.yaml", "# nothing here\n---\n"),
        ("list.yaml", "apiVersion: v1\nkind: List\nitems: []\n"),
        (
            "list.json",
            "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}",
        ),
    ] {
        let path = write(&dir, name, text);
        for args in [
            vec!["check", path.as_str()],
            vec!["simulate", "--config", path.as_str(), "--duration", "1s"],
        ] {
            let out = apf(&args);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
            assert!(
                stderr(&out).contains("no FlowSchema or PriorityLevelConfiguration objects"),
                "{args:?}: {}",
                stderr(&out)
            );
        }
    }
}

#[test]
fn one_broken_document_does_not_hide_the_others_errors() {
    let dir = scratch("documents");
    let text = format!(
        "{}---\n: : :\n---\n{}",
        LEVEL
            .replace("NAME", "first")
            .replace("flowcontrol.apiserver.k8s.io/v1", "bad/v1"),
        LEVEL
            .replace("NAME", "third")
            .replace("PriorityLevelConfiguration", "PriorityLevel"),
    );
    let path = write(&dir, "three.yaml", &text);
    let out = apf(&["check", &path]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("3 error(s)"), "{err}");
    assert!(err.contains("\"first\" (document 1): apiVersion"), "{err}");
    // The syntax error's line is the line in the whole file.
    assert!(
        err.contains("(document 2): Parse error") && err.contains("line 6"),
        "{err}"
    );
    assert!(
        err.contains("PriorityLevel \"third\" (document 3): kind"),
        "{err}"
    );
}

#[test]
fn json_has_the_same_node_budget_as_yaml() {
    let dir = scratch("nodes");
    // Small in bytes, far over the node budget.
    let many = format!("[{}0]", "0,".repeat(300_000));
    let json = write(&dir, "many.json", &many);
    let yaml = write(&dir, "many.yaml", &format!("x: {many}\n"));
    for path in [json, yaml] {
        let out = apf(&["check", &path]);
        assert_eq!(out.status.code(), Some(1), "{path}");
        let err = stderr(&out);
        assert!(
            err.contains("more than 200000 nodes (MAX_INPUT_NODES)"),
            "{path}: {err}"
        );
    }
}

#[test]
fn errors_quote_a_huge_name_only_in_part() {
    let dir = scratch("long-name");
    let name = "n".repeat(2 << 20);
    let path = write(&dir, "long.yaml", &LEVEL.replace("NAME", &name));
    let out = apf(&["check", &path]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("metadata.name"),
        "{}",
        &err[..err.len().min(500)]
    );
    assert!(
        err.len() < 4096,
        "a 2 MiB name made a {}-byte message",
        err.len()
    );
    assert!(err.contains(&format!("({} bytes in all)", name.len())));
}

#[test]
fn classify_warns_on_a_verb_kubernetes_never_sends() {
    let out = apf(&[
        "classify",
        "--user",
        "u",
        "--verb",
        "lst",
        "--resource",
        "pods",
    ]);
    assert!(out.status.success(), "a warning, not an error");
    assert!(stdout(&out).contains("flow schema:"));
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains("\"lst\"") && err.contains("list"),
        "{err}"
    );
    for args in [
        ["--verb", "list", "--resource", "pods"],
        ["--verb", "post", "--non-resource", "--path=/x"],
    ] {
        let mut all = vec!["classify", "--user", "u"];
        all.extend(args);
        let out = apf(&all);
        assert!(out.status.success(), "{all:?}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{all:?}: {}", stderr(&out));
    }
    // A resource verb is not a non-resource one.
    let out = apf(&[
        "classify",
        "--user",
        "u",
        "--verb",
        "list",
        "--non-resource",
        "--path",
        "/x",
    ]);
    assert!(stderr(&out).contains("non-resource request"));
}

#[test]
fn check_dash_reads_standard_input() {
    use std::io::Write;
    let yaml = stdout(&apf(&["defaults"]));
    let mut child = Command::new(env!("CARGO_BIN_EXE_apf"))
        .args(["check", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the apf binary runs");
    // An apf that does not read its input may close the pipe early: the
    // status below says so, not this write.
    let _ = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes());
    let out = child.wait_with_output().expect("apf ends");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("standard input: valid:"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn check_shows_a_dangling_schema_beside_other_errors() {
    // One schema names a level that does not exist (a notice: Kubernetes
    // keeps it, matching nothing), another level is broken (an error): the
    // notice must not wait until the error is fixed.
    let dir = scratch("dangling_beside_errors");
    let text = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: orphan}\nspec: {matchingPrecedence: 500, priorityLevelConfiguration: {name: nowhere}}\n---\napiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: broken}\nspec: {type: Limited, limited: {nominalConcurrencyShares: -1, limitResponse: {type: Reject}}}\n";
    let file = write(&dir, "config.yaml", text);
    let out = apf(&["check", &file]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("broken"), "the error: {err}");
    assert!(
        err.contains("note: FlowSchema \"orphan\"") && err.contains("nowhere"),
        "the dangling notice beside the error: {err}"
    );
}
