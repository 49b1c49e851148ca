"""A Ray worker killed by Ray's memory monitor costs its trial one infra_error attempt, like any
lost worker: ``ray.exceptions.OutOfMemoryError`` is not a ``RayActorError``, and before it was
caught it ended a whole run with a traceback (two vLLM servers beside a run, 22.4 of 23.5 GB).

Ray's monitor cannot be made to kill exactly one actor at a chosen moment (a low
``RAY_memory_usage_threshold`` kills the pool before it starts), so the executor's own ``submit``
runs here against an actor whose call fails the way Ray reports that kill."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import ray.exceptions

from farm.config import load_config
from farm.run.plan import TrialSpec
from farm.run.workers import RayExecutor, TrialJob
from farm.tasks.harbor import load_harbor_task
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

OOM = ("2 worker(s) were killed due to the node running low on memory. Memory on the node "
       "(IP: 127.0.0.1) was 22.36GB used / 23.54GB limit (0.950051)")


class _Method:
    def __init__(self, exc: BaseException | None) -> None:
        self.exc, self.calls = exc, 0

    def remote(self, *_args: object):
        self.calls += 1

        async def ref():
            if self.exc is not None:
                raise self.exc
            return "ran"
        return ref()


class _Actor:
    def __init__(self, exc: BaseException | None = None) -> None:
        self.run = _Method(exc)
        self.where = _Where()


class _Where:
    def remote(self):
        async def ref():
            return {"node_id": "n" * 56, "ip": "127.0.0.1"}
        return ref()


def test_a_worker_killed_for_memory_is_a_retryable_infra_error_and_is_replaced(tmp_path: Path) -> None:
    task = load_harbor_task(make_task(tmp_path / "tasks", "t0", CHECK_ANSWER), "test")
    cfg = load_config([f"store.uri={tmp_path / 'store'}"])
    executor = RayExecutor(cfg)
    executor._ref = lambda obj: obj  # no object store: the call below never reaches Ray
    killed = _Actor(ray.exceptions.OutOfMemoryError(OOM))
    executor.actors, executor.holders = [killed], ["w-killed"]
    executor._new_actor = lambda holder, node=None: _Actor()
    executor._nodes = lambda: []  # no cluster to go round
    spec = TrialSpec("run", "k" * 64, task.benchmark, task.task_id, 0, "base", "oracle")

    outcome = asyncio.run(executor.submit(TrialJob(spec, task, cfg, attempt=1)))

    row = outcome.result
    assert (row.status, row.error_class) == ("infra_error", "worker_lost")
    assert "lost: OutOfMemoryError: 2 worker(s) were killed" in row.error and row.trial_key == spec.trial_key
    assert row.error.startswith("worker w-killed on ")
    # the dead actor is replaced once, and the next trial runs on the new one
    assert executor.actors[0] is not killed and executor.restarts == 1
    assert asyncio.run(executor.submit(TrialJob(spec, task, cfg, attempt=2))) == "ran"


class _Pid:
    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc

    def remote(self):
        async def ref():
            if self.exc is not None:
                raise self.exc
            return 4242
        return ref()


class _Starting:
    def __init__(self, exc: BaseException | None = None) -> None:
        self.pid = _Pid(exc)
        self.where = _Where()


def test_a_worker_whose_node_dies_before_it_ran_is_replaced_at_the_start(tmp_path: Path) -> None:
    # seen in the chaos benchmark on a starved machine: the GCS declared a node dead for missed
    # heartbeats while the pool was starting, and the run ended with ActorDiedError before its
    # first trial; now the worker is replaced as a lost worker is during the run
    cfg = load_config([f"store.uri={tmp_path / 'store'}"])
    executor = RayExecutor(cfg)
    dead = _Starting(ray.exceptions.ActorDiedError())
    executor.actors, executor.holders = [dead], ["w-dead"]
    made: list[_Starting] = []
    executor._new_actor = lambda holder, node=None: made.append(_Starting()) or made[-1]
    executor._nodes = lambda: []
    asyncio.run(executor._until_up(0))
    assert executor.actors[0] is made[0] and len(made) == 1

    # a node that keeps dying is the run's failure after a few tries, not a loop
    executor.actors = [dead]
    executor._new_actor = lambda holder, node=None: _Starting(ray.exceptions.ActorDiedError())
    with pytest.raises(ray.exceptions.RayActorError):
        asyncio.run(executor._until_up(0, tries=3))
