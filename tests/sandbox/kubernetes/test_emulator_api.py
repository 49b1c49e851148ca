"""The Kubernetes backend and the real client against the API-server emulator: the contract.

What is counted here is what the emulator saw on the wire (its request log), not what the
backend says it sent; what a pod does is what the emulated kubelet's real sandbox did.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from farm.sandbox.base import SandboxStartError
from farm.sandbox.kubernetes.sandbox import load_clients
from farm.sandbox.relayed import manifests as m
from tests.support.kubernetes import EmulatorBackend, image_task

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


async def test_tool_operations_after_start_cost_no_api_call_on_the_wire(cluster: EmulatorBackend) -> None:
    before = cluster.emu.log.mark()
    sb = cluster.make(image_task(network="no-network"), "no-network")
    await sb.start()
    started = cluster.emu.log.mark()
    seen = [f"{r.verb} {r.resource}" for r in cluster.emu.log.since(before)]
    # the policy first (never an unfenced pod), then the pod, readiness polls, one exec stream
    assert seen[:2] == ["create networkpolicies", "create pods"], seen
    assert seen[-1] == "connect pods/exec" and seen.count("connect pods/exec") == 1, seen
    assert set(seen[2:-1]) <= {"get pods", "list events"}, seen  # readiness and pull-time reads only
    assert sb.stats.api_calls_start == len(seen)  # what the backend counts is what went over HTTP
    per_op = []
    for i in range(10):
        ops = [sb.exec(f"echo {i}"), sb.write_file(f"/tmp/f{i}", b"x" * i), sb.read_file(f"/tmp/f{i}"),
               sb.call("stat", path="/tmp"), sb.call("list", path="/tmp")]
        for op in ops:
            mark = cluster.emu.log.mark()
            await op
            per_op.append(cluster.emu.log.count(mark))
    assert per_op == [0] * 50
    assert cluster.emu.log.count(started) == 0 and sb.stats.api_calls_after_start == 0
    assert [s.closed_by for s in cluster.emu.exec_sessions] == [None]  # one stream carried all of it
    await sb.close()
    closing = [f"{r.verb} {r.resource}" for r in cluster.emu.log.since(started)]
    assert closing == ["delete pods", "delete networkpolicies"], closing
    assert cluster.emu.objects("pods") == [] and cluster.emu.objects("networkpolicies") == []


async def test_every_object_carries_the_run_scoped_labels(cluster: EmulatorBackend) -> None:
    sbs = [cluster.make(image_task(network=net), net, run_id=f"run/{net} with spaces") for net in
           ("no-network", "public")]
    for sb in sbs:
        await sb.start()
    objects = cluster.emu.objects("pods") + cluster.emu.objects("networkpolicies")
    assert len(objects) == 4
    for obj in objects:
        labels, notes = obj["metadata"]["labels"], obj["metadata"]["annotations"]
        assert labels[m.APP_LABEL] == m.APP_NAME and labels[m.MANAGED_BY] == "farm"
        assert notes[m.RUN_ANNOTATION].startswith("run/")
        assert labels[m.RUN_LABEL] == m.label_value(notes[m.RUN_ANNOTATION])
        assert labels[m.POD_LABEL] in {sb.name for sb in sbs}
    # the label selector farm gc uses finds all of them and nothing else
    core, net = load_clients(cluster.cfg)
    sel = f"{m.RUN_LABEL}={m.label_value('run/public with spaces')}"
    assert [p.metadata.name for p in core.list_namespaced_pod(cluster.cfg.namespace, label_selector=sel).items] == [
        sbs[1].name]
    assert [p.metadata.name for p in net.list_namespaced_network_policy(cluster.cfg.namespace,
                                                                        label_selector=sel).items] == [
        f"{sbs[1].name}-allow-egress"]
    for sb in sbs:
        await sb.close()


async def test_image_pulls_are_events_and_a_second_pod_finds_the_image_present(cluster: EmulatorBackend) -> None:
    cluster.emu.kubelet_knobs.pull_s_by_image["debian:bookworm"] = 0.4
    first = cluster.make(image_task(), "no-network")
    t0 = time.monotonic()
    await first.start()
    assert time.monotonic() - t0 >= 0.4
    reasons = [(e["reason"], e["message"]) for e in cluster.emu.events_for(first.name)]
    assert [r for r, _ in reasons] == ["Scheduled", "Pulling", "Pulled", "Pulling", "Pulled", "Created", "Started",
                                       "Created", "Started"], reasons
    assert reasons[3] == ("Pulling", 'Pulling image "debian:bookworm"')
    second = cluster.make(image_task(), "no-network")
    await second.start()
    pulled = [e["message"] for e in cluster.emu.events_for(second.name) if e["reason"] == "Pulled"]
    assert pulled[-1] == 'Container image "debian:bookworm" already present on machine'
    for sb in (first, second):
        await sb.close()


async def test_image_pull_back_off_fails_the_start_and_cleans_up(cluster: EmulatorBackend) -> None:
    cluster.emu.kubelet_knobs.unpullable.add("registry.invalid/nope:1")
    sb = cluster.make(image_task(image="registry.invalid/nope:1"), "no-network")
    with pytest.raises(SandboxStartError, match="(ErrImagePull|ImagePullBackOff).*registry.invalid/nope:1") as e:
        await asyncio.wait_for(sb.start(), 30)
    assert e.value.reason == "image_pull"  # type: ignore[attr-defined]
    assert cluster.emu.objects("pods") == [] and cluster.emu.objects("networkpolicies") == []
    assert {"Failed", "Pulling"} <= {ev["reason"] for ev in cluster.emu.events_for(sb.name)}


async def test_unschedulable_fails_after_the_grace(cluster: EmulatorBackend) -> None:
    cluster.emu.kubelet_knobs.unschedulable = "0/3 nodes are available: 3 Insufficient memory."
    cluster.cfg.unschedulable_grace_s = 0.5
    sb = cluster.make(image_task(), "no-network")
    with pytest.raises(SandboxStartError, match="unschedulable: 0/3 nodes") as e:
        await asyncio.wait_for(sb.start(), 30)
    assert e.value.reason == "unschedulable"  # type: ignore[attr-defined]
    assert cluster.emu.objects("pods") == []


async def test_a_500_on_pod_create_is_a_start_error_and_leaves_nothing(cluster: EmulatorBackend) -> None:
    cluster.emu.fail(500, verb="create", resource="pods")
    sb = cluster.make(image_task(), "no-network")
    with pytest.raises(SandboxStartError, match="500"):
        await sb.start()
    assert cluster.emu.objects("pods") == [] and cluster.emu.objects("networkpolicies") == []
    assert cluster.emu.log.count(0, fault=True) == 1


async def test_a_cut_stream_is_reopened_and_the_running_command_not_rerun(cluster: EmulatorBackend) -> None:
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    pending = asyncio.ensure_future(sb.exec("echo run >> /tmp/runs; sleep 1.5; echo done", timeout_s=30))
    await asyncio.sleep(0.5)
    mark = cluster.emu.log.mark()
    assert cluster.emu.cut_exec_streams(sb.name) == 1
    res = await asyncio.wait_for(pending, 30)
    assert res.stdout == "done\n"
    assert (await sb.read_file("/tmp/runs")) == b"run\n"  # re-attached, not run twice
    assert cluster.emu.exec_sessions[0].closed_by == "cut:test"
    assert "connect pods/exec" in [f"{r.verb} {r.resource}" for r in cluster.emu.log.since(mark)]
    await sb.close()


async def test_idle_streams_are_cut_by_the_knob_and_the_sandbox_carries_on(cluster: EmulatorBackend) -> None:
    """The knob issue 15 item 2 tests against: a stream silent for ``idle_cut_s`` is dropped."""
    cluster.emu.exec_knobs.idle_cut_s = 0.6
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    assert (await sb.exec("echo one >> /tmp/once; echo one")).stdout == "one\n"
    await asyncio.sleep(1.5)
    assert cluster.emu.exec_sessions[0].closed_by == "cut:idle"
    assert (await sb.exec("cat /tmp/once")).stdout == "one\n"
    await sb.close()


def test_api_errors_on_demand_reach_the_client(cluster: EmulatorBackend) -> None:
    core, net = load_clients(cluster.cfg)
    ns = cluster.cfg.namespace
    # a read answered 429 with Retry-After is retried by the client (kubernetes 37, as client-go)
    mark = cluster.emu.log.mark()
    cluster.emu.fail(429, verb="list", resource="pods", retry_after_s=1)
    t0 = time.monotonic()
    assert core.list_namespaced_pod(ns).items == []
    assert time.monotonic() - t0 >= 1.0
    assert [(r.verb, r.status) for r in cluster.emu.log.since(mark)] == [("list", 429), ("list", 200)]
    # a write is not retried: the caller sees the 429 and its Retry-After
    cluster.emu.fail(429, verb="create", resource="networkpolicies", retry_after_s=3)
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "p"},
              "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}
    with pytest.raises(ApiException) as e:
        net.create_namespaced_network_policy(ns, policy)
    assert e.value.status == 429 and e.value.headers["Retry-After"] == "3"
    assert '"retryAfterSeconds": 3' in e.value.body
    cluster.emu.fail(500, verb="get", resource="pods", times=None)
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod("any", ns)
    assert e.value.status == 500 and "InternalError" in e.value.body
    cluster.emu.faults.clear()
    net.create_namespaced_network_policy(ns, policy)
    with pytest.raises(ApiException) as dup:
        net.create_namespaced_network_policy(ns, policy)
    assert dup.value.status == 409 and "AlreadyExists" in dup.value.body
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", ns)
    assert missing.value.status == 404
    with pytest.raises(ApiException) as no_ns:
        net.create_namespaced_network_policy("no-such-namespace", policy)
    assert no_ns.value.status == 404 and 'namespaces \\"no-such-namespace\\" not found' in no_ns.value.body


async def test_watch_sees_the_pod_lifecycle_and_410_after_compaction(cluster: EmulatorBackend) -> None:
    core, _ = load_clients(cluster.cfg)
    ns = cluster.cfg.namespace
    start_rv = core.list_namespaced_pod(ns).metadata.resource_version
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    await sb.close()
    sel = f"{m.POD_LABEL}={sb.name}"

    def phases() -> list[tuple[str, str | None]]:
        w = watch.Watch()
        out = [(ev["type"], ev["object"].status.phase if ev["object"].status else None)
               for ev in w.stream(core.list_namespaced_pod, ns, label_selector=sel, resource_version=start_rv,
                                  timeout_seconds=1)]
        return out

    seen = await asyncio.to_thread(phases)
    assert seen[0] == ("ADDED", "Pending") and seen[-1][0] == "DELETED", seen
    assert ("MODIFIED", "Running") in seen, seen
    cluster.emu.store.compact()
    with pytest.raises(ApiException) as gone:
        await asyncio.to_thread(phases)
    assert gone.value.status == 410


async def test_delete_with_grace_sigterms_and_kills_when_the_grace_runs_out(cluster: EmulatorBackend) -> None:
    core, _ = load_clients(cluster.cfg)
    ns = cluster.cfg.namespace
    # a farm pod: its relay (PID 1) dies of a SIGTERM from outside, well before the grace
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    t0 = time.monotonic()
    deleted = await asyncio.to_thread(core.delete_namespaced_pod, sb.name, ns, grace_period_seconds=30)
    assert deleted.metadata.deletion_timestamp is not None and deleted.metadata.deletion_grace_period_seconds == 30
    await _gone(cluster, sb.name, t0 + 10)
    assert time.monotonic() - t0 < 10
    assert "Killing" in {e["reason"] for e in cluster.emu.events_for(sb.name)}
    await sb.close()
    # a container that ignores SIGTERM stays, marked for deletion, until the grace runs out
    stubborn = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stubborn"}, "spec": {
        "initContainers": [{"name": "init", "image": "i", "command": ["python3", "-c", "pass"]}],
        "containers": [{"name": "task", "image": "i",
                        "command": ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"]}]}}
    await asyncio.to_thread(core.create_namespaced_pod, ns, stubborn)
    for _ in range(100):
        phase = (await asyncio.to_thread(core.read_namespaced_pod, "stubborn", ns)).status.phase
        if phase != "Pending":
            break
        await asyncio.sleep(0.1)
    assert phase == "Running"
    proc = cluster.emu.kubelet.pods[(ns, "stubborn")].fake.proc
    t0 = time.monotonic()
    await asyncio.to_thread(core.delete_namespaced_pod, "stubborn", ns, grace_period_seconds=2)
    await asyncio.sleep(1)
    assert (await asyncio.to_thread(core.read_namespaced_pod, "stubborn", ns)).metadata.deletion_timestamp
    await _gone(cluster, "stubborn", t0 + 15)
    assert time.monotonic() - t0 >= 2.0 and proc.poll() is not None


async def _gone(cluster: EmulatorBackend, name: str, deadline: float) -> None:
    while name in {p["metadata"]["name"] for p in cluster.emu.objects("pods")}:
        assert time.monotonic() < deadline, f"pod {name} still there"
        await asyncio.sleep(0.1)


async def test_random_stream_cuts_are_survived_and_nothing_runs_twice(cluster: EmulatorBackend) -> None:
    cluster.emu.exec_knobs.cut_after_s = (1.0, 1.5)
    cluster.emu.exec_knobs.seed = 7
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    t_end = time.monotonic() + 3.5
    n = 0
    while time.monotonic() < t_end:
        r = await sb.exec(f"echo {n} >> /tmp/ran; sleep 0.2; echo ok")
        assert r.stdout == "ok\n", r
        n += 1
    assert (await sb.read_file("/tmp/ran")).decode().split() == [str(i) for i in range(n)]
    cut = [s.closed_by for s in cluster.emu.exec_sessions if s.closed_by]
    assert len(cut) >= 2 and set(cut) == {"cut:lifetime"}, cut
    await sb.close()


async def test_a_server_that_speaks_only_v4_gets_the_same_sandbox(cluster: EmulatorBackend) -> None:
    cluster.emu.exec_knobs.protocols = ("v4.channel.k8s.io",)
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    r = await sb.exec("echo out; echo err >&2; exit 4")
    assert (r.exit_code, r.stdout, r.stderr) == (4, "out\n", "err\n")
    blob = bytes(range(256)) * 4096
    await sb.write_file("/tmp/blob", blob)
    assert await sb.read_file("/tmp/blob") == blob
    assert {s.protocol for s in cluster.emu.exec_sessions} == {"v4.channel.k8s.io"}
    await sb.close()


async def test_a_refused_reopen_is_sandbox_lost(cluster: EmulatorBackend) -> None:
    from farm.sandbox.base import SandboxLostError

    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    cluster.emu.fail(500, verb="connect", resource="pods/exec", times=None)  # e.g. the kubelet is unreachable
    cluster.emu.cut_exec_streams(sb.name)
    try:
        with pytest.raises(SandboxLostError):
            await asyncio.wait_for(sb.exec("true"), 30)
    finally:
        cluster.emu.faults.clear()
        await sb.close()
