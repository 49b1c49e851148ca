"""The Ray executor: async actors drive trials; a dead actor costs its trials one infra_error
attempt, not the run."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import run_experiment
from farm.store import ResultStore

from .conftest import CHECK_ANSWER, make_task

pytestmark = pytest.mark.integration


def _actor_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"_TrialWorker" in cmd and str(os.getpid()).encode() not in cmd:
                pids.append(int(entry.name))
    return pids


def test_killed_worker_is_an_infra_error_and_the_run_goes_on(tmp_path: Path):
    tasks = tmp_path / "tasks"
    for i in range(3):
        make_task(tasks, f"t{i}", CHECK_ANSWER, solve_sh=None)
    script = tmp_path / "slow.yaml"
    script.write_text(yaml.safe_dump([
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "sleep 6; echo fixed > /app/answer.txt"}}]},
        {"content": "done"},
    ]))
    store = tmp_path / "store"
    cfg = load_config([f"benchmark.path={tasks}", "agent=scripted", f"agent.script={script}", "run.executor=ray",
                       "run.workers=1", f"store.uri={store}", "run.max_attempts=3", "run.retry_backoff_s=0"])
    before = set(_actor_pids())

    async def main():
        run = asyncio.create_task(run_experiment(cfg))
        killed = None
        while not run.done():
            await asyncio.sleep(0.5)
            fresh = [p for p in _actor_pids() if p not in before]
            if fresh and killed is None and list((tmp_path).glob("**/heartbeat.json")):
                await asyncio.sleep(4)  # the trials are inside their `sleep 6`
                killed = fresh[0]
                os.kill(killed, signal.SIGKILL)
        return killed, await run

    killed, summary = asyncio.run(main())
    assert killed is not None
    rows = ResultStore.open(str(store)).read_trials(summary.run_id, dedupe=False).to_pylist()
    lost = [r for r in rows if r["error_class"] == "worker_lost"]
    assert lost and all(r["status"] == "infra_error" for r in lost)
    latest = ResultStore.open(str(store)).read_trials(summary.run_id).to_pylist()
    assert sorted(r["status"] for r in latest) == ["resolved"] * 3
    assert summary.retried == len(lost)
