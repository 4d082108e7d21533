"""Writes tests/data/request-info-cases.json (the request-info cases every
binding checks) as tab-separated lines for http_test.cpp, which has no JSON
library: method, path, watch, then the wanted verb, is_resource_request
(0/1), api_group, resource, subresource, namespace, name, path."""
import json
import sys

FIELDS = ("verb", "is_resource_request", "api_group", "resource", "subresource",
          "namespace", "name", "path")

cases = json.load(open(sys.argv[1]))["cases"]
with open(sys.argv[2], "w") as out:
    for case in cases:
        want = case["want"]
        row = [case["method"], case["path"], case["watch"]] + [
            ("1" if want[f] else "0") if f == "is_resource_request" else want[f] for f in FIELDS]
        if any("\t" in v or "\n" in v for v in row):
            sys.exit(f"a case has a tab or newline: {row!r}")
        out.write("\t".join(row) + "\n")
