"""API errors on demand and the emulator's request log.

A ``Fault`` answers matching requests with an error Status instead of serving them: 409
Conflict, 429 TooManyRequests with ``Retry-After``, 500 InternalError, or 410 Gone (for a watch:
the ERROR event with a 410 Expired Status that a real server sends inside the stream). Each
fault fires ``times`` times (None: until removed). Every request is logged as a
``RequestRecord`` with its verb (get, list, watch, create, delete, patch, update, connect) so a
test counts what the client really sent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .store import ApiError

_REASONS = {409: "Conflict", 410: "Expired", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            403: "Forbidden", 404: "NotFound"}


@dataclass
class Fault:
    status: int
    verb: str | None = None  # None: any verb
    resource: str | None = None  # e.g. "pods", "networkpolicies", "pods/exec"
    name: str | None = None
    times: int | None = 1
    retry_after_s: int | None = None  # 429: the Retry-After header and details.retryAfterSeconds
    message: str | None = None
    fired: int = 0

    def matches(self, verb: str, resource: str, name: str | None) -> bool:
        return ((self.verb is None or self.verb == verb) and (self.resource is None or self.resource == resource)
                and (self.name is None or self.name == name) and (self.times is None or self.fired < self.times))

    def error(self) -> ApiError:
        reason = _REASONS.get(self.status, "InternalError")
        message = self.message or {
            409: "Operation cannot be fulfilled: the object has been modified; please apply your changes to the "
                 "latest version and try again",
            410: "too old resource version",
            429: "Too many requests, please try again later.",
            500: "Internal error occurred: emulator fault",
        }.get(self.status, f"emulator fault {self.status}")
        details: dict[str, Any] = {}
        headers: dict[str, str] = {}
        if self.retry_after_s is not None:
            details["retryAfterSeconds"] = self.retry_after_s
            headers["Retry-After"] = str(self.retry_after_s)
        return ApiError(self.status, reason, message, details or None, headers)


@dataclass
class RequestRecord:
    t: float
    method: str
    path: str
    verb: str
    resource: str  # "pods", "pods/exec", "networkpolicies", "" for discovery
    namespace: str | None
    name: str | None
    query: dict[str, str]
    status: int = 0
    fault: bool = False


@dataclass
class RequestLog:
    records: list[RequestRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, rec: RequestRecord) -> RequestRecord:
        with self._lock:
            self.records.append(rec)
        return rec

    def mark(self) -> int:
        """A position in the log; ``since(mark)`` is everything logged after it."""
        with self._lock:
            return len(self.records)

    def since(self, mark: int = 0, **match: Any) -> list[RequestRecord]:
        with self._lock:
            recs = self.records[mark:]
        return [r for r in recs if all(getattr(r, k) == v for k, v in match.items())]

    def count(self, mark: int = 0, **match: Any) -> int:
        return len(self.since(mark, **match))


@dataclass
class Faults:
    rules: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.rules.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def take(self, verb: str, resource: str, name: str | None) -> Fault | None:
        with self._lock:
            for f in self.rules:
                if f.matches(verb, resource, name):
                    f.fired += 1
                    return f
        return None


def now() -> float:
    return time.time()
