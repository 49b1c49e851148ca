"""`farm plan`'s pilot: what a pilot run measured, read from its Parquet rows in replayable form
(every attempt's sandbox start, verifier and wall time, each step's LLM latency, tokens and
tool time; the run's start-up, warm-up, retries and order). farm/forecast/model.py replays it.
"""

from __future__ import annotations

import calendar
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from farm.config.benchmarks import same_benchmark
from farm.errors import ConfigError
from farm.forecast.sim import Attempt, SimTrial, Step
from farm.run.order import TaskKey, prior_durations


@dataclass
class Pilot:
    """What a pilot run measured, in replayable form."""

    run_id: str
    trials: dict[tuple[str, str], list[tuple[str, SimTrial]]]  # (benchmark, task) -> [(arm, trial)]
    tasks: dict[str, list[str]]  # benchmark -> task ids in plan order
    arms: list[str]
    seeds: int
    max_in_flight: int
    max_concurrent_starts: int
    retry_backoff_s: float
    startup_s: float
    warmup_s: float  # one-time cost of the first wave (see _warmup)
    measured_wall_s: float  # run creation to the last trial's end (what `farm run` took, ±1 s)
    notes: list[str] = field(default_factory=list)
    order: str = "dataset"  # the pilot's run.order
    # median wall seconds per task of the pilot's attempts: the prior run.order=longest_first
    # reads from the store, where the pilot is (farm/run/order.py prior_durations)
    priors: dict[TaskKey, float] = field(default_factory=dict)
    # arm -> the benchmarks it is limited to (experiment.arms[].benchmarks; a strict twin its
    # arm's); an arm not here runs on every benchmark
    limited: dict[str, list[str]] = field(default_factory=dict)

    def arms_on(self, benchmark: str) -> list[str]:
        """The pilot's arms that a run of its config gives trials on ``benchmark``."""
        return [a for a in self.arms
                if a not in self.limited or any(same_benchmark(b, benchmark) for b in self.limited[a])]


def _limited(config: dict[str, Any]) -> dict[str, list[str]]:
    """arm -> its ``benchmarks`` from a run's stored config, for the arms (and twins) that set them."""
    out: dict[str, list[str]] = {}
    for arm in (config.get("experiment") or {}).get("arms") or []:
        if isinstance(arm, dict) and arm.get("benchmarks"):
            for name in (arm["name"], arm["name"] + "-strict"):
                out[str(name)] = [str(b) for b in arm["benchmarks"]]
    return out


def _rows(table: Any) -> list[dict[str, Any]]:
    return table.to_pylist() if table is not None and table.num_rows else []


def _attempt(row: dict[str, Any], steps: list[dict[str, Any]], retried: bool, warmup_s: float = 0.0) -> Attempt:
    parsed = tuple(Step(latency_s=float(s.get("latency_s") or 0.0), prompt_tokens=int(s.get("prompt_tokens") or 0),
                        cached_tokens=int(s.get("cached_tokens") or 0),
                        completion_tokens=int(s.get("completion_tokens") or 0), tool_s=float(s.get("tool_s") or 0.0))
                   for s in sorted(steps, key=lambda s: s["step"]))
    start, verify = float(row.get("sandbox_start_s") or 0.0), float(row.get("verify_s") or 0.0)
    llm = row["llm_s"] if row.get("llm_s") is not None else sum(s.latency_s for s in parsed)
    tool = row["tool_s"] if row.get("tool_s") is not None else sum(s.tool_s for s in parsed)
    other = max(0.0, float(row.get("wall_s") or 0.0) - start - llm - tool - verify - warmup_s)
    return Attempt(sandbox_start_s=start, verify_s=verify, other_s=other, steps=parsed, retried=retried)


def _warmup(trials: list[dict[str, Any]]) -> tuple[float, set[Any], list[str]]:
    """The one-time cost the first wave of a run pays (farm loads its tokenizer, a worker imports
    the agent, once per process): median wall time of the attempts that started before any had
    finished, minus that of the later ones. Needs a pilot of at least two waves."""
    timed = [r for r in trials if r.get("started_at") and r.get("finished_at") and r.get("wall_s") is not None]
    if not timed:
        return 0.0, set(), ["the pilot's trials carry no timestamps: no warm-up estimate"]
    first_end = min(r["finished_at"] for r in timed)
    wave1 = [r for r in timed if r["started_at"] < first_end]
    later = [r for r in timed if r["started_at"] >= first_end]
    if not later:
        return 0.0, set(), ["the pilot ran in one wave (trials <= max_in_flight): its warm-up cannot be told "
                            "from trial time, so every simulated wave carries it (run a pilot of at least two "
                            "waves)"]
    warm = max(0.0, statistics.median(r["wall_s"] for r in wave1) - statistics.median(r["wall_s"] for r in later))
    return warm, {(r["trial_key"], r["attempt"]) for r in wave1}, []


def _created(meta: dict[str, Any]) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(str(meta.get("created_at")), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def load_pilot(store: Any, run_id: str) -> Pilot:
    """Read a pilot from a ``ResultStore``: every attempt, its steps, the run's config."""
    meta = store.read_run_meta(run_id)
    if meta is None:
        raise ConfigError(f"pilot run {run_id!r}: not in the store (unknown run id?)")
    trials = _rows(store.read_trials(run_id, dedupe=False))
    if not trials:
        raise ConfigError(f"pilot run {run_id!r}: no trial rows yet (nothing finished)")
    steps: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for s in _rows(store.read_steps(run_id)):
        steps.setdefault((s["trial_key"], s["attempt"]), []).append(s)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in trials:
        by_key.setdefault(r["trial_key"], []).append(r)
    warmup, first_wave, notes = _warmup(trials)
    out: dict[tuple[str, str], list[tuple[str, SimTrial]]] = {}
    for rows in by_key.values():
        rows.sort(key=lambda r: r["attempt"])
        attempts = tuple(_attempt(r, steps.get((r["trial_key"], r["attempt"]), []),
                                  retried=r["status"] == "infra_error" and i < len(rows) - 1,
                                  warmup_s=warmup if (r["trial_key"], r["attempt"]) in first_wave else 0.0)
                         for i, r in enumerate(rows))
        first = rows[0]
        out.setdefault((first["benchmark"], first["task_id"]), []).append(
            (first["arm"], SimTrial(attempts, image=first.get("image") or first["task_id"])))
    tasks: dict[str, list[str]] = {}
    arms: list[str] = []
    for p in _rows(store.read_plan(run_id)):
        if p["task_id"] not in tasks.setdefault(p["benchmark"], []):
            tasks[p["benchmark"]].append(p["task_id"])
        if p["arm"] not in arms:
            arms.append(p["arm"])
    cfg_run = (meta.get("config") or {}).get("run") or {}
    created = _created(meta)
    first_start = min((r["started_at"] for r in trials if r.get("started_at")), default=None)
    last_end = max((r["finished_at"] for r in trials if r.get("finished_at")), default=None)
    startup = max(0.0, first_start - created) if created is not None and first_start is not None else 0.0
    wall = (last_end - created) if created is not None and last_end is not None else math.nan
    return Pilot(run_id=run_id, trials=out, tasks=tasks, arms=arms or ["base"], seeds=int(cfg_run.get("seeds") or 1),
                 max_in_flight=int(cfg_run.get("max_in_flight") or 8),
                 # run-wide since farm/run/starts.py (it was per Ray worker before: a pilot of that
                 # time started faster than this forecasts, so the forecast errs long)
                 max_concurrent_starts=int(cfg_run.get("max_concurrent_starts") or 16),
                 retry_backoff_s=float(cfg_run.get("retry_backoff_s") or 1.0), startup_s=startup, warmup_s=warmup,
                 measured_wall_s=wall, notes=notes, order=str(cfg_run.get("order") or "dataset"),
                 priors=prior_durations(trials), limited=_limited(meta.get("config") or {}))
