"""Python bindings for libapf: Kubernetes' API Priority and Fairness as a
library (ctypes over the C ABI in ``include/apf.h``).

    import apf

    with apf.Dispatcher() as dispatcher:            # the built-in configuration
        digest = apf.RequestDigest(user="alice", verb="get", resource="pods",
                                   namespace="default", path="/api/v1/namespaces/default/pods")
        try:
            with dispatcher.request(digest) as r:     # waits if queued
                serve(r.priority_level_uid)
        except apf.Rejected as e:
            reply_429(e.reason)

The shared library is found through ``APF_LIBRARY`` (a file or a directory)
or in the repository's ``target/release``.
"""

from ._library import ApfError, ClosedError, LibraryNotFound, status_text
from .dispatcher import Dispatcher, Request, RequestScope, default_adaptive_options, default_options
from .observe import metrics_content_type
from .paths import parse_path
from .aio import AsyncRequestScope
from .workqueue import (
    Item,
    Kind,
    Lane,
    RateLimiter,
    ShutDown,
    Workqueue,
    bucket_rate_limiter,
    default_controller_rate_limiter,
    exponential_failure_rate_limiter,
    fast_slow_rate_limiter,
    item_bucket_rate_limiter,
    max_of_rate_limiter,
)
from .types import (
    AdaptiveOptions,
    AdaptiveState,
    Decision,
    Options,
    Outcome,
    RejectReason,
    Rejected,
    RequestDigest,
    WorkEstimate,
)


def abi_version() -> int:
    """The loaded library's packed version (``MAJOR << 16 | MINOR << 8 | PATCH``)."""
    from ._library import lib

    return lib().apf_abi_version()


__all__ = [
    "AdaptiveOptions",
    "AdaptiveState",
    "ApfError",
    "AsyncRequestScope",
    "ClosedError",
    "Decision",
    "Dispatcher",
    "LibraryNotFound",
    "Options",
    "Outcome",
    "RejectReason",
    "Rejected",
    "Request",
    "RequestDigest",
    "RequestScope",
    "WorkEstimate",
    "abi_version",
    "default_adaptive_options",
    "default_options",
    # the workqueue family (apf.workqueue)
    "Item",
    "Kind",
    "Lane",
    "RateLimiter",
    "ShutDown",
    "Workqueue",
    "bucket_rate_limiter",
    "default_controller_rate_limiter",
    "exponential_failure_rate_limiter",
    "fast_slow_rate_limiter",
    "item_bucket_rate_limiter",
    "max_of_rate_limiter",
    "metrics_content_type",
    "status_text",
]
