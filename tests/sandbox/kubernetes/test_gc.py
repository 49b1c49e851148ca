"""`farm gc` over the fake API server: dead runs and finished pods go, live runs stay."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from farm.sandbox.kubernetes.gc import gc_pods as gc
from farm.sandbox.kubernetes.sandbox import KubernetesSandbox
from farm.sandbox.relayed import manifests as m
from tests.support.kubernetes import FakeClusterBackend, image_task

pytestmark = pytest.mark.root


async def test_gc_deletes_only_what_dead_runs_left(tmp_path: Path) -> None:
    cluster = FakeClusterBackend(tmp_path / "c")
    try:
        sandboxes = {}
        for run in ("run-alive", "run-crashed"):
            sb = KubernetesSandbox(image_task(network="no-network"), cluster.cfg, run_id=run,
                                   trial_key=os.urandom(4).hex(),
                                   core_api=cluster.core, net_api=cluster.net, exec_opener=cluster.execs, poll_s=0.05)
            await sb.start()
            sandboxes[run] = sb
        # a policy of a live run whose pod is not created yet must survive (grace period) ...
        fresh = m.deny_egress_policy({"metadata": {"name": "starting", "namespace": "farm-test", "labels": {
            m.APP_LABEL: m.APP_NAME, m.MANAGED_BY: "farm", m.RUN_LABEL: "run-alive", m.TRIAL_LABEL: "t",
            m.POD_LABEL: "starting"}, "annotations": {m.RUN_ANNOTATION: "run-alive"}}})
        cluster.net.create_namespaced_network_policy("farm-test", fresh)
        cluster.core.calls.clear()
        asked: list[str] = []

        def alive(run_id: str) -> bool:
            asked.append(run_id)
            return run_id == "run-alive"

        report = gc(cluster.core, cluster.net, "farm-test", alive)
        assert report.deleted.get("pod", []) == [sandboxes["run-crashed"].name]
        assert report.deleted.get("networkpolicy", []) == [f"{sandboxes['run-crashed'].name}-deny-egress"]
        assert report.dead_runs == {"run-crashed"} and sorted(set(asked)) == ["run-alive", "run-crashed"]
        assert report.errors == []
        left = {n for (_, n) in cluster.core.pods}
        assert left == {sandboxes["run-alive"].name}
        assert (await sandboxes["run-alive"].exec("echo still here")).stdout == "still here\n"
        # ... but an old orphan policy of a live run goes
        fresh["metadata"]["creation_timestamp"] = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
        report = gc(cluster.core, cluster.net, "farm-test", alive)
        assert report.deleted == {"networkpolicy": ["starting-deny-egress"]}
        # a live run's pod that ran past its deadline (phase Failed) is garbage too
        cluster.core.pods[("farm-test", sandboxes["run-alive"].name)].kill()
        report = gc(cluster.core, cluster.net, "farm-test", alive, dry_run=True)
        assert report.deleted.get("pod", []) == [sandboxes["run-alive"].name]
        assert cluster.core.pods  # dry run deleted nothing
        for sb in sandboxes.values():
            await sb.close()
    finally:
        cluster.core.close_all()
