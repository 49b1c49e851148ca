"""What a pod's status says, in words: a digest for error messages, and the task container's
``OOMKilled`` (the evidence a lost pod leaves of its memory limit, issue 40)."""

from __future__ import annotations

from typing import Any

from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.channel import OOM_KILLED


def pod_digest(pod: Any) -> str:
    """phase, reasons, container states and false conditions, for error messages."""
    st = getattr(pod, "status", None)
    if st is None:
        return "no status"
    parts = [f"phase={st.phase}"]
    if st.reason:
        parts.append(f"reason={st.reason}")
    if st.message:
        parts.append(f"message={st.message}")
    for cs in list(st.init_container_statuses or []) + list(st.container_statuses or []):
        state = cs.state
        if state and state.waiting:
            parts.append(f"{cs.name}: waiting {state.waiting.reason}: {state.waiting.message or ''}".rstrip(": "))
        if state and state.terminated:
            t = state.terminated
            parts.append(f"{cs.name}: terminated {t.reason} exit={t.exit_code} {t.message or ''}".rstrip())
    for c in st.conditions or []:
        if c.status == "False":
            parts.append(f"{c.type}=False {c.reason or ''} {c.message or ''}".rstrip())
    return "; ".join(parts)


def oom_killed(pod: Any) -> str | None:
    """The task container's ``OOMKilled`` in its state or last state, in words (None: none)."""
    st = getattr(pod, "status", None)
    for cs in (st.container_statuses or []) if st is not None else []:
        if cs.name != m.TASK_CONTAINER:
            continue
        for which, state in (("state", cs.state), ("lastState", cs.last_state)):
            t = state.terminated if state is not None else None
            if t is not None and t.reason == OOM_KILLED:
                return f"pod status: container {cs.name} {which}.terminated.reason={t.reason} exit={t.exit_code}"
    return None
