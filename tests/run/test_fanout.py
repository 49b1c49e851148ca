"""The fan-out at scale: the driver keeps at most run.max_in_flight coroutines alive, and
bench/fanout.py --sandbox none --json reports the numbers docs/performance.md records."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import run_experiment
from farm.sandbox.none.sandbox import GUARD_ENV
from tests.support.tasks import make_task_dir as make_task

REPO = Path(__file__).resolve().parents[2]
REQUIRED = ("peak_in_flight", "rss_mib_per_in_flight_trial", "trials_per_s", "sched_overhead_ms_p50")


def test_fanout_json_at_a_small_size_prints_the_required_keys_with_sane_values() -> None:
    env = {k: v for k, v in os.environ.items() if k != GUARD_ENV}  # the script sets it itself
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fanout.py"), "--sandbox", "none", "--json", "--trials", "12",
         "--turns", "2", "--executor", "local"],
        capture_output=True, text=True, timeout=240, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    data = json.loads(lines[-1])
    assert all(k in data for k in REQUIRED), data
    assert "peak trials in flight" in out.stdout  # the table is printed too
    assert data["peak_in_flight"] == 12  # zero latency, max_in_flight = trials: every trial starts at once
    assert data["outcomes"] == {"resolved": 12} and data["rows"] == 12 and data["step_rows"] == 12 * 2
    assert data["trials_per_s"] > 0 and math.isfinite(data["rss_mib_per_in_flight_trial"])
    assert 0 <= data["sched_overhead_ms_p50"] <= data["sched_overhead_ms_p95"] < 60_000
    # every trial row, its steps and its artifacts are objects of the store: some, and not one per row
    assert 0 < data["objects_per_100_trials"] < 1000


def test_the_driver_keeps_no_more_coroutines_than_max_in_flight(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One coroutine per planned trial was 10,000 suspended coroutines before the first trial ran."""
    monkeypatch.setenv(GUARD_ENV, "1")
    make_task(tmp_path / "tasks", "t", "echo 1 > /logs/verifier/reward.txt\n", solve_sh=None)
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump([{"content": "done", "delay_s": 0.01}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "agent=scripted", f"agent.script={script}",
                       "run.seeds=60", "run.max_in_flight=3", "run.executor=local", "run.max_attempts=1",
                       "run.progress=false", f"store.uri={tmp_path / 'store'}", "sandbox.backend=none"])
    seen = {"tasks": 0, "in_flight": 0, "peak": 0}

    def hook(event: str, outcome: object) -> None:
        if event == "start":
            seen["in_flight"] += 1
            seen["peak"] = max(seen["peak"], seen["in_flight"])
            seen["tasks"] = max(seen["tasks"], len(asyncio.all_tasks()))
        elif event == "done":
            seen["in_flight"] -= 1

    summary = asyncio.run(run_experiment(cfg, progress=hook))
    assert summary.counts == {"resolved": 60}
    assert seen["peak"] == 3
    # the run's own task, the heartbeat, 3 runners and what one trial starts (the policy server's
    # request handlers run in its own thread's loop), store I/O: far below one per planned trial (60)
    assert seen["tasks"] <= 3 + 10 < 60, seen


def test_trials_of_one_event_loop_share_one_http_pool() -> None:
    """An httpx client per trial cost ~50 ms of CPU and ~0.8 MiB (its TLS context) per trial in flight."""
    from farm.agent.llm import LLMClient
    from farm.config import ModelConfig

    async def go() -> None:
        cfg = ModelConfig(base_url="http://127.0.0.1:9/v1")
        a = LLMClient(cfg, session_id="a", task_id="t")
        b = LLMClient(cfg, session_id="b", task_id="t")
        assert a._shared is not None and a._client._client is a._shared is b._shared
        assert a._shared._transport._pool._max_connections > 100_000  # no cap that would queue trials
        await a.close()
        assert not b._shared.is_closed  # one trial's end leaves the others' pool open

    asyncio.run(go())
    asyncio.run(go())  # a new loop gets a pool of its own (a client is bound to its loop)
