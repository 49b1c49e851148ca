"""Where trials execute: in this process (asyncio) or in a pool of Ray actors.

Both executors expose ``submit(job) -> awaitable TrialOutcome``. A trial is I/O-bound for
minutes (LLM turns, sandbox commands), so each Ray actor is an *async* actor driving many
trials on one event loop: thousands in flight do not mean thousands of processes. The policy
endpoints of local policies (oracle / nop / scripted) start lazily inside whichever process
runs the trial, so they work on a cluster too.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass
from typing import Any

from farm.config import FarmConfig, resolved_agent
from farm.run.plan import TrialSpec
from farm.run.rows import LOCAL_POLICIES, WORKER_LOST, TrialOutcome, base_row, ended_row
from farm.run.serving_facts import ServingFacts
from farm.run.trial import run_trial
from farm.store.schema import TrialResult
from farm.tasks.model import Task


@dataclass
class TrialJob:
    spec: TrialSpec
    task: Task
    cfg: FarmConfig  # the arm's config
    attempt: int
    config_hash: str | None = None  # the arm's, computed once by the driver
    serving: ServingFacts | None = None  # what served the arm's model, asked once by the driver


class PolicyEndpoints:
    """Local policy servers of one process, started on first use and reused."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, str | None], Any] = {}

    def base_url(self, cfg: FarmConfig) -> tuple[str, str]:
        policy = resolved_agent(cfg)
        if policy not in LOCAL_POLICIES:
            if not cfg.model.base_url:
                raise RuntimeError("no model.base_url for the leaf policy")  # validated earlier
            return cfg.model.base_url, policy
        key = (policy, cfg.agent.script)
        if key not in self._servers:
            from farm.agent.policies.server import start_policy_server

            self._servers[key] = start_policy_server(policy, script=cfg.agent.script)
        return self._servers[key].base_url, policy

    def stats(self) -> dict[str, Any]:
        return {f"{k[0]}:{k[1]}": s.stats() for k, s in self._servers.items() if hasattr(s, "stats")}

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()


async def execute(job: TrialJob, endpoints: PolicyEndpoints) -> TrialOutcome:
    base_url, policy = endpoints.base_url(job.cfg)
    return await run_trial(job.spec, job.task, job.cfg, job.attempt, base_url=base_url, policy=policy,
                           chash=job.config_hash, serving=job.serving)


class LocalExecutor:
    """Runs trials as tasks on the caller's event loop (tests, small runs, `run.executor=local`)."""

    name = "local"

    def __init__(self, cfg: FarmConfig) -> None:
        self.endpoints = PolicyEndpoints()

    async def start(self) -> None:
        return None

    async def submit(self, job: TrialJob) -> TrialOutcome:
        return await execute(job, self.endpoints)

    async def close(self) -> None:
        self.endpoints.close()


def ray_env() -> dict[str, str]:
    """Environment that keeps every Ray listener on loopback when Ray starts locally."""
    return {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0"),
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),
    }


def init_ray(address: str | None, num_cpus: int | None = None) -> bool:
    """Join ``address`` (or RAY_ADDRESS) or start a private local Ray; True if we started it."""
    os.environ.update(ray_env())
    import ray

    if ray.is_initialized():
        return False
    target = address or os.environ.get("RAY_ADDRESS")
    if target:
        # A job driver inherits the job's runtime_env; adding ours would conflict with it.
        ray.init(address=target, log_to_driver=False)
        return False
    runtime_env = {"env_vars": ray_env()}
    ray.init(
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        num_cpus=num_cpus,
        runtime_env=runtime_env,
        log_to_driver=False,
        configure_logging=False,
    )
    return True


@dataclass
class _RemoteJob:
    """A TrialJob as sent to an actor: the task and the arm's config travel as object refs
    (put once per run, fetched and kept once per actor), not pickled into every call."""

    spec: TrialSpec
    task_ref: Any  # ray.ObjectRef of the Task
    cfg_ref: Any  # ray.ObjectRef of the arm's FarmConfig
    attempt: int
    config_hash: str | None
    serving: ServingFacts | None = None


class _TrialWorker:
    """Body of the Ray actor (an async actor: many trials per process)."""

    def __init__(self) -> None:
        self.endpoints = PolicyEndpoints()
        self.started = time.time()
        self.shared: dict[bytes, Any] = {}  # object ref -> the task or config it holds, fetched once

    async def _get(self, ref: Any) -> Any:
        key = ref.binary()
        if key not in self.shared:
            self.shared[key] = await ref
        return self.shared[key]

    async def run(self, job: _RemoteJob) -> TrialOutcome:
        task, cfg = await self._get(job.task_ref), await self._get(job.cfg_ref)
        return await execute(TrialJob(job.spec, task, cfg, job.attempt, job.config_hash, job.serving),
                             self.endpoints)

    def shared_count(self) -> int:
        return len(self.shared)

    def pid(self) -> int:
        return os.getpid()

    def policy_stats(self) -> dict[str, Any]:
        return self.endpoints.stats()


class RayExecutor:
    """A bounded pool of async Ray actors; a dead actor costs its trials an infra_error attempt."""

    name = "ray"

    def __init__(self, cfg: FarmConfig) -> None:
        self.cfg = cfg
        self.n_workers = cfg.run.workers
        self.actors: list[Any] = []
        self._rr = itertools.count()
        self.started_ray = False
        self.restarts = 0
        # id(obj) -> (obj, its ray.put ref): the driver's tasks and per-arm configs are the same
        # objects for every trial, so each is put once; obj is kept so that its id stays its own
        self._refs: dict[int, tuple[Any, Any]] = {}

    def _ref(self, obj: Any) -> Any:
        import ray

        hit = self._refs.get(id(obj))
        if hit is None or hit[0] is not obj:
            hit = self._refs[id(obj)] = (obj, ray.put(obj))
        return hit[1]

    async def start(self) -> None:
        import ray

        self.started_ray = init_ray(self.cfg.run.ray_address)
        self._cls = ray.remote(num_cpus=0, max_concurrency=100_000, max_restarts=0)(_TrialWorker)
        self.actors = [self._new_actor() for _ in range(self.n_workers)]
        await asyncio.gather(*[a.pid.remote() for a in self.actors])

    def _new_actor(self) -> Any:
        return self._cls.options(max_concurrency=100_000).remote()

    async def submit(self, job: TrialJob) -> TrialOutcome:
        import ray.exceptions

        i = next(self._rr) % len(self.actors)
        actor = self.actors[i]
        ref = actor.run.remote(_RemoteJob(job.spec, self._ref(job.task), self._ref(job.cfg), job.attempt,
                                          job.config_hash, job.serving))
        try:
            return await ref
        except asyncio.CancelledError:
            # the run stopped (circuit breaker, Ctrl-C): stop the remote trial too, best effort
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001
                pass
            raise
        # OutOfMemoryError is not a RayActorError: Ray's memory monitor killed the actor because
        # the node ran low (two vLLM servers beside a run did that here), and it ended the whole
        # run with a traceback instead of costing the trials in flight one retried attempt
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError,
                ray.exceptions.OutOfMemoryError) as exc:
            if self.actors[i] is actor:  # replace it once, not once per trial it held
                self.actors[i] = self._new_actor()
                self.restarts += 1
            return _lost(job, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    async def policy_stats(self) -> list[dict[str, Any]]:
        return await asyncio.gather(*[a.policy_stats.remote() for a in self.actors])

    async def close(self) -> None:
        import ray

        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        self.actors = []
        self._refs.clear()
        if self.started_ray:
            ray.shutdown()


def _lost(job: TrialJob, message: str) -> TrialOutcome:
    row: TrialResult = base_row(job.spec, job.attempt, job.cfg, job.task, uid="lost", chash=job.config_hash,
                                serving=job.serving)
    return TrialOutcome(ended_row(row, WORKER_LOST, message))


def make_executor(cfg: FarmConfig) -> LocalExecutor | RayExecutor:
    return RayExecutor(cfg) if cfg.run.executor == "ray" else LocalExecutor(cfg)
