"""How long a pod's image pull took, from the kubelet's events (Pulling, Pulled).

The kubelet reports every image it makes present as events on the pod: ``Pulling image "X"``,
then ``Successfully pulled image "X" in 2m5.3s (2m9.1s including waiting). Image size: N
bytes.`` or ``Container image "X" already present on machine``. Their ``involvedObject.fieldPath``
names the container (``spec.containers{task}``). The duration in the message is the kubelet's
own measurement; the events' timestamps (one-second resolution) are the fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_PULLED_IN = re.compile(r"\bin ((?:\d+(?:\.\d+)?(?:ms|us|µs|ns|h|m|s))+)")


def go_duration_s(text: str) -> float | None:
    """Seconds in a Go duration string (``1m2.5s``, ``850ms``); None if it is not one."""
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class PullFacts:
    pulled: bool  # the container's image is present on the node
    pull_s: float | None  # how long the pull took (0.0: it was already present); None: unknown
    message: str | None  # the last Pulling/Pulled message, for errors


def _when(ev: Any) -> Any:
    return ev.event_time or ev.last_timestamp or ev.first_timestamp


def pull_facts(events: list[Any], container: str) -> PullFacts:
    """What the events of one pod say about the image of ``container``."""
    path = f"spec.containers{{{container}}}"
    mine = [e for e in events if e.reason in ("Pulling", "Pulled")
            and (e.involved_object is None or e.involved_object.field_path in (None, path))]
    pulling = [e for e in mine if e.reason == "Pulling"]
    pulled = [e for e in mine if e.reason == "Pulled"]
    if not pulled:
        return PullFacts(False, None, (pulling[-1].message if pulling else None))
    last = pulled[-1]
    message = last.message or ""
    if "already present" in message:
        return PullFacts(True, 0.0, message)
    found = _PULLED_IN.search(message)
    seconds = go_duration_s(found.group(1)) if found else None
    if seconds is None and pulling and _when(last) is not None and _when(pulling[0]) is not None:
        seconds = max(0.0, (_when(last) - _when(pulling[0])).total_seconds())
    return PullFacts(True, seconds, message)
