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
from farm.run.workers import RayExecutor
from farm.store import ResultStore
from tests.procs import descends_from_this_test
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

pytestmark = pytest.mark.integration



def test_killed_worker_is_an_infra_error_and_the_run_goes_on(tmp_path: Path, monkeypatch):
    # a private Ray started by this run (never a cluster from the environment), so that the
    # actor killed below is one of this test's own processes
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    executors: list[RayExecutor] = []
    real_start = RayExecutor.start

    async def start_and_keep(self: RayExecutor) -> None:  # the real start; the test keeps a handle
        await real_start(self)
        executors.append(self)

    monkeypatch.setattr(RayExecutor, "start", start_and_keep)
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

    async def main():
        run = asyncio.create_task(run_experiment(cfg))
        killed = None
        while not run.done():
            await asyncio.sleep(0.5)
            if executors and killed is None and list((tmp_path).glob("**/heartbeat.json")):
                await asyncio.sleep(4)  # the trials are inside their `sleep 6`
                (executor,) = executors
                pid = await executor.actors[0].pid.remote()  # the actor names its own process
                assert pid != os.getpid() and descends_from_this_test(pid), pid
                killed = pid
                os.kill(killed, signal.SIGKILL)
        return killed, await run

    killed, summary = asyncio.run(main())
    assert killed is not None and executors[0].started_ray
    rows = ResultStore.open(str(store)).read_trials(summary.run_id, dedupe=False).to_pylist()
    lost = [r for r in rows if r["error_class"] == "worker_lost"]
    assert lost and all(r["status"] == "infra_error" for r in lost)
    latest = ResultStore.open(str(store)).read_trials(summary.run_id).to_pylist()
    assert sorted(r["status"] for r in latest) == ["resolved"] * 3
    assert summary.retried == len(lost)
