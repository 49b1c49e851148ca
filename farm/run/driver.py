"""The run driver: plan, resume, bounded fan-out, retries of infra errors, single writer.

A run is identified by its run id (derived from the config hash unless given). Re-running the
same command resumes: finished trials are skipped, infra errors and never-finished trials
re-run with the next attempt number. Rows are committed by one BatchWriter, after the trial's
artifacts, so the store never holds a trial row whose artifacts are missing.

Every attempt is admitted in the store (``ResultStore.admit``) before its agent starts. On
resume, an admitted attempt without a row (the driver was killed, the run stopped while it ran)
is first recorded as ``infra_error`` / ``attempt_lost``, then the trial is drawn again: a
second agent run never replaces a first one silently, and the report can say how many trials
needed more than one (farm/report/retries.py).

A store write that fails for good (S3 past ``store.retry_budget_s``, a full disk: StoreWriteError)
stops the run like the circuit breaker does; ``farm run`` exits with 6 and one line.

Before the first trial the run is preflighted (farm/run/preflight.py: store writable, every
arm's endpoint, one sandbox start); a failure raises PreflightError and nothing runs. During
the run a circuit breaker stops it when ``run.breaker_consecutive`` trial attempts in a row end
in the same infra_error class: the trials it did not finish get no row and re-run on resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import farm
from farm.agent.leaf_import import warn_unless_vendor_prompt
from farm.config import FarmConfig, apply_overrides, conf_dir, config_hash, resolved_agent, to_dict
from farm.config.arms import Resolver, arms_of, require_arm_endpoints, runs_on
from farm.errors import ConfigError, StoreError, StoreWriteError
from farm.run.endpoint import PreflightError
from farm.run.order import order_trials, store_priors
from farm.run.plan import ResumeState, TrialSpec, build_plan, resume
from farm.run.predictions import plan_model, restrict, run_predictions
from farm.run.preflight import (
    Refusal,
    check_backends,
    check_engines,
    image_refusals,
    refusals,
    refused_outcome,
    run_preflight,
)
from farm.run.rows import ATTEMPT_LOST, base_row, ended_row, is_unsupported, retryable
from farm.run.serving_facts import ServingFacts, probe_facts
from farm.run.workers import TrialJob, make_executor
from farm.store.results import ResultStore
from farm.store.schema import TRIALS_SCHEMA, TrialResult, to_table
from farm.store.writer import BatchWriter
from farm.tasks.benchmark import load_benchmark_tasks
from farm.tasks.model import Task

HEARTBEAT_S = 30.0
PHASES_EVERY_S = 1.0  # how often the progress line asks the start gate for its counts (at most)


@dataclass
class RunSummary:
    run_id: str
    config_hash: str
    planned: int
    skipped: int
    executed_attempts: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # final status of trials run now
    retried: int = 0
    refused: int = 0  # trials that cannot run here (task_unsupported:*): found by the preflight or at start
    wall_s: float = 0.0
    store_uri: str = ""
    breaker: str | None = None  # why the circuit breaker stopped the run (None: it did not)
    # trials the breaker stopped before their last attempt ended (never started, cancelled in
    # flight, or waiting for a retry): re-run on resume
    unfinished: int = 0
    served: dict[str, str] = field(default_factory=dict)  # arm -> model id its endpoint answered with
    # the most trials at once waiting for a start slot / starting / running / grading, run-wide
    # (farm/run/starts.py); empty when the executor could not say
    peak_phases: dict[str, int] = field(default_factory=dict)
    lost: int = 0  # admitted attempts of earlier invocations found without a row: recorded attempt_lost

    @property
    def infra_left(self) -> int:
        """Trials whose last attempt is still infra_error after retries (refusals excluded)."""
        return self.counts.get("infra_error", 0) - self.refused


class Breaker:
    """Trips when ``limit`` trial attempts in a row end in the same infra_error class."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.cls: str | None = None
        self.count = 0
        self.reason: str | None = None

    def observe(self, status: str, error_class: str | None, error: str | None) -> bool:
        if status != "infra_error":
            self.cls, self.count = None, 0
            return False
        cls = error_class or "infra_error"
        self.count = self.count + 1 if cls == self.cls else 1
        self.cls = cls
        if self.limit and self.count >= self.limit and self.reason is None:
            last = (str(error or "").strip().splitlines() or [""])[0][:300]
            self.reason = (f"circuit breaker: {self.count} trial attempts in a row ended in infra_error "
                           f"{cls!r} (last: {last or 'no message'})")
        return self.reason is not None


def load_tasks(cfg: FarmConfig) -> list[Task]:
    """The run's tasks: one benchmark, or every benchmark the experiment lists."""
    if not cfg.experiment.benchmarks:
        return load_benchmark_tasks(cfg.benchmark)
    tasks: list[Task] = []
    for name in cfg.experiment.benchmarks:
        preset = (conf_dir() / "benchmark" / f"{name}.yaml").is_file()
        bcfg = apply_overrides(cfg, [f"benchmark={name}"]).benchmark if preset \
            else replace(cfg.benchmark, name=name, path=None)
        tasks += load_benchmark_tasks(bcfg)
    return tasks


def derive_run_id(cfg: FarmConfig) -> str:
    if cfg.run.id:
        return cfg.run.id
    base = cfg.experiment.name if cfg.experiment.name != "default" else cfg.benchmark.name
    base = "".join(c if c.isalnum() or c in "-_." else "-" for c in base)
    rid = f"{base}-{config_hash(cfg)[:10]}"
    if cfg.run.new:
        rid += time.strftime("-%Y%m%d-%H%M%S")
    return rid


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [f"{prefix[:-1]}: {a!r} -> {b!r}"]


def open_run(cfg: FarmConfig, store: ResultStore, run_id: str, plan: list[TrialSpec],
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Create the run's metadata (with ``extra``: what the run knows beyond its config, such as
    the predictions it grades), or check that an existing run has the same config."""
    chash = config_hash(cfg)
    meta = store.read_run_meta(run_id)
    if meta is not None:
        if meta.get("config_hash") != chash:
            changes = _diff(meta.get("config", {}), to_dict(cfg))
            shown = "; ".join(c for c in changes if not c.startswith(("run.", "store.")))[:800]
            raise ConfigError(
                f"run {run_id!r} already exists in {store.uri} with config hash {meta.get('config_hash')}, "
                f"but this config hashes to {chash} (changed: {shown or 'execution settings'}). "
                "Pass run.new=true to start a new run, or run.id=<other id>."
            )
        return meta
    meta = {
        "run_id": run_id,
        "config_hash": chash,
        "config": to_dict(cfg),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "farm_version": farm.__version__,
        "arms": [name for name, _ in arms_of(cfg)],
        **(extra or {}),
    }
    # the plan first, run.json last: run.json is what makes a run exist for a reader and for
    # resume, so a run interrupted between the two is simply opened again
    store.write_plan(run_id, [s.plan_row() for s in plan])
    store.write_run_meta(run_id, meta)
    return meta


# (event, what it carries): "plan" (the number of attempts to run), "stage" (a sentence: the
# preflight), "phases" (the start gate's counts), "start" (None), "done" / "retry" (TrialOutcome)
ProgressHook = Callable[[str, Any], None]


async def run_experiment(
    cfg: FarmConfig,
    *,
    tasks: list[Task] | None = None,
    progress: ProgressHook | None = None,
) -> RunSummary:
    t0 = time.monotonic()
    arms = arms_of(cfg)
    warn_unless_vendor_prompt(arms, cfg.experiment.name)  # once per run, before anything starts
    require_arm_endpoints(cfg, arms)  # the endpoint check, once per arm
    tasks = tasks if tasks is not None else load_tasks(cfg)
    extra: dict[str, Any] = {}
    if (preds := run_predictions(arms)) is not None:  # only the instances the file has are run
        tasks, extra["predictions"] = restrict(tasks, preds)
    run_id = derive_run_id(cfg)
    # the plan labels each arm with what will answer: the model id for a model, else the policy
    arm_cfg = dict(arms)
    plan = build_plan(run_id, tasks, cfg.run.seeds, [(name, plan_model(a)) for name, a in arms],
                      runs_on=lambda arm, bench: runs_on(arm_cfg[arm], arm, bench))  # an arm's benchmarks only
    store = _open_store(cfg, run_id, plan, extra)
    trial_cfg = Resolver(arm_cfg)  # + experiment.per_benchmark: the vendor's budgets differ by benchmark
    arm_hash = {name: config_hash(a) for name, a in arms}
    by_task = {(t.benchmark, t.task_id): t for t in tasks}
    rows = store.read_trials(run_id, dedupe=False)
    lost = lost_attempts(plan, rows, store.read_admitted(run_id), by_task, trial_cfg, arm_hash)
    if lost:  # committed before any trial is drawn again, so the ledger shows the lost run first
        store.write_rows("trials", run_id, to_table(lost, TRIALS_SCHEMA))
        rows = store.read_trials(run_id, dedupe=False)
    state = resume(plan, rows)
    if cfg.run.order != "dataset":
        # earlier runs in the store say how long each task took; off the loop (it reads Parquet)
        priors = await asyncio.to_thread(store_priors, store, run_id)
        state.todo = order_trials(state.todo, by_task, cfg.run.order, priors, cfg.agent.max_total_time_s)
    summary = RunSummary(run_id, config_hash(cfg), len(plan), state.finished, store_uri=store.uri)
    summary.lost = len(lost)
    for name, acfg in arms:
        if resolved_agent(acfg) == "leaf" and not acfg.model.base_url:
            raise ConfigError(f"arm {name!r}: the leaf policy needs model.base_url (or serve.enabled=true)")

    check_backends(arm_cfg)
    if cfg.run.preflight:  # before the image checks: a dead daemon would fail those too, less clearly
        await check_engines(arm_cfg)
    refused = refusals(tasks, arm_cfg)
    refused.update(await image_refusals(tasks, arm_cfg, refused))
    latest_class = _latest_error_class(rows) if refused else {}
    if cfg.run.preflight and any((s.arm, s.benchmark, s.task_id) not in refused for s in state.todo):
        if progress:
            progress("stage", "preflight: the endpoint, then one sandbox start"
                     if cfg.run.preflight_sandbox else "preflight: the endpoint")
        summary.served = {arm: info.served_model
                          for arm, info in (await run_preflight(arm_cfg, tasks, refused, run_id)).items()}

    # what served each arm (revision, engine, version, cache mode): asked once, on every row
    serving = {name: await probe_facts(acfg) for name, acfg in arms}
    pool = _Pool(cfg, store, state, summary, by_task, arm_cfg, trial_cfg, arm_hash, refused, latest_class, progress,
                 serving)
    if progress:
        progress("plan", len(state.todo))
    await pool.drive()
    summary.wall_s = time.monotonic() - t0
    summary.breaker = pool.breaker.reason
    summary.unfinished = sum(1 for s in state.todo if s.trial_key not in pool.finished)
    return summary


def lost_attempts(plan: list[TrialSpec], trials: Any, admitted: set[tuple[str, int]],
                  by_task: dict[tuple[str, str], Task], trial_cfg: Resolver,
                  arm_hash: dict[str, str]) -> list[TrialResult]:
    """One ``infra_error`` / ``attempt_lost`` row per admitted attempt of a planned trial that has no row."""
    have = set(zip(trials.column("trial_key").to_pylist(), trials.column("attempt").to_pylist())) \
        if trials.num_rows else set()
    specs = {s.trial_key: s for s in plan}
    out = []
    for key, attempt in sorted(admitted - have):
        spec = specs.get(key)
        task = by_task.get((spec.benchmark, spec.task_id)) if spec else None
        if spec is None or task is None:
            continue  # not in this invocation's plan: nothing will draw it again
        row = base_row(spec, attempt, trial_cfg(spec.arm, spec.benchmark), task, uid="lost",
                       chash=arm_hash.get(spec.arm))
        out.append(ended_row(row, ATTEMPT_LOST, f"attempt {attempt} was admitted (its agent started) but no row "
                                                "was committed: the driver stopped before it ended"))
    return out


def _open_store(cfg: FarmConfig, run_id: str, plan: list[TrialSpec], extra: dict[str, Any]) -> ResultStore:
    """The run's store, with the run's metadata and plan written (or checked, on resume).

    Raises:
        PreflightError: the store cannot be written.
        StoreWriteError: S3 kept failing past store.retry_budget_s (exit 6, like a failure mid-run).
    """
    try:
        store = ResultStore.open(cfg.store.uri, cfg.store.endpoint_url, cfg.store.region,
                                 retry_budget_s=cfg.store.retry_budget_s, request_timeout_s=cfg.store.request_timeout_s)
        open_run(cfg, store, run_id, plan, extra)
        if cfg.run.preflight:
            store.write_heartbeat(run_id, {"host": socket.gethostname(), "pid": os.getpid(), "preflight": True})
    except StoreWriteError:
        raise
    except (StoreError, OSError) as exc:
        raise PreflightError(f"preflight: store.uri={cfg.store.uri!r} is not writable: {exc}") from None
    return store


class _Pool:
    """The run's trials in flight, one writer for their rows, the circuit breaker.

    A fixed pool of run.max_in_flight runners takes attempts from one queue: the coroutines
    alive are bounded by max_in_flight, not by the plan (one per planned trial was 10,000
    suspended coroutines, and as many frames, before the first trial ran). A retry waits out
    its backoff off the pool (a timer puts it back), so its slot serves another trial meanwhile.
    """

    def __init__(self, cfg: FarmConfig, store: ResultStore, state: ResumeState, summary: RunSummary,
                 by_task: dict[tuple[str, str], Task], arm_cfg: dict[str, FarmConfig],
                 trial_cfg: Resolver, arm_hash: dict[str, str], refused: dict[tuple[str, str, str], Refusal],
                 latest_class: dict[str, str], progress: ProgressHook | None,
                 serving: dict[str, ServingFacts] | None = None) -> None:
        self.cfg, self.store, self.run_id, self.state, self.summary = cfg, store, summary.run_id, state, summary
        self.by_task, self.arm_cfg, self.trial_cfg, self.arm_hash = by_task, arm_cfg, trial_cfg, arm_hash
        self.refused, self.latest_class, self.progress = refused, latest_class, progress
        self.serving = serving or {}
        self.breaker = Breaker(cfg.run.breaker_consecutive)
        self.store_failed: StoreWriteError | None = None  # the store gave up: the run stops
        self.finished: set[str] = set()
        self.writer = BatchWriter(store, self.run_id, cfg.store.batch_rows, cfg.store.flush_interval_s)
        self.executor = make_executor(cfg)
        self.queue: asyncio.Queue[tuple[TrialSpec, int] | None] = asyncio.Queue()
        self.left = len(state.todo)  # trials not yet done (finished, refused, stopped or failed)
        self.errors: list[BaseException] = []
        self.runners: list[asyncio.Task[None]] = []
        self.timers: list[asyncio.TimerHandle] = []

    async def record_refusal(self, spec: TrialSpec) -> None:
        refusal = self.refused[(spec.arm, spec.benchmark, spec.task_id)]
        task = self.by_task[(spec.benchmark, spec.task_id)]
        summary = self.summary
        summary.refused += 1
        summary.counts["infra_error"] = summary.counts.get("infra_error", 0) + 1
        self.finished.add(spec.trial_key)
        if is_unsupported(self.latest_class.get(spec.trial_key, "")):
            return  # recorded by an earlier invocation of this run: once per trial
        outcome = refused_outcome(spec, task, self.arm_cfg[spec.arm], self.state.next_attempt[spec.trial_key],
                                  refusal, self.arm_hash[spec.arm])
        await asyncio.to_thread(self.writer.add, outcome.result, outcome.steps)
        if self.progress:
            self.progress("start", None)
            self.progress("done", outcome)

    async def attempt_once(self, spec: TrialSpec, i: int) -> bool:
        """Attempt ``i`` (0-based) of ``spec``; True when it was the trial's last."""
        job = TrialJob(spec, self.by_task[(spec.benchmark, spec.task_id)], self.trial_cfg(spec.arm, spec.benchmark),
                       self.state.next_attempt[spec.trial_key] + i, self.arm_hash[spec.arm],
                       self.serving.get(spec.arm))
        # admitted before the agent starts: if this process dies now, resume finds the admission
        # without a row and records the attempt as lost instead of silently drawing it again
        await asyncio.to_thread(self.store.admit, self.run_id, spec.trial_key, job.attempt,
                                {"host": socket.gethostname(), "pid": os.getpid()})
        if self.progress:
            self.progress("start", None)
        outcome = await self.executor.submit(job)
        # store I/O (an S3 PUT, a Parquet flush) runs off the event loop that drives the trials
        for name, data in outcome.artifacts.items():
            await asyncio.to_thread(self.store.write_artifact, self.run_id, spec.trial_key, outcome.result.attempt,
                                    name, data)
        await asyncio.to_thread(self.writer.add, outcome.result, outcome.steps)
        summary = self.summary
        summary.executed_attempts += 1
        status = outcome.result.status
        if not is_unsupported(outcome.result.error_class):
            if self.breaker.observe(status, outcome.result.error_class, outcome.result.error):
                self.trip()
        last = not retryable(outcome.result) or i == self.cfg.run.max_attempts - 1 or self.breaker.reason is not None
        if self.progress:
            self.progress("retry" if not last else "done", outcome)
        if last:
            if is_unsupported(outcome.result.error_class):
                summary.refused += 1  # found at start (no solution, a broken build step): not run
            summary.counts[status] = summary.counts.get(status, 0) + 1
            self.finished.add(spec.trial_key)
        return last

    async def heartbeat(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a missed beat only makes gc more eager later
                beat = {"host": socket.gethostname(), "pid": os.getpid()}
                await asyncio.to_thread(self.store.write_heartbeat, self.run_id, beat)
            await asyncio.sleep(HEARTBEAT_S)

    async def watch_phases(self) -> None:
        """Keep the run's phase counts (the start queue among them) in the progress line; the
        polls are also the plain progress line's clock, so they come at least once an interval."""
        every = min(PHASES_EVERY_S, self.cfg.run.progress_interval_s)
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(Exception):  # a missed count only leaves the line a second stale
                await self.note_phases()

    async def note_phases(self) -> None:
        stats = await self.executor.phases()
        self.summary.peak_phases = {k[5:]: v for k, v in stats.items() if k.startswith("peak_")}
        if self.progress:
            self.progress("phases", stats)

    def done_one(self) -> None:
        self.left -= 1
        if self.left == 0:
            for _ in self.runners:
                self.queue.put_nowait(None)  # every runner ends

    async def runner(self) -> None:
        loop = asyncio.get_running_loop()
        while self.breaker.reason is None and self.store_failed is None:
            item = await self.queue.get()
            if item is None:
                return
            spec, i = item
            try:
                if (spec.arm, spec.benchmark, spec.task_id) in self.refused:
                    await self.record_refusal(spec)
                    last = True
                else:
                    last = await self.attempt_once(spec, i)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - raised after the others finish, as gather did
                self.errors.append(exc)
                last = True
                if isinstance(exc, StoreWriteError) and self.store_failed is None:
                    # nothing more can be committed: stop the trials in flight (no row; their
                    # admissions make resume record them as attempt_lost)
                    self.store_failed = exc
                    self.trip()
            if last:
                self.done_one()
            else:
                self.summary.retried += 1
                self.timers.append(loop.call_later(self.cfg.run.retry_backoff_s * (2**i), self.queue.put_nowait,
                                                   (spec, i + 1)))

    def trip(self) -> None:
        # in-flight trials are cancelled: run_trial raises CancelledError, writes no row
        current = asyncio.current_task()
        for timer in self.timers:
            timer.cancel()
        for job in self.runners:
            if job is not current:
                job.cancel()

    async def drive(self) -> None:
        """Run every trial still to do; raises the first error a runner met, after the others end."""
        todo = self.state.todo
        for spec in todo:
            self.queue.put_nowait((spec, 0))
        n_runners = max(1, min(self.cfg.run.max_in_flight, len(todo)))
        beat = asyncio.create_task(self.heartbeat())
        await self.executor.start()
        phases = asyncio.create_task(self.watch_phases())
        try:
            if todo:
                self.runners.extend(asyncio.create_task(self.runner()) for _ in range(n_runners))
                results = await asyncio.gather(*self.runners, return_exceptions=True)
                stopped = self.breaker.reason is not None or self.store_failed is not None
                self.errors += [r for r in results if isinstance(r, BaseException)
                                and not (stopped and isinstance(r, asyncio.CancelledError))]
            if self.store_failed is not None:
                raise self.store_failed
            if self.errors:
                raise self.errors[0]
        finally:
            beat.cancel()
            phases.cancel()
            with contextlib.suppress(Exception):
                await self.note_phases()  # the peaks of the whole run, for the summary
            for timer in self.timers:
                timer.cancel()
            try:
                self.writer.close()
            finally:
                await self.executor.close()


def _latest_error_class(trials: Any) -> dict[str, str]:
    """trial_key -> error_class of its latest attempt (empty string when none)."""
    latest: dict[str, tuple[int, str]] = {}
    if trials.num_rows:
        for key, attempt, cls in zip(trials.column("trial_key").to_pylist(), trials.column("attempt").to_pylist(),
                                     trials.column("error_class").to_pylist()):
            if attempt >= latest.get(key, (0, ""))[0]:
                latest[key] = (attempt, cls or "")
    return {k: v[1] for k, v in latest.items()}
