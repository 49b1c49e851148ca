"""The emulator's object store: what etcd plus the API server's storage layer do for farm's objects.

Objects are kept as the JSON the API server would return (camelCase dicts). Every write bumps
one cluster-wide ``resourceVersion`` and appends a watch event to a history, so a watch that
starts from a resourceVersion replays what happened after it, and one that starts from before
the last compaction gets what a real server sends: an ERROR event with a 410 Expired Status.
Label and field selectors follow the API server's grammar for the forms clients send.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str, str]  # (resource, namespace or "", name)

# resource plural -> (apiVersion, kind, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "namespaces": ("v1", "Namespace", False),
    "pods": ("v1", "Pod", True),
    "events": ("v1", "Event", True),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy", True),
}


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error the API server answers with a v1 Status body."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str) -> ApiError:
    group = RESOURCES[resource][0].rpartition("/")[0]
    kind = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": resource})


# --- selectors --------------------------------------------------------------------------------

_SET_EXPR = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b=c``)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _label_term(term: str, selector: str | None) -> tuple[str, str, set[str]]:
    if m := _SET_EXPR.match(term):
        return m.group(2), m.group(1), {v.strip() for v in m.group(3).split(",")}
    if "!=" in term:
        key, _, value = term.partition("!=")
        return "notin", key.strip(), {value.strip()}
    if "=" in term:
        key, _, value = term.replace("==", "=").partition("=")
        return "in", key.strip(), {value.strip()}
    if term.startswith("!") and re.fullmatch(r"[A-Za-z0-9./_-]+", term[1:].strip()):
        return "absent", term[1:].strip(), set()
    if re.fullmatch(r"[A-Za-z0-9./_-]+", term):
        return "present", term, set()
    raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid label selector {selector!r}")


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """A predicate for a labelSelector (``=``, ``==``, ``!=``, ``in``, ``notin``, ``k``, ``!k``)."""
    terms = [_label_term(t, selector) for t in _split_selector(selector or "")]

    def ok(labels: dict[str, str]) -> bool:
        for op, key, values in terms:
            if op == "in" and labels.get(key) not in values:
                return False
            if op == "notin" and labels.get(key) in values:
                return False
            if (op == "present") != (key in labels) and op in ("present", "absent"):
                return False
        return True

    return ok


def _dotted(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def field_matcher(selector: str | None) -> Callable[[dict[str, Any]], bool]:
    """A predicate for a fieldSelector (``metadata.name=x``, ``involvedObject.name=y``, ``!=``)."""
    terms: list[tuple[str, str, bool]] = []
    for term in _split_selector(selector or ""):
        neg = "!=" in term
        path, eq, value = term.replace("!=", "=").replace("==", "=").partition("=")
        if not path.strip() or not eq:
            raise ApiError(400, "BadRequest", f"invalid field selector {selector!r}")
        terms.append((path.strip(), value.strip(), neg))
    return lambda obj: all((_dotted(obj, p) == v) != n for p, v, n in terms)


# --- the store --------------------------------------------------------------------------------


@dataclass
class WatchEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str
    namespace: str
    obj: dict[str, Any]


@dataclass
class _Watcher:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[WatchEvent]
    resource: str


@dataclass
class ObjectStore:
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    history: list[WatchEvent] = field(default_factory=list)
    rv: int = 1000
    compacted_rv: int = 0  # a watch from a resourceVersion below this gets 410 Gone
    lock: threading.RLock = field(default_factory=threading.RLock)
    _watchers: list[_Watcher] = field(default_factory=list)

    def _bump(self) -> int:
        self.rv += 1
        return self.rv

    def _publish(self, kind: str, resource: str, namespace: str, obj: dict[str, Any]) -> None:
        ev = WatchEvent(self.rv, kind, resource, namespace, copy.deepcopy(obj))
        self.history.append(ev)
        for w in list(self._watchers):
            if w.resource == resource:
                w.loop.call_soon_threadsafe(w.queue.put_nowait, ev)

    def create(self, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        api_version, kind, _ = RESOURCES[resource]
        with self.lock:
            name = body["metadata"]["name"]
            key = (resource, namespace, name)
            if key in self.objects:
                group = api_version.rpartition("/")[0]
                kind_name = f"{resource}.{group}" if group else resource
                raise ApiError(409, "AlreadyExists", f'{kind_name} "{name}" already exists',
                               {"name": name, "kind": resource})
            obj = copy.deepcopy(body)
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            meta = obj["metadata"]
            if namespace:
                meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["resourceVersion"] = str(self._bump())
            meta.setdefault("generation", 1)
            self.objects[key] = obj
            self._publish("ADDED", resource, namespace, obj)
            return copy.deepcopy(obj)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise not_found(resource, name)
            return copy.deepcopy(obj)

    def peek(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object itself (no copy), for the emulator's own controllers; hold ``lock``."""
        return self.objects.get((resource, namespace, name))

    def update(self, resource: str, namespace: str, name: str,
               change: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
        """Apply ``change`` to the stored object in place and publish MODIFIED; None if it is gone."""
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                return None
            change(obj)
            obj["metadata"]["resourceVersion"] = str(self._bump())
            self._publish("MODIFIED", resource, namespace, obj)
            return copy.deepcopy(obj)

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is None:
                raise not_found(resource, name)
            obj["metadata"]["resourceVersion"] = str(self._bump())
            self._publish("DELETED", resource, namespace, obj)
            return copy.deepcopy(obj)

    def list(self, resource: str, namespace: str | None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict[str, Any]], int]:
        labels_ok, fields_ok = label_matcher(label_selector), field_matcher(field_selector)
        with self.lock:
            items = [copy.deepcopy(o) for (r, ns, _), o in sorted(self.objects.items())
                     if r == resource and (namespace is None or ns == namespace)
                     and labels_ok(o["metadata"].get("labels") or {}) and fields_ok(o)]
            return items, self.rv

    def names(self, resource: str, namespace: str | None = None) -> set[str]:
        with self.lock:
            return {n for (r, ns, n) in self.objects if r == resource and (namespace is None or ns == namespace)}

    def compact(self) -> None:
        """What etcd compaction does to watches: history before now is gone (410 on resume)."""
        with self.lock:
            self.compacted_rv = self.rv
            self.history.clear()

    def subscribe(self, resource: str, since_rv: int | None) -> tuple[_Watcher, list[WatchEvent]]:
        """A live queue of ``resource`` events plus the history after ``since_rv`` (None: none)."""
        loop = asyncio.get_running_loop()
        with self.lock:
            w = _Watcher(loop, asyncio.Queue(), resource)
            self._watchers.append(w)
            backlog = [] if since_rv is None else [e for e in self.history
                                                   if e.resource == resource and e.rv > since_rv]
            return w, backlog

    def unsubscribe(self, w: _Watcher) -> None:
        with self.lock:
            if w in self._watchers:
                self._watchers.remove(w)

    def all_objects(self, resources: Iterable[str]) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for (r, _, _), o in sorted(self.objects.items()) if r in set(resources)]
