"""The ASGI middleware under real servers: uvicorn tells a disconnect only
with an `http.disconnect` message (it does not cancel the task), hypercorn
as well; either way a request whose client hung up while queued must be
withdrawn (never served later on a dead connection), and a queued request
whose client stays is served with its body intact. The application is
tests/asgi_server_app.py, run in a server process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SERVERS = {
    "uvicorn": lambda port: [sys.executable, "-m", "uvicorn", "asgi_server_app:app",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
    "hypercorn": lambda port: [sys.executable, "-m", "hypercorn", "asgi_server_app:app",
                               "--bind", f"127.0.0.1:{port}", "--log-level", "warning"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send_request(port: int, method: str, path: str, body: bytes = b"") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (f"{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode()
    s.sendall(head + body)
    return s


def read_response(s: socket.socket) -> tuple:
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunk(body)
    return status, body


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out += rest[:n]
        body = rest[n + 2:]
    return out


def state(port: int) -> dict:
    return json.loads(read_response(send_request(port, "GET", "/control/state"))[1])


def wait_for(port: int, what, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = state(port)
        if what(st):
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; state: {st}")
        time.sleep(0.02)


@pytest.fixture(params=sorted(SERVERS))
def server(request):
    port = free_port()
    proc = subprocess.Popen(SERVERS[request.param](port), cwd=HERE, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{request.param} did not start")
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # still draining a hung request
            proc.kill()
            proc.wait()


def test_clients_that_leave_while_queued_are_withdrawn(server):
    port = server
    holder = send_request(port, "GET", "/api/v1/hold")
    wait_for(port, lambda st: st["served"] == ["/api/v1/hold"])
    leavers = [send_request(port, "GET", f"/api/v1/left-{i}") for i in range(3)]
    stayer = send_request(port, "POST", "/api/v1/stays", b"the body, read while queued")
    wait_for(port, lambda st: st["requests_live"] == 5)  # 1 served, 4 queued
    for s in leavers:
        s.close()
    # Withdrawn (not left in the queue to take the seat later).
    st = wait_for(port, lambda st: st["requests_live"] == 2)
    assert len(st["cancelled"]) == 1 and st["cancelled"][0].endswith(" 3"), st["cancelled"]
    assert read_response(send_request(port, "GET", "/control/release")) == (200, b"released")
    assert read_response(holder)[0] == 200
    assert read_response(stayer) == (200, b"the body, read while queued")
    st = wait_for(port, lambda st: st["requests_live"] == 0)
    assert st["served"] == ["/api/v1/hold", "/api/v1/stays"]
