"""The request attributes Kubernetes' API server derives from an HTTP
method, a URL path and the ``watch`` query parameter: the request-to-digest
helper of every binding (Rust ``RequestInfo::parse``, Go ``ParsePath``),
with one set of expectations for all in
``tests/data/request-info-cases.json`` at the repository root.

    digest = dataclasses.replace(apf.parse_path("GET", "/api/v1/namespaces/ns/pods"),
                                 user=user, groups=groups)
"""

from __future__ import annotations

from .types import RequestDigest

_RESOURCE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def parse_path(method: str, path: str, watch: str = "") -> RequestDigest:
    """``/api/v1/...`` is the core group, ``/apis/GROUP/VERSION/...`` a named
    group, then optionally ``namespaces/NAMESPACE``, then
    ``RESOURCE[/NAME[/SUBRESOURCE]]`` (``namespaces/NAME`` alone, or with
    ``status`` or ``finalize``, is the namespace object itself). Any other
    path, and a group version's discovery, is a non-resource request whose
    verb is the lower-case method. ``watch`` ``"true"`` or ``"1"`` turns get
    and list into watch. The user and groups are left empty: fill them in
    from authentication."""
    plain = RequestDigest(user="", verb=method.lower(), is_resource_request=False, path=path)
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return plain
    if not rest:
        return plain  # a group version's discovery
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    upper = method.upper()
    if upper in ("GET", "HEAD"):
        verb = "watch" if watch in ("true", "1") else ("get" if name else "list")
    elif upper == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _RESOURCE_VERBS.get(upper, method.lower())
    return RequestDigest(user="", verb=verb, is_resource_request=True, api_group=group,
                         resource=resource, subresource=subresource, namespace=namespace,
                         name=name, path=path)
