"""apf.parse_path against the expectations every binding's request-to-digest
helper shares (tests/data/request-info-cases.json at the repository root)."""

import json
from pathlib import Path

import apf

CASES = Path(__file__).resolve().parents[3] / "tests" / "data" / "request-info-cases.json"


def test_every_shared_case():
    cases = json.loads(CASES.read_text())["cases"]
    assert len(cases) >= 70
    for case in cases:
        got = apf.parse_path(case["method"], case["path"], case["query"])
        want = case["want"]
        assert got.user == "" and tuple(got.groups) == ()
        assert {
            "verb": got.verb,
            "is_resource_request": got.is_resource_request,
            "api_group": got.api_group,
            "resource": got.resource,
            "subresource": got.subresource,
            "namespace": got.namespace,
            "name": got.name,
            "path": got.path,
        } == want, (case["method"], case["path"], case["query"])


def test_a_bytes_query_reads_as_its_text():
    # ASGI hands the query over as bytes.
    got = apf.parse_path("GET", "/api/v1/pods", b"fieldSelector=metadata.name%3Dp&watch=")
    assert (got.verb, got.name) == ("watch", "p")


def test_a_query_that_is_not_utf8_is_read_as_bytes():
    # As in Kubernetes: a watch value that is neither 0 nor false.
    assert apf.parse_path("GET", "/api/v1/pods", b"watch=\xff").verb == "watch"
