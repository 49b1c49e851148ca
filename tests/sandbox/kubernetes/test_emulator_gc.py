"""Exact cleanup after a crash (issue 15 item 4): a driver is SIGKILLed, `farm gc` removes what
its run left on the cluster and nothing else.

Two runs share the emulator's namespace: ``run-crashed`` is a real driver process (it opens
its sandboxes through the registry's Kubernetes backend and beats into the result store) that
is killed with SIGKILL; ``run-alive`` is this test, which keeps beating. A pod and a policy
that farm did not create stand beside them. ``farm gc`` is the real CLI in a subprocess. The
crash is real; the three minutes after which a heartbeat counts as stale are not waited for:
the crashed run's last beat is re-written 200 s in the past, which is what the store shows
three minutes after the crash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from unittest import mock

import pytest

from farm.run.gc import STALE_AFTER_S
from farm.sandbox.relayed import manifests as m
from farm.store.results import ResultStore
from tests.support.kubernetes import EmulatorBackend, image_task

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]

REPO = Path(__file__).resolve().parents[3]

DRIVER = textwrap.dedent("""
    import asyncio, sys, time
    from farm.config import KubernetesSandboxConfig, SandboxConfig
    from farm.sandbox.kubernetes.sandbox import BACKEND
    from farm.store.results import ResultStore
    from tests.support.kubernetes import image_task

    kubeconfig, namespace, store_uri, run_id = sys.argv[1:5]
    store = ResultStore.open(store_uri)
    store.write_heartbeat(run_id, {"pid": 0})
    section = SandboxConfig(backend="kubernetes", kubernetes=KubernetesSandboxConfig(
        namespace=namespace, toolbox_image="farm-toolbox:test", kubeconfig=kubeconfig))

    async def main():
        sbs = []
        for i, net in enumerate(("no-network", "public")):
            sb = BACKEND.open(image_task(network=net, task_id=f"t{i}"), section, network=net, run_id=run_id,
                              trial_key=f"trial-{i}", attempt=0, role="agent")
            sb.poll_s = 0.05
            await sb.start()
            sbs.append(sb)
        print("READY", " ".join(sb.name for sb in sbs), flush=True)
        while True:  # a driver mid-run: beating, its sandboxes busy
            store.write_heartbeat(run_id, {"pid": 0})
            await asyncio.gather(*(sb.exec("sleep 0.5") for sb in sbs))

    asyncio.run(main())
""")


def _farm_gc(cluster: EmulatorBackend, store_uri: str) -> subprocess.CompletedProcess[str]:
    farm = Path(sys.executable).with_name("farm")
    return subprocess.run([str(farm), "gc", "sandbox=kubernetes",
                           f"sandbox.kubernetes.kubeconfig={cluster.emu.kubeconfig}",
                           f"sandbox.kubernetes.namespace={cluster.cfg.namespace}", f"store.uri={store_uri}"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)




def _bystanders(cluster: EmulatorBackend) -> None:
    """Objects in the namespace that farm did not create (no farm labels)."""
    from farm.sandbox.kubernetes.sandbox import load_clients

    core, net = load_clients(cluster.cfg)
    ns = cluster.cfg.namespace
    core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "someone-elses", "labels": {"app": "other"}}, "spec": {
        "initContainers": [{"name": "init", "image": "other:1", "command": ["python3", "-c", "pass"]}],
        "containers": [{"name": "task", "image": "other:1", "command": ["sleep", "600"]}]}})
    net.create_namespaced_network_policy(ns, {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                                              "metadata": {"name": "someone-elses", "labels": {"app": "other"}},
                                              "spec": {"podSelector": {"matchLabels": {"app": "other"}},
                                                       "policyTypes": ["Egress"]}})


@pytest.mark.integration  # two `farm gc` processes and a driver process: 25 s idle, 100 s on a loaded 2-core box
async def test_farm_gc_after_sigkill_removes_exactly_the_dead_runs_objects(cluster: EmulatorBackend,
                                                                           tmp_path: Path) -> None:
    store_uri = str(tmp_path / "store")
    store = ResultStore.open(store_uri)
    store.write_heartbeat("run-alive", {"pid": os.getpid()})
    alive = cluster.make(image_task(network="no-network", task_id="alive"), "no-network", run_id="run-alive")
    await alive.start()
    _bystanders(cluster)

    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(cluster.emu.kubeconfig), cluster.cfg.namespace,
                               store_uri, "run-crashed"], stdout=subprocess.PIPE, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        line = driver.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("READY "), line
        crashed = line.split()[1:]
        assert len(crashed) == 2
        # while both drivers live, gc deletes nothing
        quiet = _farm_gc(cluster, store_uri)
        assert quiet.returncode == 0, quiet.stdout + quiet.stderr
        assert "kept 6" in quiet.stdout, quiet.stdout  # 3 farm pods and their 3 policies
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(10)
    assert driver.returncode == -signal.SIGKILL

    pods = {p["metadata"]["name"] for p in cluster.emu.objects("pods")}
    policies = {p["metadata"]["name"] for p in cluster.emu.objects("networkpolicies")}
    assert set(crashed) <= pods, "the crashed driver's pods outlive it (the cluster runs them, not the driver)"
    last = time.time() - (STALE_AFTER_S + 20)
    with mock.patch("time.time", return_value=last):  # its last beat, as seen three minutes later
        store.write_heartbeat("run-crashed", {"pid": driver.pid})
    store.write_heartbeat("run-alive", {"pid": os.getpid()})

    mark = cluster.emu.log.mark()
    done = _farm_gc(cluster, store_uri)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "of 1 dead runs" in done.stdout, done.stdout
    deleted = sorted((r.resource, r.name) for r in cluster.emu.log.since(mark, verb="delete"))
    crashed_policies = sorted(p for p in policies if any(p.startswith(n) for n in crashed))
    assert len(crashed_policies) == 2
    assert deleted == sorted([("networkpolicies", p) for p in crashed_policies] + [("pods", n) for n in crashed])
    left_pods = {p["metadata"]["name"] for p in cluster.emu.objects("pods")}
    left_policies = {p["metadata"]["name"] for p in cluster.emu.objects("networkpolicies")}
    assert left_pods == {alive.name, "someone-elses"}
    assert left_policies == {f"{alive.name}-deny-egress", "someone-elses"}
    for obj in cluster.emu.objects("pods") + cluster.emu.objects("networkpolicies"):
        if obj["metadata"]["name"] != "someone-elses":
            assert obj["metadata"]["labels"][m.RUN_LABEL] == "run-alive"
    # the live run's sandbox never noticed
    assert (await alive.exec("echo still here")).stdout == "still here\n"
    await alive.close()
