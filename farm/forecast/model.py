"""`farm plan`: forecast a full run's wall time, GPU- and pod-hours, tokens and cost from a pilot.

Inputs: a pilot run's own Parquet (every attempt's sandbox start, verifier time, wall time and,
per step, LLM latency, tokens and tool time) and a plan file (YAML, OmegaConf) that describes the
full run (tasks per benchmark, seeds, max_in_flight) and the cluster (pod slots, sandbox starts
at once, nodes and image pull time, the LLM as a measured endpoint or as GPU replicas with
prefill / decode throughput, prices). ``workload.<benchmark>`` states a per-trial profile where
no pilot exists (the pilot is read by farm/forecast/pilot.py). The run is then simulated trial
by trial (farm/forecast/sim.py); the model and its assumptions are in docs/scale.md. Not to be
confused with farm/run/plan.py, the trial plan (task × seed × arm) of a run.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from farm.config.benchmarks import same_benchmark
from farm.errors import ConfigError
from farm.forecast.pilot import Pilot
from farm.forecast.sim import Attempt, Cluster, LLMModel, SimResult, SimTrial, Step, simulate
from farm.run.order import ORDERS, TaskKey, longest_first


@dataclass
class LLMSpec:
    mode: str = "endpoint"  # endpoint (measured latency) | gpu (replicas with token throughput)
    latency_scale: float = 1.0  # endpoint: multiply the pilot's per-call latency
    max_concurrency: int = 0  # endpoint: calls at once (0: unlimited)
    replicas: int = 1
    gpus_per_replica: int = 1
    prefill_tok_s: float = 20000.0  # uncached prompt tokens per second, per replica
    decode_tok_s: float = 4000.0  # completion tokens per second per replica at full batch
    decode_tok_s_single: float = 120.0  # completion tokens per second of one sequence alone
    max_batch: int = 256  # sequences a replica decodes at once


@dataclass
class ClusterSpec:
    pod_slots: int = 0  # sandboxes at once (0: unlimited, one machine)
    max_concurrent_starts: int | None = None  # None: the pilot's (run-wide, every worker together)
    nodes: int = 1  # image caches: a node pulls each image once
    image_pull_s: float = 0.0


@dataclass
class PricesSpec:
    gpu_per_h: float = 0.0
    pod_per_h: float = 0.0
    prompt_per_mtok: float = 0.0  # uncached prompt tokens (an API endpoint)
    cached_per_mtok: float = 0.0
    completion_per_mtok: float = 0.0


@dataclass
class RunSpec:
    benchmarks: dict[str, int] = field(default_factory=dict)  # tasks per benchmark; {}: the pilot's
    seeds: int | None = None  # None: the pilot's run.seeds
    arms: int | None = None  # None: the pilot's arms
    max_in_flight: int | None = None  # None: the pilot's run.max_in_flight
    startup_s: float | None = None  # None: measured in the pilot (first trial start - run creation)
    warmup_s: float | None = None  # None: measured in the pilot (first wave's extra trial time)
    retry_backoff_s: float | None = None
    # the order trials start in, as run.order (farm/run/order.py); None: the pilot's (else dataset)
    order: str | None = None


@dataclass
class WorkloadSpec:
    """A stated per-trial profile (means), used instead of pilot trials for its benchmark."""

    steps: int = 50
    llm_latency_s: float = 0.0  # per call (endpoint mode)
    prompt_tokens: int = 0  # per call
    cached_tokens: int = 0  # per call
    completion_tokens: int = 0  # per call
    tool_s: float = 0.0  # per step
    sandbox_start_s: float = 0.0
    verify_s: float = 0.0
    other_s: float = 0.0


@dataclass
class SensitivitySpec:
    seeds: list[int] = field(default_factory=lambda: [1, 3, 5])
    max_in_flight_factors: list[float] = field(default_factory=lambda: [0.5, 2.0])
    enabled: bool = True


@dataclass
class PlanSpec:
    run: RunSpec = field(default_factory=RunSpec)
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    llm: LLMSpec = field(default_factory=LLMSpec)
    prices: PricesSpec = field(default_factory=PricesSpec)
    workload: dict[str, WorkloadSpec] = field(default_factory=dict)
    sensitivity: SensitivitySpec = field(default_factory=SensitivitySpec)
    seed: int = 0  # of the profile sampling


def _positive(where: str, value: Any, zero_ok: bool = False) -> None:
    if value is None:
        return
    if (value < 0) if zero_ok else (value <= 0):
        raise ConfigError(f"{where}: expected a {'non-negative' if zero_ok else 'positive'} number, got {value!r}")


def load_plan_spec(path: str | Path | None = None, overrides: list[str] | None = None) -> PlanSpec:
    """Read a plan file (may be None: defaults) and dotted overrides, validated field by field."""
    node = OmegaConf.structured(PlanSpec)
    origin = str(path) if path else "plan"
    try:
        if path:
            try:
                loaded = OmegaConf.load(path)
            except FileNotFoundError:
                raise ConfigError(f"plan file not found: {path}") from None
            node = OmegaConf.merge(node, loaded)
        for item in overrides or []:
            if "=" not in item:
                raise ConfigError(f"plan override {item!r}: expected key=value")
            origin = f"override {item!r}"
            node = OmegaConf.merge(node, OmegaConf.from_dotlist([item]))
        spec: PlanSpec = OmegaConf.to_object(node)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ConfigError(f"{origin}: invalid plan field '{key}': {str(exc).splitlines()[0]}") from None
    if spec.run.order is not None and spec.run.order not in ORDERS:
        raise ConfigError(f"run.order: expected one of {list(ORDERS)}, got {spec.run.order!r}")
    if spec.llm.mode not in ("endpoint", "gpu"):
        raise ConfigError(f"llm.mode: expected endpoint or gpu, got {spec.llm.mode!r}")
    for name in ("replicas", "gpus_per_replica", "prefill_tok_s", "decode_tok_s", "decode_tok_s_single",
                 "max_batch", "latency_scale"):
        _positive(f"llm.{name}", getattr(spec.llm, name))
    _positive("llm.max_concurrency", spec.llm.max_concurrency, zero_ok=True)
    _positive("cluster.pod_slots", spec.cluster.pod_slots, zero_ok=True)
    _positive("cluster.max_concurrent_starts", spec.cluster.max_concurrent_starts)
    _positive("cluster.nodes", spec.cluster.nodes)
    _positive("cluster.image_pull_s", spec.cluster.image_pull_s, zero_ok=True)
    for name in ("seeds", "arms", "max_in_flight"):
        _positive(f"run.{name}", getattr(spec.run, name))
    for bench, n in spec.run.benchmarks.items():
        _positive(f"run.benchmarks.{bench}", n)
    for bench, w in spec.workload.items():
        _positive(f"workload.{bench}.steps", w.steps, zero_ok=True)
        if w.cached_tokens > w.prompt_tokens:
            raise ConfigError(f"workload.{bench}.cached_tokens: {w.cached_tokens} exceeds prompt_tokens "
                              f"{w.prompt_tokens}")
    for name, value in asdict(spec.prices).items():
        _positive(f"prices.{name}", value, zero_ok=True)
    return spec


# -- the full run -----------------------------------------------------------------------------
def _stated(w: WorkloadSpec, image: str) -> SimTrial:
    step = Step(latency_s=w.llm_latency_s, prompt_tokens=w.prompt_tokens, cached_tokens=w.cached_tokens,
                completion_tokens=w.completion_tokens, tool_s=w.tool_s)
    return SimTrial((Attempt(w.sandbox_start_s, w.verify_s, w.other_s, (step,) * w.steps),), image=image)


def order_of(spec: PlanSpec, pilot: Pilot | None) -> str:
    """The start order the planned run uses: the plan's run.order, else the pilot's, else dataset."""
    return spec.run.order or (pilot.order if pilot else "dataset")


def expected_by_task(spec: PlanSpec, pilot: Pilot | None) -> dict[TaskKey, float]:
    """What run.order=longest_first expects of each planned task: the pilot's median wall time;
    a task the pilot did not run has no prior, and a run orders it by its timeouts, an upper
    bound the plan does not know, so it counts as longer than any prior (inf: it starts first)."""
    return {(bench, task): (pilot.priors.get((bench, task), math.inf) if pilot else math.inf)
            for bench, task in _planned_tasks(spec, pilot)}


def planned_benchmarks(spec: PlanSpec, pilot: Pilot | None) -> list[tuple[str, str, int]]:
    """(name as the plan spells it, name the pilot's rows use, tasks) per benchmark planned:
    ``run.benchmarks``, else the pilot's own. A plan may spell a benchmark any way farm takes it
    (``patcheval`` or ``patcheval-verified`` for the pilot's ``patch_eval_verified``, the claims'
    ``terminal_bench_2`` for ``terminal_bench_2_verified``); the pilot's trials of it are replayed."""
    if not spec.run.benchmarks:
        return [(b, b, len(t)) for b, t in pilot.tasks.items()] if pilot else []
    labels = ({b for b, _ in pilot.trials} | set(pilot.tasks)) if pilot else set()
    out: list[tuple[str, str, int]] = []
    for name, n_tasks in spec.run.benchmarks.items():
        label = name if name in labels else next((b for b in sorted(labels) if same_benchmark(b, name)), name)
        twin = next((other for other, seen, _ in out if seen == label or same_benchmark(seen, label)), None)
        if twin is not None:
            raise ConfigError(f"run.benchmarks.{name}: the same benchmark as run.benchmarks.{twin}; name it once")
        out.append((name, label, n_tasks))
    return out


def _planned_tasks(spec: PlanSpec, pilot: Pilot | None) -> list[TaskKey]:
    out = []
    for _, bench, n_tasks in planned_benchmarks(spec, pilot):
        known = pilot.tasks.get(bench, []) if pilot else []
        out += [(bench, known[ti] if ti < len(known) else f"{bench}#{ti}") for ti in range(n_tasks)]
    return out


def full_run_trials(spec: PlanSpec, pilot: Pilot | None, seeds: int | None = None,
                    order: str | None = None) -> list[SimTrial]:
    """The full run's trials in the order they start: plan order (task × seed × arm), or with
    run.order=longest_first (``order``, default ``order_of``) the tasks expected to take longest
    first, by the run's own rule (farm/run/order.py). Each replays a pilot trial of the same task
    when the pilot ran it, else a pilot trial of the same benchmark drawn at random, or the
    benchmark's stated workload."""
    keyed = _keyed_trials(spec, pilot, seeds)
    if (order or order_of(spec, pilot)) == "longest_first":
        keyed = longest_first(keyed, lambda kt: kt[0], expected_by_task(spec, pilot))
    return [t for _, t in keyed]


def _keyed_trials(spec: PlanSpec, pilot: Pilot | None, seeds: int | None) -> list[tuple[TaskKey, SimTrial]]:
    rng = random.Random(spec.seed)
    benchmarks = planned_benchmarks(spec, pilot)
    if not benchmarks:
        raise ConfigError("run.benchmarks: no benchmarks to plan (give tasks per benchmark, or a pilot run)")
    k = seeds or spec.run.seeds or (pilot.seeds if pilot else 1)
    out: list[tuple[TaskKey, SimTrial]] = []
    for name, bench, n_tasks in benchmarks:
        # an arm limited to some benchmarks (farm/config/arms.py runs_on) has no trials elsewhere
        arms = spec.run.arms or (len(pilot.arms_on(bench)) if pilot else 1)
        stated = spec.workload.get(name) or spec.workload.get(bench) or spec.workload.get("*")
        pool = [t for (b, _), ts in (pilot.trials.items() if pilot else []) if b == bench for _, t in ts]
        if stated is None and not pool:
            raise ConfigError(f"run.benchmarks.{name}: the pilot has no trials of this benchmark and there is "
                              f"no workload.{name} (or workload.'*') to state one")
        known = pilot.tasks.get(bench, []) if pilot else []
        for ti in range(n_tasks):
            task = known[ti] if ti < len(known) else f"{bench}#{ti}"
            mine = [t for _, t in pilot.trials.get((bench, task), [])] if pilot else []
            for s in range(k):
                for a in range(arms):
                    if stated is not None:
                        out.append(((bench, task), _stated(stated, image=task)))
                    elif mine:
                        out.append(((bench, task), mine[(s * arms + a) % len(mine)]))
                    else:
                        out.append(((bench, task), replace(rng.choice(pool), image=task)))
    return out


def cluster_of(spec: PlanSpec, pilot: Pilot | None, max_in_flight: int | None = None) -> Cluster:
    llm = LLMModel(**asdict(spec.llm))
    mif = max_in_flight or spec.run.max_in_flight or (pilot.max_in_flight if pilot else None)
    if mif is None:
        raise ConfigError("run.max_in_flight: needed without a pilot run to take it from")
    starts = spec.cluster.max_concurrent_starts or (pilot.max_concurrent_starts if pilot else 16)
    startup = spec.run.startup_s if spec.run.startup_s is not None else (pilot.startup_s if pilot else 0.0)
    warmup = spec.run.warmup_s if spec.run.warmup_s is not None else (pilot.warmup_s if pilot else 0.0)
    backoff = spec.run.retry_backoff_s if spec.run.retry_backoff_s is not None else (
        pilot.retry_backoff_s if pilot else 1.0)
    return Cluster(max_in_flight=mif, pod_slots=spec.cluster.pod_slots, max_concurrent_starts=starts,
                   nodes=spec.cluster.nodes, image_pull_s=spec.cluster.image_pull_s, startup_s=startup, warmup_s=warmup,
                   retry_backoff_s=backoff, llm=llm)


# -- the forecast -----------------------------------------------------------------------------
@dataclass
class Outcome:
    """One simulated run, in the units people plan with."""

    trials: int
    seeds: int
    max_in_flight: int
    wall_h: float
    gpus: int
    gpu_hours: float  # reserved for the whole run
    gpu_busy_share: float  # GPU work at full-batch efficiency / GPU time reserved (gpu mode)
    pod_hours: float  # sandbox-hours held by trials
    slot_hours: float  # pod slots reserved for the whole run (0 slots: = pod_hours)
    mean_in_flight: float
    llm_slowdown: float  # LLM time per call / unloaded
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost: dict[str, float]


def outcome(spec: PlanSpec, cluster: Cluster, r: SimResult, seeds: int) -> Outcome:
    gpus = cluster.llm.replicas * cluster.llm.gpus_per_replica if cluster.llm.mode == "gpu" else 0
    wall_h = r.wall_s / 3600.0
    gpu_h = gpus * wall_h
    pod_h = r.pod_s / 3600.0
    p = spec.prices
    uncached = r.prompt_tokens - r.cached_tokens
    cost = {"gpu": gpu_h * p.gpu_per_h, "pods": pod_h * p.pod_per_h,
            "tokens": (uncached * p.prompt_per_mtok + r.cached_tokens * p.cached_per_mtok
                       + r.completion_tokens * p.completion_per_mtok) / 1e6}
    cost["total"] = sum(cost.values())
    return Outcome(
        trials=r.trials, seeds=seeds, max_in_flight=cluster.max_in_flight, wall_h=wall_h, gpus=gpus,
        gpu_hours=gpu_h,
        gpu_busy_share=r.gpu_work_s / (cluster.llm.replicas * r.wall_s) if gpus and r.wall_s else math.nan,
        pod_hours=pod_h, slot_hours=cluster.pod_slots * wall_h if cluster.pod_slots else pod_h,
        mean_in_flight=r.mean_in_flight, llm_slowdown=r.llm_s / r.llm_unloaded_s if r.llm_unloaded_s else math.nan,
        prompt_tokens=r.prompt_tokens, cached_tokens=r.cached_tokens, completion_tokens=r.completion_tokens, cost=cost,
    )


@dataclass
class Forecast:
    pilot: str | None
    base: Outcome
    bottleneck: str
    gains: dict[str, float]  # resource doubled -> share of wall time saved
    by_seeds: list[Outcome]
    by_max_in_flight: list[Outcome]
    assumptions: dict[str, Any]
    order: str = "dataset"  # the start order simulated (run.order)
    # the tasks expected to take longest, longest first, as longest_first would start them:
    # {benchmark, task_id, expected_s (None: no prior, ordered by its timeouts), source}
    longest: list[dict[str, Any]] = field(default_factory=list)
    other_order: str = "longest_first"
    other_order_wall_h: float = math.nan  # the same trials started in the other order

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _doubled(c: Cluster) -> dict[str, Cluster]:
    out = {"max_in_flight": replace(c, max_in_flight=2 * c.max_in_flight),
           "sandbox starts": replace(c, max_concurrent_starts=2 * c.max_concurrent_starts)}
    if c.pod_slots:
        out["pod slots"] = replace(c, pod_slots=2 * c.pod_slots)
        out["pod slots and max_in_flight"] = replace(c, pod_slots=2 * c.pod_slots, max_in_flight=2 * c.max_in_flight)
    if c.llm.mode == "gpu":
        out["GPU replicas"] = replace(c, llm=replace(c.llm, replicas=2 * c.llm.replicas))
    elif c.llm.max_concurrency:
        out["endpoint concurrency"] = replace(c, llm=replace(c.llm, max_concurrency=2 * c.llm.max_concurrency))
    return out


def forecast(spec: PlanSpec, pilot: Pilot | None) -> Forecast:
    """Simulate the planned run, which resource to double first, and seeds / max_in_flight sensitivity."""
    seeds = spec.run.seeds or (pilot.seeds if pilot else 1)
    cluster = cluster_of(spec, pilot)
    order = order_of(spec, pilot)
    trials = full_run_trials(spec, pilot, seeds, order)
    base_r = simulate(trials, cluster)
    other = "dataset" if order == "longest_first" else "longest_first"
    other_r = simulate(full_run_trials(spec, pilot, seeds, other), cluster)
    base = outcome(spec, cluster, base_r, seeds)
    gains: dict[str, float] = {}
    by_seeds: list[Outcome] = []
    by_mif: list[Outcome] = []
    if spec.sensitivity.enabled:
        for name, c in _doubled(cluster).items():
            gains[name] = 1.0 - simulate(trials, c).wall_s / base_r.wall_s if base_r.wall_s else 0.0
        for k in sorted(set(spec.sensitivity.seeds) - {seeds}):
            by_seeds.append(outcome(spec, cluster, simulate(full_run_trials(spec, pilot, k, order), cluster), k))
        for f in spec.sensitivity.max_in_flight_factors:
            c = replace(cluster, max_in_flight=max(1, round(cluster.max_in_flight * f)))
            if c.max_in_flight != cluster.max_in_flight:
                by_mif.append(outcome(spec, c, simulate(trials, c), seeds))
    best = max(gains.items(), key=lambda kv: kv[1], default=("", 0.0))
    if not gains:
        bottleneck = "not computed (sensitivity.enabled=false)"
    elif best[1] >= 0.03:
        bottleneck = f"{best[0]} (doubling it saves {100 * best[1]:.0f}% of the wall time)"
    else:
        bottleneck = "none of the resources: the longest trials set the wall time"
    assumptions = {"cluster": asdict(cluster), "trials": len(trials),
                   "tasks": {bench: n for _, bench, n in planned_benchmarks(spec, pilot)},
                   "startup_s": cluster.startup_s,
                   "warmup_s": cluster.warmup_s, "pilot_measured_wall_s": pilot.measured_wall_s if pilot else None,
                   "notes": list(pilot.notes) if pilot else []}
    return Forecast(pilot.run_id if pilot else None, base, bottleneck, gains, by_seeds, by_mif, assumptions,
                    order=order, longest=longest_tasks(spec, pilot), other_order=other,
                    other_order_wall_h=other_r.wall_s / 3600.0)


def longest_tasks(spec: PlanSpec, pilot: Pilot | None, n: int = 5) -> list[dict[str, Any]]:
    """The ``n`` tasks run.order=longest_first starts first, with what it expects of each."""
    expected = expected_by_task(spec, pilot)
    head = longest_first(list(expected), lambda key: key, expected)[:n]
    return [{"benchmark": b, "task_id": t, "expected_s": None if math.isinf(expected[(b, t)]) else expected[(b, t)],
             "source": "no prior: its timeouts" if math.isinf(expected[(b, t)]) else "pilot median wall"}
            for b, t in head]
