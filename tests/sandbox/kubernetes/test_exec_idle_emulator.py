"""The trial with five long silent gaps of test_exec_survives.py (tests/support/kubernetes.py), through
the API-server emulator (tests/sandbox/kubernetes/apiserver): the real kubernetes client, the real
pods/exec WebSocket, and the emulator's own idle cut (a stream with no message either way for
``idle_cut_s`` is dropped). Scaled time as there: one minute is MINUTE seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kubernetes import IDLE_CUT, MINUTE, WINDOW, EmulatorBackend, image_task, trial_with_five_long_gaps

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


def _cluster(tmp_path: Path, **cfg: object) -> EmulatorBackend:
    b = EmulatorBackend(tmp_path / "emulator", max_reconnects=3, reconnect_window_s=WINDOW, **cfg)
    b.emu.exec_knobs.idle_cut_s = IDLE_CUT
    return b


@pytest.mark.parametrize("keepalive", [True, False], ids=["keepalive", "no-keepalive"])
async def test_five_long_gaps_over_http_run_every_command_once(tmp_path: Path, keepalive: bool) -> None:
    cluster = _cluster(tmp_path, keepalive_s=MINUTE if keepalive else None)
    try:
        sb = cluster.make(image_task(), "no-network")
        await sb.start()
        try:
            expected = await trial_with_five_long_gaps(sb)
            assert (await sb.read_file("/tmp/runs")).decode().split() == expected  # each ran exactly once
            idle_cuts = [s for s in cluster.emu.exec_sessions if s.closed_by == "cut:idle"]
            assert sb.channel is not None
            if keepalive:
                assert idle_cuts == [] and sb.channel.reconnects == 0 and sb.channel.keepalives >= 20
            else:
                assert len(idle_cuts) >= 5 and sb.channel.reconnects == len(idle_cuts)
        finally:
            await sb.close()
    finally:
        cluster.close()
    assert cluster.emu.errors == []
