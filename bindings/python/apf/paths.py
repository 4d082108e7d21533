"""The request attributes Kubernetes' API server derives from an HTTP
method, a URL path and the ``watch`` query parameter: libapf's own parser
(``apf_request_info_parse``, Rust ``RequestInfo::parse``), the one
implementation behind every binding's path helper, checked on
``tests/data/request-info-cases.json`` at the repository root.

    digest = dataclasses.replace(apf.parse_path("GET", "/api/v1/namespaces/ns/pods"),
                                 user=user, groups=groups)
"""

from __future__ import annotations

import ctypes

from . import _bindings as b
from ._library import check, lib
from .types import RequestDigest


def parse_path(method: str, path: str, watch: str = "") -> RequestDigest:
    """Kubernetes' request-info rules: ``/api/v1/...`` is the core group,
    ``/apis/GROUP/VERSION/...`` a named group, then optionally a verb prefix
    (``watch/``, ``proxy/``), then optionally ``namespaces/NAMESPACE``, then
    ``RESOURCE[/NAME[/SUBRESOURCE]]`` (``namespaces/NAME`` alone, or with
    ``status`` or ``finalize``, is the namespace object itself); an empty
    segment inside the path is a segment (``/api/v1/namespaces//pods``
    lists pods in every namespace). Any other path, and a group version's
    discovery, is a non-resource request whose verb is the lower-case
    method. ``watch`` is the ``watch`` query parameter, ``""`` when absent:
    any other value but ``"0"`` or ``"false"`` turns a list into a watch. The user and groups are left empty: fill them in
    from authentication."""
    m, p, w = method.encode(), path.encode(), watch.encode()
    # One pointer to the path's bytes, both passed and used as the base the
    # fields are sliced from.
    path_ptr = ctypes.cast(ctypes.c_char_p(p), ctypes.POINTER(ctypes.c_char))
    base = ctypes.cast(path_ptr, ctypes.c_void_p).value or 0
    info = b.apf_request_info()
    check(lib().apf_request_info_parse(m, len(m), path_ptr, len(p), w, len(w), ctypes.byref(info)),
          "apf_request_info_parse")
    try:
        verb = ctypes.string_at(info.verb.ptr, info.verb.len).decode()
    finally:
        lib().apf_text_free(ctypes.byref(info.verb))

    def part(s) -> str:
        # Every field but the verb points into `p`: slice the same bytes.
        if not s.len:
            return ""
        start = ctypes.cast(s.ptr, ctypes.c_void_p).value - base
        return p[start:start + s.len].decode()

    return RequestDigest(user="", verb=verb, is_resource_request=bool(info.is_resource_request),
                         api_group=part(info.api_group), resource=part(info.resource),
                         subresource=part(info.subresource), namespace=part(info.namespace_),
                         name=part(info.name), path=path)
