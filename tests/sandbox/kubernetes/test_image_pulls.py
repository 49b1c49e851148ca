"""Image pulls you can see (issue 15 item 3): pull time and node from the kubelet's events, and a
start timeout that counts from the Pulled event, with a pull timeout of its own."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from pathlib import Path

import pytest
from kubernetes import client

from farm.sandbox.base import SandboxStartError
from farm.sandbox.kubernetes.pull_events import go_duration_s, pull_facts
from farm.sandbox.kubernetes.sandbox import KubernetesSandbox
from tests.support.kubernetes import FakeClusterBackend, image_task


@pytest.fixture
def cluster(tmp_path: Path):
    b = FakeClusterBackend(tmp_path / "cluster")
    yield b
    b.core.close_all()


def _sandbox(cluster: FakeClusterBackend) -> KubernetesSandbox:
    return KubernetesSandbox(image_task(), cluster.cfg, run_id="run-pull", trial_key=os.urandom(8).hex(),
                             core_api=cluster.core, net_api=cluster.net, exec_opener=cluster.execs, poll_s=0.05)


@pytest.mark.bwrap
@pytest.mark.root
@pytest.mark.tools("nsenter")
async def test_a_slow_pull_is_timed_and_does_not_count_against_the_start_timeout(cluster: FakeClusterBackend) -> None:
    cluster.core.pull_s = 1.2
    cluster.cfg.pod_start_timeout_s = 0.8  # shorter than the pull: counted from creation it would fail
    cluster.cfg.pull_timeout_s = 20
    sb = _sandbox(cluster)
    await asyncio.wait_for(sb.start(), 30)
    try:
        assert sb.stats.extra["image_pull_s"] == pytest.approx(1.2)  # the kubelet's own figure
        assert sb.stats.extra["node"] == "fake-node-1"
        assert "list_namespaced_event" in cluster.core.calls
        assert (await sb.exec("echo up")).stdout == "up\n"
    finally:
        await sb.close()


@pytest.mark.bwrap
@pytest.mark.root
@pytest.mark.tools("nsenter")
async def test_an_image_already_on_the_node_pulls_in_zero_seconds(cluster: FakeClusterBackend) -> None:
    sb = _sandbox(cluster)
    await sb.start()
    try:
        assert sb.stats.extra["image_pull_s"] == 0.0 and sb.stats.extra["node"] == "fake-node-1"
    finally:
        await sb.close()


@pytest.mark.bwrap
@pytest.mark.root
@pytest.mark.tools("nsenter")
async def test_a_pull_past_its_timeout_fails_the_start_as_image_pull(cluster: FakeClusterBackend) -> None:
    cluster.core.pull_s = 60.0
    cluster.cfg.pull_timeout_s = 0.6
    sb = _sandbox(cluster)
    with pytest.raises(SandboxStartError, match=r"debian:bookworm not pulled after 0.6 s "
                                                r"\(sandbox.kubernetes.pull_timeout_s\) on node fake-node-1") as e:
        await asyncio.wait_for(sb.start(), 20)
    assert e.value.reason == "image_pull"
    assert cluster.core.pods == {} and cluster.net.policies == {}


@pytest.mark.bwrap
@pytest.mark.root
@pytest.mark.tools("nsenter")
async def test_without_events_the_start_timeout_counts_from_creation(cluster: FakeClusterBackend) -> None:
    cluster.core.events_forbidden = True  # a Role without events
    sb = _sandbox(cluster)
    await sb.start()
    assert "image_pull_s" not in sb.stats.extra and "403" in sb.stats.extra["image_pull_unknown"]
    assert cluster.core.calls.count("list_namespaced_event") == 1  # asked once, not on every poll
    await sb.close()
    cluster.core.pull_s = 30.0
    cluster.cfg.pod_start_timeout_s = 0.5
    sb = _sandbox(cluster)
    with pytest.raises(SandboxStartError, match="not ready 0.5 s after it was created") as e:
        await asyncio.wait_for(sb.start(), 20)
    assert e.value.reason == "timeout"


# --- the event parsing on its own --------------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [("2m5.3s", 125.3), ("850ms", 0.85), ("1h2m3s", 3723.0), ("0s", 0.0),
                                          ("12.000491958s", 12.000491958), ("5 s", None), ("fast", None),
                                          ("", None)])
def test_go_durations(text: str, seconds: float | None) -> None:
    assert go_duration_s(text) == (pytest.approx(seconds) if seconds is not None else None)


def _event(reason: str, message: str, container: str = "task", at: int = 0) -> client.CoreV1Event:
    t = dt.datetime(2026, 12, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=at)
    return client.CoreV1Event(metadata=client.V1ObjectMeta(name="e"), reason=reason, message=message,
                              involved_object=client.V1ObjectReference(field_path=f"spec.containers{{{container}}}"),
                              first_timestamp=t, last_timestamp=t)


def test_pull_facts_read_the_task_containers_events_only() -> None:
    events = [_event("Pulling", 'Pulling image "toolbox"', "farm-toolbox"),
              _event("Pulled", 'Successfully pulled image "toolbox" in 9s (9s including waiting)', "farm-toolbox"),
              _event("Pulling", 'Pulling image "swe"', at=1)]
    assert pull_facts(events, "task") == pull_facts(events[2:], "task")
    assert not pull_facts(events, "task").pulled
    done = [*events, _event("Pulled", 'Successfully pulled image "swe" in 2m25.5s (3m1s including waiting). '
                                      "Image size: 736000000 bytes.", at=147)]
    assert pull_facts(done, "task").pull_s == pytest.approx(145.5)
    # an older kubelet's message has no duration: the events' own timestamps
    old = [*events, _event("Pulled", 'Successfully pulled image "swe"', at=181)]
    assert pull_facts(old, "task").pull_s == 180.0
