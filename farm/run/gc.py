"""`farm gc`: delete sandboxes whose run's driver is no longer alive, on any backend.

A run is alive while its driver keeps writing a heartbeat into the result store (every
30 s); a run whose heartbeat is older than ``stale_after_s`` — or that has none — is dead, and
what its sandboxes left (pods and network policies, containers and volumes) goes. The local
backend judges by the sandbox's own bwrap process instead. Pods also carry
activeDeadlineSeconds, so even without gc a crashed driver leaves nothing running for longer
than the pod deadline.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from farm.config import FarmConfig
from farm.sandbox.registry import check_environment, gc
from farm.store.results import ResultStore

STALE_AFTER_S = 180.0


def run_liveness(store: ResultStore, stale_after_s: float = STALE_AFTER_S) -> Callable[[str], bool]:
    def is_alive(run_id: str) -> bool:
        age = store.heartbeat_age_s(run_id)
        return age is not None and age < stale_after_s

    return is_alive


def gc_main(cfg: FarmConfig, dry_run: bool = False, console: Console | None = None) -> int:
    console = console or Console()
    check_environment(cfg.sandbox)
    store: ResultStore | None = None

    def is_alive(run_id: str) -> bool:
        nonlocal store  # opened only if the backend asks: the local backend never does
        if store is None:
            store = ResultStore.open(cfg.store.uri, cfg.store.endpoint_url, cfg.store.region, create=False)
        return run_liveness(store)(run_id)

    report = gc(cfg.sandbox, is_alive, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    runs = f" of {len(report.dead_runs)} dead runs" if report.dead_runs else ""
    console.print(f"sandbox.backend={cfg.sandbox.backend}: {verb} {report.summary()}{runs}; kept {report.kept}")
    for err in report.errors:
        console.print(f"[red]error:[/] {err}")
    return 1 if report.errors else 0
