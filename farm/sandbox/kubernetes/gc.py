"""`farm gc` on Kubernetes: delete sandbox pods and NetworkPolicies that no live run owns.

Ownership is by label (manifests.py): everything farm creates carries
``app.kubernetes.io/name=farm-sandbox`` and ``farm.dev/run-id``; the full run id is in the
``farm.dev/run-id`` annotation. A run is alive when the caller's ``is_run_alive`` says so
(e.g. its driver holds a lease in the store). Independently of that, a pod that ended (the
kubelet stops it at activeDeadlineSeconds even when farm crashed) is garbage, and so is a
policy whose pod no longer exists.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from farm.sandbox.base import GcReport
from farm.sandbox.relayed import manifests as m

log = logging.getLogger(__name__)
SELECTOR = f"{m.APP_LABEL}={m.APP_NAME}"


def _run_id(obj: Any) -> str | None:
    meta = obj.metadata
    return (meta.annotations or {}).get(m.RUN_ANNOTATION) or (meta.labels or {}).get(m.RUN_LABEL)


def _age_s(obj: Any) -> float:
    created = getattr(obj.metadata, "creation_timestamp", None)
    if not isinstance(created, dt.datetime):
        return float("inf")
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.UTC)
    return (dt.datetime.now(dt.UTC) - created).total_seconds()


def gc_pods(core_api: Any, net_api: Any, namespace: str, is_run_alive: Callable[[str], bool],
       *, dry_run: bool = False, orphan_grace_s: float = 600.0) -> GcReport:
    """Delete what dead runs left behind; ``orphan_grace_s`` protects a live run's policy that
    was just created ahead of its pod."""
    report = GcReport()
    alive: dict[str, bool] = {}

    def dead(run_id: str | None) -> bool:
        if not run_id:
            return True  # a farm pod without an owner cannot be claimed by anyone
        if run_id not in alive:
            alive[run_id] = bool(is_run_alive(run_id))
        if not alive[run_id]:
            report.dead_runs.add(run_id)
        return not alive[run_id]

    pods = core_api.list_namespaced_pod(namespace, label_selector=SELECTOR).items
    live_pods: set[str] = set()
    for pod in pods:
        name = pod.metadata.name
        finished = pod.status is not None and pod.status.phase in ("Succeeded", "Failed")
        if dead(_run_id(pod)) or finished:
            if not dry_run:
                try:
                    core_api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
                except Exception as e:
                    if getattr(e, "status", None) != 404:
                        report.errors.append(f"pod {name}: {e!r}")
                        live_pods.add(name)
                        continue
            report.add("pod", name)
        else:
            live_pods.add(name)
            report.kept += 1

    for pol in net_api.list_namespaced_network_policy(namespace, label_selector=SELECTOR).items:
        name = pol.metadata.name
        owner_pod = (pol.metadata.labels or {}).get(m.POD_LABEL)
        orphan = owner_pod not in live_pods and _age_s(pol) > orphan_grace_s
        if dead(_run_id(pol)) or orphan:
            if not dry_run:
                try:
                    net_api.delete_namespaced_network_policy(name, namespace)
                except Exception as e:
                    if getattr(e, "status", None) != 404:
                        report.errors.append(f"networkpolicy {name}: {e!r}")
                        continue
            report.add("networkpolicy", name)
        else:
            report.kept += 1
    return report
