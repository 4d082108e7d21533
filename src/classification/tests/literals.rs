//! Kubernetes' `TestLiterals` (match_test.go), with valid verbs in place of
//! its made-up ones so the rules pass validation: each rule alone in a
//! schema, matched against one request.

use super::*;

const GOOD_USER: &str = "goodu";
const GOOD_GROUPS: &[&str] = &["goodg1", "goodg2"];

fn namespaced() -> RequestDigest<'static> {
    RequestDigest {
        name: "eman",
        path: "/apis/goodapig/v1/namespaces/goodns/goodrscs",
        ..resource(
            GOOD_USER,
            GOOD_GROUPS,
            "get",
            "goodapig",
            "goodrscs",
            "",
            "goodns",
        )
    }
}

fn cluster_scoped() -> RequestDigest<'static> {
    RequestDigest {
        name: "eman",
        path: "/apis/goodapig/v1/goodrscs",
        ..resource(
            GOOD_USER,
            GOOD_GROUPS,
            "get",
            "goodapig",
            "goodrscs",
            "",
            "",
        )
    }
}

fn url() -> RequestDigest<'static> {
    non_resource(GOOD_USER, GOOD_GROUPS, "get", "/openapi/v2")
}

fn subject(kind: &str, name: &str) -> String {
    match kind {
        "User" => format!(r#"{{"kind": "User", "user": {{"name": "{name}"}}}}"#),
        _ => format!(r#"{{"kind": "Group", "group": {{"name": "{name}"}}}}"#),
    }
}

fn resource_rule(
    subject: &str,
    verb: &str,
    group: &str,
    res: &str,
    ns: Option<&str>,
    cluster: bool,
) -> String {
    let namespaces = ns
        .map(|n| format!(r#", "namespaces": ["{n}"]"#))
        .unwrap_or_default();
    format!(
        r#"[{{"subjects": [{subject}], "resourceRules": [{{"verbs": ["{verb}"],
        "apiGroups": ["{group}"], "resources": ["{res}"], "clusterScope": {cluster}{namespaces}}}]}}]"#
    )
}

fn url_rule(subject: &str, verb: &str, url: &str) -> String {
    format!(
        r#"[{{"subjects": [{subject}], "nonResourceRules": [{{"verbs": ["{verb}"], "nonResourceURLs": ["{url}"]}}]}}]"#
    )
}

/// Whether a schema made of `rules` alone takes the request.
fn matches(rules: &str, digest: &RequestDigest<'_>) -> bool {
    let mut config = Config::builtin();
    config
        .flow_schemas
        .push(schema("rule", "workload-low", 5, rules));
    let valid = config.validate().unwrap_or_else(|e| panic!("{e}\n{rules}"));
    let c = Classifier::new(&valid);
    let got = c.classify(digest);
    let by_reference = reference::classify(&valid, digest).unwrap();
    assert_eq!(got.schema_index, by_reference.schema_index, "{rules}");
    got.schema.name == "rule"
}

#[test]
fn namespaced_resource_request() {
    let u = subject("User", GOOD_USER);
    let yes = [
        resource_rule(&u, "get", "goodapig", "goodrscs", Some("goodns"), false),
        resource_rule(
            &subject("Group", "goodg1"),
            "get",
            "goodapig",
            "goodrscs",
            Some("goodns"),
            false,
        ),
        resource_rule(
            &subject("User", "*"),
            "get",
            "goodapig",
            "goodrscs",
            Some("goodns"),
            false,
        ),
        resource_rule(
            &subject("Group", "*"),
            "get",
            "goodapig",
            "goodrscs",
            Some("goodns"),
            false,
        ),
        resource_rule(&u, "*", "goodapig", "goodrscs", Some("goodns"), false),
        resource_rule(&u, "get", "*", "goodrscs", Some("goodns"), false),
        resource_rule(&u, "get", "goodapig", "*", Some("goodns"), false),
        resource_rule(&u, "get", "goodapig", "goodrscs", Some("*"), false),
    ];
    let no = [
        resource_rule(
            &subject("User", "badu"),
            "get",
            "goodapig",
            "goodrscs",
            Some("goodns"),
            false,
        ),
        resource_rule(
            &subject("Group", "badg"),
            "get",
            "goodapig",
            "goodrscs",
            Some("goodns"),
            false,
        ),
        resource_rule(&u, "list", "goodapig", "goodrscs", Some("goodns"), false),
        resource_rule(&u, "get", "badapig", "goodrscs", Some("goodns"), false),
        resource_rule(&u, "get", "goodapig", "badrscs", Some("goodns"), false),
        resource_rule(&u, "get", "goodapig", "goodrscs", Some("badns"), false),
    ];
    for r in &yes {
        assert!(matches(r, &namespaced()), "expected a match: {r}");
    }
    for r in &no {
        assert!(!matches(r, &namespaced()), "expected no match: {r}");
    }
}

#[test]
fn cluster_scoped_resource_request() {
    let u = subject("User", GOOD_USER);
    let yes = [
        resource_rule(&u, "get", "goodapig", "goodrscs", None, true),
        resource_rule(&u, "*", "goodapig", "goodrscs", None, true),
        resource_rule(&u, "get", "*", "goodrscs", None, true),
        resource_rule(&u, "get", "goodapig", "*", None, true),
    ];
    let no = [
        resource_rule(&u, "list", "goodapig", "goodrscs", None, true),
        resource_rule(&u, "get", "badapig", "goodrscs", None, true),
        resource_rule(&u, "get", "goodapig", "badrscs", None, true),
        resource_rule(&u, "get", "goodapig", "goodrscs", Some("*"), false),
    ];
    for r in &yes {
        assert!(matches(r, &cluster_scoped()), "expected a match: {r}");
    }
    for r in &no {
        assert!(!matches(r, &cluster_scoped()), "expected no match: {r}");
    }
}

#[test]
fn non_resource_request() {
    let u = subject("User", GOOD_USER);
    for r in [
        url_rule(&u, "get", "/openapi/v2"),
        url_rule(&u, "*", "/openapi/v2"),
        url_rule(&u, "get", "*"),
    ] {
        assert!(matches(&r, &url()), "expected a match: {r}");
    }
    for r in [
        url_rule(&u, "list", "/openapi/v2"),
        url_rule(&u, "get", "/closedapi/v2"),
    ] {
        assert!(!matches(&r, &url()), "expected no match: {r}");
    }
}

#[test]
fn url_prefixes() {
    let u = subject("User", GOOD_USER);
    let at = |path| non_resource(GOOD_USER, GOOD_GROUPS, "get", path);
    // A plain URL also covers what is below it.
    assert!(matches(
        &url_rule(&u, "get", "/healthz"),
        &at("/healthz/etcd")
    ));
    assert!(!matches(&url_rule(&u, "get", "/healthz"), &at("/healthzz")));
    assert!(matches(&url_rule(&u, "get", "/apis/*"), &at("/apis/apps")));
    assert!(matches(&url_rule(&u, "get", "/apis/*"), &at("/apis/")));
    assert!(!matches(&url_rule(&u, "get", "/apis/*"), &at("/apis")));
    assert!(matches(&url_rule(&u, "get", "/"), &at("/anything/at/all")));
}

#[test]
fn subresources() {
    let u = subject("User", GOOD_USER);
    let status = RequestDigest {
        subresource: "status",
        ..namespaced()
    };
    assert!(matches(
        &resource_rule(&u, "get", "goodapig", "goodrscs/status", Some("*"), false),
        &status
    ));
    assert!(!matches(
        &resource_rule(&u, "get", "goodapig", "goodrscs", Some("*"), false),
        &status
    ));
    assert!(!matches(
        &resource_rule(&u, "get", "goodapig", "goodrscs/status", Some("*"), false),
        &namespaced()
    ));
    assert!(matches(
        &resource_rule(&u, "get", "goodapig", "*", Some("*"), false),
        &status
    ));
}

#[test]
fn service_account_subjects() {
    let sa = |ns: &str, name: &str| {
        format!(
            r#"{{"kind": "ServiceAccount", "serviceAccount": {{"namespace": "{ns}", "name": "{name}"}}}}"#
        )
    };
    let as_user = |user| non_resource(user, &[], "get", "/x");
    let rule = |s: &str| url_rule(s, "get", "*");
    assert!(matches(
        &rule(&sa("ns1", "sa1")),
        &as_user("system:serviceaccount:ns1:sa1")
    ));
    assert!(!matches(
        &rule(&sa("ns1", "sa1")),
        &as_user("system:serviceaccount:ns1:sa2")
    ));
    assert!(!matches(
        &rule(&sa("ns1", "sa1")),
        &as_user("system:serviceaccount:ns1:sa1x")
    ));
    assert!(!matches(&rule(&sa("ns1", "sa1")), &as_user("ns1:sa1")));
    assert!(matches(
        &rule(&sa("ns1", "*")),
        &as_user("system:serviceaccount:ns1:anyone")
    ));
    assert!(!matches(
        &rule(&sa("ns1", "*")),
        &as_user("system:serviceaccount:ns10:anyone")
    ));
    assert!(!matches(
        &rule(&sa("ns1", "*")),
        &as_user("system:serviceaccount:ns1")
    ));
}

#[test]
fn long_lists_are_matched_like_short_ones() {
    let u = subject("User", GOOD_USER);
    let many: Vec<String> = (0..20).map(|i| format!("r{i}")).collect();
    let list = |extra: &str| {
        let mut items = many.clone();
        items.push(extra.to_string());
        format!("{items:?}")
    };
    let rules = |resources: String| {
        format!(
            r#"[{{"subjects": [{u}], "resourceRules": [{{"verbs": ["get"], "apiGroups": ["goodapig"],
            "resources": {resources}, "namespaces": ["*"]}}]}}]"#
        )
    };
    let status = RequestDigest {
        subresource: "status",
        ..namespaced()
    };
    assert!(matches(&rules(list("goodrscs")), &namespaced()));
    assert!(!matches(&rules(list("goodrscs")), &status));
    assert!(matches(&rules(list("goodrscs/status")), &status));
    assert!(!matches(&rules(list("goodrscs/status")), &namespaced()));
    let long_sub = "s".repeat(300);
    let long = RequestDigest {
        subresource: &long_sub,
        ..namespaced()
    };
    assert!(matches(
        &rules(list(&format!("goodrscs/{long_sub}"))),
        &long
    ));
}
