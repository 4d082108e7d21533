"""The Python proof of scripts/install-checks.sh, run in a fresh venv
outside the repository with no APF_LIBRARY: the wheel's bundled libapf
starts and finishes a request and runs a workqueue item."""

import os
from pathlib import Path

import apf
from apf import _library

assert "APF_LIBRARY" not in os.environ
loaded = Path(_library.lib()._name)
assert loaded.parent == Path(apf.__file__).parent, f"not the bundled library: {loaded}"
assert (Path(apf.__file__).parent / "py.typed").exists()

with apf.Dispatcher.builtin() as d:
    digest = apf.RequestDigest(user="alice", verb="get", is_resource_request=False,
                               path="/healthz")
    with d.request(digest):
        pass
    assert "apiserver_flowcontrol_dispatched_requests_total" in d.metrics_text()

with apf.Workqueue() as q:
    q.add("k")
    key = q.try_get()
    assert key == b"k", key
    q.done(key)
print("python: one request and one workqueue item through the wheel's libapf")
