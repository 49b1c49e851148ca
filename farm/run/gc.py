"""`farm gc`: delete Kubernetes sandboxes whose run's driver is no longer alive.

A run is alive while its driver keeps writing a heartbeat into the result store (every
30 s); a run whose heartbeat is older than ``stale_after_s`` — or that has none — is dead, and
its pods and network policies go. Pods also carry activeDeadlineSeconds, so even without gc a
crashed driver leaves nothing running for longer than the pod deadline.
"""

from __future__ import annotations

from rich.console import Console

from farm.config import FarmConfig
from farm.store.results import ResultStore

STALE_AFTER_S = 180.0


def run_liveness(store: ResultStore, stale_after_s: float = STALE_AFTER_S):
    def is_alive(run_id: str) -> bool:
        age = store.heartbeat_age_s(run_id)
        return age is not None and age < stale_after_s

    return is_alive


def gc_main(cfg: FarmConfig, dry_run: bool = False, console: Console | None = None) -> int:
    console = console or Console()
    if cfg.sandbox.backend == "local":
        import os
        from pathlib import Path

        from farm.sandbox.local import gc_local

        root = Path(os.path.expanduser(cfg.sandbox.local.root_dir)) if cfg.sandbox.local.root_dir else None
        removed = [] if dry_run else gc_local(root)
        console.print(f"removed {len(removed)} leftover local sandbox directories")
        return 0
    from farm.sandbox.gc import gc
    from farm.sandbox.kubernetes import KubernetesConfig, shared_clients

    kcfg = KubernetesConfig.from_dict(dict(cfg.sandbox.kubernetes))
    core, net = shared_clients(kcfg)
    store = ResultStore.open(cfg.store.uri, cfg.store.endpoint_url, cfg.store.region, create=False)
    report = gc(core, net, kcfg.namespace, run_liveness(store), dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    console.print(f"{verb} {len(report.pods_deleted)} pods and {len(report.policies_deleted)} network policies "
                  f"of {len(report.dead_runs)} dead runs; kept {report.kept}")
    for err in report.errors:
        console.print(f"[red]error:[/] {err}")
    return 1 if report.errors else 0
