"""Writes tests/data/request-info-cases.json (the request-info cases every
binding checks) as tab-separated lines for the C and C++ tests
(bindings/c/test_request_info.c, bindings/cpp/tests/http_test.cpp), which
have no JSON library: method, path, query, then the wanted verb,
is_resource_request (0/1), api_group, resource, subresource, namespace,
name, path.
  python3 scripts/request-info-cases-tsv.py CASES.json OUT.tsv"""
import json
import sys

FIELDS = ("verb", "is_resource_request", "api_group", "resource", "subresource",
          "namespace", "name", "path")

cases = json.load(open(sys.argv[1]))["cases"]
with open(sys.argv[2], "w") as out:
    for case in cases:
        want = case["want"]
        row = [case["method"], case["path"], case["query"]] + [
            ("1" if want[f] else "0") if f == "is_resource_request" else want[f] for f in FIELDS]
        if any("\t" in v or "\n" in v for v in row):
            sys.exit(f"a case has a tab or newline: {row!r}")
        out.write("\t".join(row) + "\n")
