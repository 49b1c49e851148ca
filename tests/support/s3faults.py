"""A fault-injecting HTTP proxy in front of a real S3 server (moto) on 127.0.0.1.

farm talks to the proxy as its S3 endpoint; the proxy forwards each request to the server
unchanged, except that a seeded plan makes some of them fail the ways object stores fail under
load:

- ``slowdown``: 503 with S3's ``SlowDown`` error body, in bursts (the next few requests too);
- ``500``: 500 ``InternalError``;
- ``drop``: the connection is closed without an answer, the request never forwarded;
- ``lost_answer``: the request IS forwarded (a PUT lands) and then the connection is reset
  before the answer: the client cannot know, so its retry must be idempotent;
- ``slow``: the answer comes after ``slow_s`` seconds (longer than the client's request timeout
  when ``slow_s`` says so: the request lands later, beside the client's retry).

``permanent_after`` (a number of write requests) or ``fail_writes()`` turns every later write
(PUT/POST/DELETE) into a 503 SlowDown for good, to test the end of the retry budget.
``injected`` counts what was done, so a test can check that the faults it relies on happened.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                 b"<Message>Please reduce your request rate.</Message></Error>")
INTERNAL_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
                 b"<Message>We encountered an internal error. Please try again.</Message></Error>")
WRITES = ("PUT", "POST", "DELETE")


class FaultPlan:
    """Which request gets which fault: seeded, so a run meets the same faults every time."""

    def __init__(self, seed: int = 0, rates: dict[str, float] | None = None, burst: int = 3,
                 slow_s: float = 0.5, permanent_after: int | None = None, writes_only: bool = False) -> None:
        self.rng = random.Random(seed)
        self.rates = rates or {}
        self.burst = burst
        self.slow_s = slow_s
        self.permanent_after = permanent_after  # writes that pass before every write fails
        self.writes_only = writes_only
        self.lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self.writes = 0
        self._burst_left = 0
        self.writes_failing = False

    def fail_writes(self) -> None:
        """From now on every write is throttled (a store that does not recover)."""
        with self.lock:
            self.writes_failing = True

    def decide(self, method: str) -> str | None:
        with self.lock:
            self.requests += 1
            write = method in WRITES
            if write:
                self.writes += 1
                if self.writes_failing or (self.permanent_after is not None and self.writes > self.permanent_after):
                    self.injected["permanent"] += 1
                    return "slowdown"
            if self.writes_only and not write:
                return None
            if self._burst_left > 0:
                self._burst_left -= 1
                self.injected["slowdown"] += 1
                return "slowdown"
            draw = self.rng.random()
            for kind, rate in sorted(self.rates.items()):
                if draw < rate:
                    self.injected[kind] += 1
                    if kind == "slowdown":
                        self._burst_left = self.burst - 1
                    return kind
                draw -= rate
            return None


class FaultProxy:
    """The proxy server, in daemon threads of this process; ``close()`` stops it."""

    def __init__(self, upstream: str, plan: FaultPlan) -> None:
        host, port = upstream.removeprefix("http://").rstrip("/").split(":")
        self.upstream = (host, int(port))
        self.plan = plan
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                return

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reset(self) -> None:
                # RST instead of FIN: what a load balancer dropping the connection looks like
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                try:
                    self.connection.close()
                except OSError:
                    pass

            def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> None:
                self.send_response(status)
                for k, v in headers or []:
                    self.send_header(k, v)
                if self.command != "HEAD" or not any(k.lower() == "content-length" for k, _ in headers or []):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _handle(self) -> None:
                body = self._body()
                fault = proxy.plan.decide(self.command)
                if fault == "slowdown":
                    return self._answer(503, SLOWDOWN_BODY, [("Content-Type", "application/xml")])
                if fault == "500":
                    return self._answer(500, INTERNAL_BODY, [("Content-Type", "application/xml")])
                if fault == "drop":
                    return self._reset()
                if fault == "slow":
                    time.sleep(proxy.plan.slow_s)
                status, data, headers = proxy.forward(self.command, self.path, dict(self.headers), body)
                if fault == "lost_answer":
                    return self._reset()
                try:
                    self._answer(status, data, headers)
                except OSError:  # the client gave up (its timeout): nothing to answer
                    self.close_connection = True

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes
                ) -> tuple[int, bytes, list[tuple[str, str]]]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            fwd = {k: v for k, v in headers.items() if k.lower() not in ("transfer-encoding", "connection")}
            if body or method in WRITES:
                fwd["Content-Length"] = str(len(body))
            conn.request(method, path, body=body or None, headers=fwd)
            resp = conn.getresponse()
            data = resp.read()
            keep = [(k, v) for k, v in resp.getheaders()
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date")]
            if method == "HEAD":
                keep.append(("Content-Length", resp.getheader("Content-Length") or "0"))
            return resp.status, data, keep
        finally:
            conn.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
