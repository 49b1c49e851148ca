"""Where trials execute: in this process (asyncio) or in a pool of Ray actors.

Both executors expose ``submit(job) -> awaitable TrialOutcome``. A trial is I/O-bound for
minutes (LLM turns, sandbox commands), so each Ray actor is an *async* actor driving many
trials on one event loop: thousands in flight do not mean thousands of processes. The policy
endpoints of local policies (oracle / nop / scripted) start lazily inside whichever process
runs the trial, so they work on a cluster too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

from farm.config import FarmConfig, resolved_agent
from farm.run.plan import TrialSpec
from farm.run.rows import LOCAL_POLICIES, WORKER_LOST, TrialOutcome, base_row, ended_row
from farm.run.serving_facts import ServingFacts
from farm.run.starts import GateActor, LocalGate, RayGate, StartGate
from farm.run.trial import run_trial
from farm.store.schema import TrialResult
from farm.tasks.model import Task

# how long close() waits for trials cancelled in their actors (a SIGTERM, the circuit breaker) to
# close their sandboxes before the actors are killed: a killed actor leaves its containers running
CANCEL_SETTLE_S = 60.0


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


async def execute(job: TrialJob, endpoints: PolicyEndpoints, gate: StartGate) -> TrialOutcome:
    base_url, policy = endpoints.base_url(job.cfg)
    return await run_trial(job.spec, job.task, job.cfg, job.attempt, base_url=base_url, policy=policy,
                           chash=job.config_hash, start_gate=gate, serving=job.serving)


class LocalExecutor:
    """Runs trials as tasks on the caller's event loop (tests, small runs, `run.executor=local`)."""

    name = "local"

    def __init__(self, cfg: FarmConfig) -> None:
        self.endpoints = PolicyEndpoints()
        self.gate = LocalGate(cfg.run.max_concurrent_starts)

    async def start(self) -> None:
        return None

    async def submit(self, job: TrialJob) -> TrialOutcome:
        return await execute(job, self.endpoints, self.gate)

    async def phases(self) -> dict[str, Any]:
        """Trials waiting for a start slot / starting / running / grading now, their peaks, and
        under ``oldest`` the attempt longest in each phase (GateBook.oldest)."""
        return {**self.gate.stats(), "oldest": self.gate.oldest()}

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

    def __init__(self, gate: Any, holder: str) -> None:
        self.endpoints = PolicyEndpoints()
        self.gate = RayGate(gate, holder)
        self.started = time.time()
        self.shared: dict[bytes, Any] = {}  # object ref -> the task or config it holds, fetched once
        import ray

        self.node_id: str = ray.get_runtime_context().get_node_id()

    async def _get(self, ref: Any) -> Any:
        key = ref.binary()
        if key not in self.shared:
            self.shared[key] = await ref
        return self.shared[key]

    async def run(self, job: _RemoteJob) -> TrialOutcome:
        task, cfg = await self._get(job.task_ref), await self._get(job.cfg_ref)
        out = await execute(TrialJob(job.spec, task, cfg, job.attempt, job.config_hash, job.serving),
                            self.endpoints, self.gate)
        out.result.ray_node = self.node_id
        return out

    def where(self) -> dict[str, str]:
        """The Ray node this worker runs on, to name it when the worker is lost."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address()}

    def shared_count(self) -> int:
        return len(self.shared)

    def pid(self) -> int:
        return os.getpid()

    def policy_stats(self) -> dict[str, Any]:
        return self.endpoints.stats()


class RayExecutor:
    """A bounded pool of async Ray actors; a dead actor (or node) costs its trials an infra_error
    attempt, named after the node it ran on, and is replaced by one Ray places on a live node."""

    name = "ray"

    def __init__(self, cfg: FarmConfig) -> None:
        self.cfg = cfg
        self.n_workers = cfg.run.workers
        self.actors: list[Any] = []
        self.holders: list[str] = []  # the start gate's name for actors[i]
        self.where: dict[str, asyncio.Future[dict[str, str]]] = {}  # holder -> its node, once known
        self._serial = itertools.count()
        self._rr = itertools.count()
        self.cancelled: list[Any] = []  # refs of trials cancelled in flight (close() waits for them)
        self.started_ray = False
        self.restarts = 0
        self.gate: Any = None
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
        # one count of sandbox starts for the whole run (farm/run/starts.py); named so that a
        # tool attached to the cluster can read the start queue, unique so that runs sharing a
        # cluster never share a count; owned by the driver and pinned to the driver's node, it
        # lives and dies with the run, never with a worker node that is lost
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        gate_cls = ray.remote(num_cpus=0, max_concurrency=100_000, max_restarts=0)(GateActor)
        self.gate = gate_cls.options(name=f"farm-start-gate-{os.getpid()}-{uuid.uuid4().hex[:8]}",
                                     scheduling_strategy=here).remote(self.cfg.run.max_concurrent_starts)
        self._cls = ray.remote(num_cpus=0, max_concurrency=100_000, max_restarts=0)(_TrialWorker)
        for _ in range(self.n_workers):
            self.actors.append(None)
            self.holders.append("")
            self._replace(len(self.actors) - 1)
        await asyncio.gather(*[self._until_up(i) for i in range(len(self.actors))])

    async def _until_up(self, i: int, tries: int = 3) -> None:
        """Worker ``i`` answering. A worker whose node dies before it ever ran (a lost raylet, or
        one the GCS declared dead for missed heartbeats on a starved machine) is replaced, as a
        lost worker is during the run, instead of failing the run before its first trial."""
        import ray.exceptions

        for attempt in range(tries):
            try:
                await self.actors[i].pid.remote()
                return
            except ray.exceptions.RayActorError:
                if attempt == tries - 1:
                    raise
                self._replace(i)

    def _new_actor(self, holder: str, node: str | None = None) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # soft: where the node is gone or full by the time Ray places the actor, any node will do
        where = NodeAffinitySchedulingStrategy(node_id=node, soft=True) if node else "DEFAULT"
        return self._cls.options(max_concurrency=100_000, scheduling_strategy=where).remote(self.gate, holder)

    def _nodes(self) -> list[str]:
        """The live nodes that offer CPUs, in a stable order: workers go round them, so that a
        lost node costs a share of the trials in flight, not all of them. Actors take no CPU,
        so Ray's default policy packs them all on one node, and its SPREAD strategy did too
        (Ray 2.60, two nodes, actors of zero resources)."""
        import ray

        return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0)

    def _replace(self, i: int) -> None:
        holder = f"w{next(self._serial)}"
        nodes = self._nodes()
        actor = self._new_actor(holder, nodes[i % len(nodes)] if len(nodes) > 1 else None)
        self.actors[i], self.holders[i] = actor, holder
        fut = self.where[holder] = asyncio.ensure_future(_where(actor))
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # a dead actor's answer is no error here

    def node_of(self, holder: str) -> str:
        """The node a worker ran on, as the row of a lost trial names it."""
        fut = self.where.get(holder)
        if fut is None or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return "node unknown"
        w = fut.result()
        return f"node {w['node_id']} ({w['ip']})"

    def node_id_of(self, holder: str) -> str | None:
        """The id of the node a worker ran on; None when it died before saying."""
        fut = self.where.get(holder)
        if fut is None or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        return fut.result()["node_id"]

    async def submit(self, job: TrialJob) -> TrialOutcome:
        import ray.exceptions

        i = next(self._rr) % len(self.actors)
        actor, holder = self.actors[i], self.holders[i]
        ref = actor.run.remote(_RemoteJob(job.spec, self._ref(job.task), self._ref(job.cfg), job.attempt,
                                          job.config_hash, job.serving))
        try:
            return await ref
        except asyncio.CancelledError:
            # the run stopped (circuit breaker, Ctrl-C): stop the remote trial too, best effort
            try:
                ray.cancel(ref)  # in an async actor: CancelledError in the trial, which closes its sandboxes
            except Exception:  # noqa: BLE001
                pass
            self.cancelled.append(ref)
            raise
        # OutOfMemoryError is not a RayActorError: Ray's memory monitor killed the actor because
        # the node ran low (two vLLM servers beside a run did that here), and it ended the whole
        # run with a traceback instead of costing the trials in flight one retried attempt.
        # A node that dies (its raylet gone) ends its actors with an ActorDiedError once the GCS
        # declares the node dead: the same path, the node named in the row.
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError,
                ray.exceptions.OutOfMemoryError) as exc:
            if self.actors[i] is actor:  # replace it once, not once per trial it held
                self._replace(i)
                self.restarts += 1
                if self.gate is not None:  # the start slots it held are free again
                    self.gate.release_holder.remote(holder)
            first = str(exc).splitlines()[0] if str(exc) else ""
            return _lost(job, f"worker {holder} on {self.node_of(holder)} lost: {type(exc).__name__}: {first}",
                         self.node_id_of(holder))

    async def phases(self) -> dict[str, Any]:
        """As LocalExecutor.phases, from the gate actor."""
        if self.gate is None:
            return {}
        stats, oldest = await asyncio.gather(self.gate.stats.remote(), self.gate.oldest.remote())
        return {**stats, "oldest": oldest}

    async def policy_stats(self) -> list[dict[str, Any]]:
        return await asyncio.gather(*[a.policy_stats.remote() for a in self.actors])

    async def close(self) -> None:
        import ray

        if self.cancelled:  # the cancelled trials' sandboxes are closed in their actors: wait for it
            await _settle(self.cancelled, CANCEL_SETTLE_S)
            self.cancelled = []
        for a in [*self.actors, self.gate]:
            try:
                if a is not None:
                    ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        for fut in self.where.values():
            fut.cancel()
        self.actors, self.gate = [], None
        self._refs.clear()
        if self.started_ray:
            ray.shutdown()


async def _settle(refs: list[Any], timeout: float) -> None:
    """Wait (at most ``timeout``) until every ref has ended, however it ended."""

    async def ended(ref: Any) -> None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await ref

    await asyncio.wait([asyncio.ensure_future(ended(r)) for r in refs], timeout=timeout)


async def _where(actor: Any) -> dict[str, str]:
    return await actor.where.remote()


def _lost(job: TrialJob, message: str, node: str | None = None) -> TrialOutcome:
    row: TrialResult = base_row(job.spec, job.attempt, job.cfg, job.task, uid="lost", chash=job.config_hash,
                                serving=job.serving)
    row.ray_node = node
    return TrialOutcome(ended_row(row, WORKER_LOST, message))


def make_executor(cfg: FarmConfig) -> LocalExecutor | RayExecutor:
    return RayExecutor(cfg) if cfg.run.executor == "ray" else LocalExecutor(cfg)
