"""The request attributes Kubernetes' API server derives from an HTTP
method, a URL path and its raw query string: libapf's own parser
(``apf_request_info_parse_query``, Rust ``RequestInfo::parse``), the one
implementation behind every binding's path helper, checked on
``tests/data/request-info-cases.json`` at the repository root.

    digest = dataclasses.replace(
        apf.parse_path("GET", "/api/v1/namespaces/ns/pods", "watch=1"),
        user=user, groups=groups)
"""

from __future__ import annotations

import ctypes

from . import _bindings as b
from ._library import check, lib
from .types import RequestDigest


def parse_path(method: str, path: str, query: str | bytes = "") -> RequestDigest:
    """Kubernetes' request-info rules: ``/api/v1/...`` is the core group,
    ``/apis/GROUP/VERSION/...`` a named group, then optionally a verb prefix
    (``watch/``, ``proxy/``), then optionally ``namespaces/NAMESPACE``, then
    ``RESOURCE[/NAME[/SUBRESOURCE]]`` (``namespaces/NAME`` alone, or with
    ``status`` or ``finalize``, is the namespace object itself); an empty
    segment inside the path is a segment (``/api/v1/namespaces//pods``
    lists pods in every namespace). Any other path, and a group version's
    discovery, is a non-resource request whose verb is the lower-case
    method. ``query`` is the raw query string without ``?`` (ASGI's
    ``scope["query_string"]``, WSGI's ``environ["QUERY_STRING"]``), read as
    Kubernetes reads a collection GET's: a first ``watch`` value other than
    ``"0"`` or ``"false"`` (any case), an empty one included, makes it a
    watch, and a ``fieldSelector`` requiring ``metadata.name=NAME`` gives it
    that name. The user and groups are left empty: fill them in from
    authentication."""
    m, p = method.encode(), path.encode()
    q = query if isinstance(query, bytes) else query.encode()
    # One pointer to the path's bytes, both passed and used as the base the
    # fields are sliced from.
    path_ptr = ctypes.cast(ctypes.c_char_p(p), ctypes.POINTER(ctypes.c_char))
    base = ctypes.cast(path_ptr, ctypes.c_void_p).value or 0
    info = b.apf_request_info()
    name_text = b.apf_text()
    check(lib().apf_request_info_parse_query(m, len(m), path_ptr, len(p), q, len(q),
                                             ctypes.byref(info), ctypes.byref(name_text)),
          "apf_request_info_parse_query")
    try:
        verb = ctypes.string_at(info.verb.ptr, info.verb.len).decode()
        # A name from the field selector is `name_text`'s, not the path's.
        name = (ctypes.string_at(info.name.ptr, info.name.len).decode()
                if name_text.ptr else None)
    finally:
        lib().apf_text_free(ctypes.byref(info.verb))
        lib().apf_text_free(ctypes.byref(name_text))

    def part(s) -> str:
        # Every other field points into `p`: slice the same bytes.
        if not s.len:
            return ""
        start = ctypes.cast(s.ptr, ctypes.c_void_p).value - base
        return p[start:start + s.len].decode()

    return RequestDigest(user="", verb=verb, is_resource_request=bool(info.is_resource_request),
                         api_group=part(info.api_group), resource=part(info.resource),
                         subresource=part(info.subresource), namespace=part(info.namespace_),
                         name=part(info.name) if name is None else name, path=path)
