"""Exec streams that survive a cluster that cuts idle streams (issue 15 item 2), in scaled time.

Some clusters end an exec stream that carried no bytes for ~5 minutes. Here the in-process fake
cluster (fake_cluster.py: real relay, real sandbox agent, real channel) gets an exec transport
that cuts any stream idle for IDLE_CUT, and a trial has five silent gaps of GAP (one of them a
long command that prints nothing, as a verifier does). Time is scaled: one minute is MINUTE
seconds, so the trial takes seconds; every duration in the backend's config is scaled the same
way. Each command appends a line to a file inside the pod, so the file counts its executions.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from farm.sandbox.base import SandboxLostError
from farm.sandbox.kubernetes.sandbox import KubernetesSandbox
from farm.sandbox.relayed.stream_budget import ReconnectBudget, ReconnectBudgetError
from tests.support.kubernetes import (
    IDLE_CUT,
    MINUTE,
    WINDOW,
    FakeClusterBackend,
    image_task,
    trial_with_five_long_gaps,
)

from .fake_cluster import FakeExecStream

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


class _Watched:
    """One exec stream whose last byte (either direction) is timed, for the idle cutter."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reader = self
        self.last = time.monotonic()

    async def readline(self) -> bytes:
        line = await self.inner.reader.readline()
        self.last = time.monotonic()
        return line

    def write(self, data: bytes) -> None:
        self.last = time.monotonic()
        self.inner.write(data)

    async def drain(self) -> None:
        await self.inner.drain()

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return f"cut after {IDLE_CUT:.2f} s idle; {self.inner.describe()}"


class IdleCuttingExecs:
    """FakeExecStream behind a proxy that cuts a stream idle for ``idle_cut_s`` (the kubelet or
    a load balancer in front of the API server doing it)."""

    def __init__(self, execs: FakeExecStream, idle_cut_s: float) -> None:
        self.execs = execs
        self.idle_cut_s = idle_cut_s
        self.cuts = 0
        self._watchers: list[asyncio.Task[None]] = []

    async def open(self, pod: str, command: list[str]) -> _Watched:
        stream = _Watched(await self.execs.open(pod, command))
        self._watchers.append(asyncio.get_running_loop().create_task(self._watch(stream)))
        return stream

    async def _watch(self, stream: _Watched) -> None:
        proc = stream.inner.proc
        step = self.idle_cut_s / 10
        while proc.returncode is None:
            before = time.monotonic()
            await asyncio.sleep(step)
            if time.monotonic() - before > 3 * step:
                # this event loop itself stalled (a loaded machine): in scaled time that stall is
                # minutes the driver's loop never loses on a real cluster, and the keepalive that
                # shares the loop is just as late; let it run before judging the stream idle
                continue
            if proc.returncode is None and time.monotonic() - stream.last >= self.idle_cut_s:
                self.cuts += 1
                stream.inner.break_()
                return

    def stop(self) -> None:
        for t in self._watchers:
            t.cancel()


@pytest.fixture
def cluster(tmp_path: Path):
    b = FakeClusterBackend(tmp_path / "cluster")
    yield b
    b.core.close_all()


def _sandbox(cluster: FakeClusterBackend, cutter: IdleCuttingExecs, **cfg: Any) -> KubernetesSandbox:
    for key, value in cfg.items():
        setattr(cluster.cfg, key, value)
    return KubernetesSandbox(image_task(), cluster.cfg, run_id="run-idle", trial_key=os.urandom(8).hex(),
                             core_api=cluster.core, net_api=cluster.net, exec_opener=cutter, poll_s=0.05)


async def test_keepalive_keeps_an_idle_cut_cluster_from_ever_cutting(cluster: FakeClusterBackend) -> None:
    cutter = IdleCuttingExecs(cluster.execs, IDLE_CUT)
    sb = _sandbox(cluster, cutter, keepalive_s=MINUTE, max_reconnects=5, reconnect_window_s=WINDOW)
    await sb.start()
    try:
        expected = await trial_with_five_long_gaps(sb)
        assert (await sb.read_file("/tmp/runs")).decode().split() == expected  # each ran exactly once
        assert cutter.cuts == 0
        assert sb.channel is not None and sb.channel.reconnects == 0
        assert sb.channel.keepalives >= 5 * 4  # about six per gap of six minutes
        assert sb.stats.api_calls_after_start == 0  # a ping rides the stream: no API-server call
    finally:
        cutter.stop()
        await sb.close()
    assert sb.stats.extra["keepalives"] >= 20 and sb.stats.extra["reconnects"] == 0


async def test_without_keepalive_every_cut_is_survived_and_nothing_runs_twice(cluster: FakeClusterBackend) -> None:
    """More cuts than the old lifetime count of 3, each one re-opened within the rate budget;
    the cut under the silent command re-attaches to it instead of running it again."""
    cutter = IdleCuttingExecs(cluster.execs, IDLE_CUT)
    sb = _sandbox(cluster, cutter, keepalive_s=None, max_reconnects=3, reconnect_window_s=WINDOW)
    await sb.start()
    assert sb.channel is not None
    during_start = sb.channel.reconnects  # a loaded machine may take longer than IDLE_CUT to start
    try:
        expected = await trial_with_five_long_gaps(sb)
        assert (await sb.read_file("/tmp/runs")).decode().split() == expected
        assert cutter.cuts >= 5
        # every cut re-opened (under heavy load a stream is sometimes lost once more on its own)
        assert sb.channel.reconnects >= cutter.cuts
        # a re-open costs one exec stream and one pod read (is it still running?), no more
        assert sb.stats.api_calls_after_start == 2 * (sb.channel.reconnects - during_start)
    finally:
        cutter.stop()
        await sb.close()


async def test_a_burst_of_losses_past_the_budget_is_a_lost_sandbox(cluster: FakeClusterBackend) -> None:
    cutter = IdleCuttingExecs(cluster.execs, 3600.0)  # never idle-cut: the test breaks streams itself
    sb = _sandbox(cluster, cutter, keepalive_s=None, max_reconnects=2, reconnect_window_s=3600.0)
    await sb.start()
    try:
        for i in range(2):
            cluster.execs.streams[-1].break_()
            assert (await asyncio.wait_for(sb.exec(f"echo {i}"), 20)).stdout == f"{i}\n"
        cluster.execs.streams[-1].break_()
        with pytest.raises(ReconnectBudgetError, match="sandbox lost.*sandbox.kubernetes.max_reconnects=2 "
                                                       "re-opens in 3600 s") as lost:
            await asyncio.wait_for(sb.exec("echo never"), 20)
        assert isinstance(lost.value, SandboxLostError)  # an infra error of the trial, retried
        assert sb.channel is not None and sb.channel.reconnects == 2
    finally:
        cutter.stop()
        await sb.close()


# --- the budget on its own, with a fake clock ------------------------------------------------


def test_budget_is_a_sliding_window_not_a_lifetime_count() -> None:
    now = [0.0]
    b = ReconnectBudget(2, 600.0, clock=lambda: now[0])
    assert b.take()
    now[0] = 100.0
    assert b.take() and not b.take()  # a burst of three in one window
    now[0] = 599.0
    assert not b.take()
    now[0] = 600.0  # the first re-open has left the window, the second has not
    assert b.take() and not b.take()
    for _ in range(10):  # one loss every six minutes, for an hour: never exhausted
        now[0] += 360.0
        assert b.take()
    assert b.used == 13


def test_lifetime_budget_and_a_returned_reopen() -> None:
    now = [0.0]
    b = ReconnectBudget(1, None, clock=lambda: now[0])
    assert b.take()
    b.give_back()  # the agent's own command killed the stream: not the transport's fault
    assert b.take()
    now[0] = 1e9
    assert not b.take()
    assert "in the sandbox's life" in b.describe()
    with pytest.raises(ValueError, match="max_reconnects: must be >= 0, got -1"):
        ReconnectBudget(-1, None)
