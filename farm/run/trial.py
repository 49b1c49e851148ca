"""One trial attempt, end to end: sandbox -> agent -> patch -> grade -> TrialResult.

Every exit path produces exactly one TrialResult with a status from the closed taxonomy, or
raises ``asyncio.CancelledError`` (the run was stopped: no row, the trial stays unfinished and
re-runs on resume). Infrastructure failures never become "unresolved".

This module only conducts: the row and its error classes are farm/run/rows.py, the patch
capture (and the fork-storm kill before it) farm/grade/patch.py, how the attempt is graded
farm/grade/attempt.py.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from farm.agent.predictions import Prediction
from farm.agent.trajectory import Trajectory
from farm.config import FarmConfig
from farm.errors import FarmError
from farm.grade.attempt import close_quietly, grade_attempt, strict_status
from farm.grade.hack_patch import task_test_files
from farm.grade.hack_scan import scan_trial
from farm.grade.harbor import home_tools
from farm.grade.history import HistoryStripError, history_is_the_task, should_seal, should_strip, strip_history
from farm.grade.patch import PatchError, capture_freeing_pids, head_commit, record_untracked_baseline
from farm.run.attribution import AGENT, EXIT_REASONS, SANDBOX_LIMIT, attribute_loss, last_command, loss_message
from farm.run.endpoint import host_port
from farm.run.plan import TrialSpec
from farm.run.predictions import apply_outcome, prediction_for, stage_prediction
from farm.run.rows import (
    CAPTURE_AFTER_KILL,
    HISTORY_STRIP,
    INFRA_EXIT_REASONS,
    INTERNAL_ERROR,
    LOCAL_POLICIES,
    MODEL_ERROR,
    NO_PREDICTION,
    NO_SOLUTION,
    PATCH_CAPTURE,
    PREDICTION_EMPTY,
    PREDICTION_NOT_APPLIED,
    SANDBOX_LOST,
    TrialOutcome,
    agent_error_class,
    base_row,
    fill_agent_counters,
    fill_image,
    start_error_class,
    unsupported_class,
)
from farm.run.serving_facts import ServingFacts
from farm.run.starts import StartGate, default_gate
from farm.sandbox.base import Sandbox, SandboxError, SandboxStartError, limit_events
from farm.sandbox.registry import open_sandbox, refusal_reason
from farm.store.schema import StepRow, TrialResult
from farm.tasks.model import Task, with_networks

# open_sandbox's signature: (task, sandbox config section, *, network, run_id, trial_key, attempt, role)
SandboxFactory = Callable[..., Sandbox]

class _TaskUnsupported(Exception):
    """The task itself cannot be run (``task_unsupported:<reason>``): the same on every attempt."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class _Attempt:
    """One attempt in progress: its row, steps and artifacts, and every sandbox it created."""

    spec: TrialSpec
    task: Task
    cfg: FarmConfig
    attempt: int
    policy: str
    row: TrialResult
    strip: bool  # decided once: the strip and the hack scan agree
    gate: StartGate  # the run's start slots, and where this attempt's phase is counted
    steps: list[StepRow] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)
    used: list[Sandbox] = field(default_factory=list)  # for cleanup and accounting
    # ~/.local/bin's uv, uvx and env before the agent's first step (with a verifier cache)
    image_tools: dict[str, str] | None = None
    prediction: Prediction | None = None  # agent=predictions: the file's entry for this task
    t0: float = field(default_factory=time.monotonic)

    def finish(self, status: str, error_class: str | None = None, error: str | None = None) -> TrialOutcome:
        row = self.row
        patch = self.artifacts.get("patch.diff", b"").decode("utf-8", errors="replace")
        if self.steps or patch:
            # where the automatic setting kept the history (not patch-graded) and the task is about
            # version control, reading it is the work; elsewhere a kept history read is a shortcut
            # the scan flags, and an explicit setting always keeps the rule
            auto_kept = self.cfg.benchmark.strip_history is None and not self.strip
            skip = ("git_history",) if auto_kept and history_is_the_task(self.task) else ()
            scanned = [f.label() for f in scan_trial(self.steps, patch, policy=self.policy, base_commit=row.base_commit,
                                                     skip=skip, tests=task_test_files(self.task))]
            # what grading found before the verifier ran (farm/grade/tamper.py) stays
            row.hack_flags = scanned + [f for f in row.hack_flags if f.endswith("@verifier") and f not in scanned]
            if strict_status(status, row.hack_flags, self.cfg) != status:
                row.tamper_suspect = True  # the patch changes how the tests run: a suspect, as dual grading's
                status = "unresolved"
        row.status = status
        row.error_class = error_class
        row.error = error
        row.finished_at = time.time()
        row.wall_s = time.monotonic() - self.t0
        return TrialOutcome(row, self.steps, self.artifacts)

    async def release(self) -> None:
        """Close every sandbox, then account for them (CPU accounting is final only once a
        sandbox has stopped) and keep their artifacts."""
        row = self.row
        for sb in self.used:
            await close_quietly(sb)
        for sb in self.used:
            for name, data in sb.stats.artifacts.items():
                self.artifacts.setdefault(f"sandbox/{name}", data)
        if self.used:  # the agent's sandbox: which of its limits the commands met (issue 40)
            events = await limit_events(self.used[0])
            row.sandbox_limits = events.hit() if events is not None else []
        cpu = [sb.stats.cpu_s for sb in self.used if sb.stats.cpu_s is not None]
        row.sandbox_cpu_s = sum(cpu) if cpu else None
        if self.used:
            row.api_calls_after_start = self.used[0].stats.api_calls_after_start
            extra = self.used[0].stats.extra  # Kubernetes: the kubelet's Pulled event and spec.nodeName
            row.image_pull_s, row.sandbox_node = extra.get("image_pull_s"), extra.get("node")


async def run_trial(
    spec: TrialSpec,
    task: Task,
    cfg: FarmConfig,
    attempt: int,
    *,
    base_url: str,
    policy: str,
    sandbox_factory: SandboxFactory = open_sandbox,
    chash: str | None = None,
    start_gate: StartGate | None = None,
    serving: ServingFacts | None = None,
) -> TrialOutcome:
    """Run one attempt; ``cfg`` is the arm's config, ``base_url`` the policy endpoint.

    ``chash`` is the arm's config hash when the caller already knows it (hashing a config
    costs milliseconds, per trial that adds up). ``start_gate`` bounds sandbox starts across
    the run (farm/run/starts.py); without one, across this event loop."""
    # the arm's network settings (a strict twin: no egress) apply before the row records them
    task = with_networks(task, cfg.benchmark.agent_network, cfg.benchmark.verifier_network)
    task = with_agent_budget(task, cfg)
    row = base_row(spec, attempt, cfg, task, uuid.uuid4().hex, chash, serving)
    gate = start_gate or default_gate(cfg.run.max_concurrent_starts)
    att = _Attempt(spec, task, cfg, attempt, policy, row, should_strip(task, cfg.benchmark.strip_history), gate)
    factory = functools.partial(sandbox_factory, run_id=spec.run_id, trial_key=spec.trial_key, attempt=attempt)
    try:
        if policy == "predictions":
            att.prediction = prediction_for(cfg, task.task_id)
            if att.prediction is None:  # the plan holds only the file's instances: a file changed under the run
                raise _TaskUnsupported(NO_PREDICTION, f"{cfg.agent.predictions} has no prediction for {task.task_id}")
            row.model = att.prediction.model  # the model that wrote the patch; farm only replays it
            if not att.prediction.patch:  # the harness does not run these either (its empty_patch_ids)
                return att.finish("unresolved", PREDICTION_EMPTY, "the prediction's model_patch is empty: not applied, "
                                  "not graded (the harness counts it as an empty patch)")
        return await _conduct(att, factory, base_url)
    except _TaskUnsupported as exc:
        return att.finish("infra_error", unsupported_class(exc.reason), str(exc))
    except SandboxStartError as exc:  # the fresh verifier sandbox
        return att.finish("infra_error", start_error_class(exc), str(exc))
    except SandboxError as exc:
        return att.finish("infra_error", SANDBOX_LOST, f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a bug must cost one attempt, not the whole run
        return _failed(att, exc)
    finally:
        gate.phase(row.attempt_uid, None)
        await att.release()


def with_agent_budget(task: Task, cfg: FarmConfig) -> Task:
    """``task`` with its agent timeout set to the agent's whole budget (agent.max_total_time_s or
    the task's own, times agent.timeout_multiplier), so that what sizes the sandbox's lifetime
    (a pod's activeDeadlineSeconds: farm/sandbox/relayed/manifests.py) outlasts a 4x budget."""
    from farm.agent.loop import time_budget_s

    budget = time_budget_s(cfg.agent, task)
    return task if budget == task.agent_timeout_s else replace(task, agent_timeout_s=budget)


async def _conduct(att: _Attempt, factory: SandboxFactory, base_url: str) -> TrialOutcome:
    """Start the agent's sandbox, run the agent, capture its patch and grade it."""
    task, row = att.task, att.row
    try:
        sandbox, repo = await _start(att, factory)
    except SandboxError as exc:
        return att.finish("infra_error", start_error_class(exc), str(exc))
    base = await _prepare(att, sandbox, repo)

    traj = await _run_agent(att, sandbox, base_url)
    if traj.exit_reason == "cancelled":
        raise asyncio.CancelledError()
    if traj.exit_reason in INFRA_EXIT_REASONS:
        cls = agent_error_class(traj)
        if cls == SANDBOX_LOST:
            verdict = attribute_loss(await limit_events(sandbox), row.agent_isolation)
            row.loss_cause = verdict.cause
            if verdict.cause == AGENT and verdict.limit is not None:
                # the model's own failure: graded, counted, never retried
                row.exit_reason = EXIT_REASONS[verdict.limit]
                return att.finish("unresolved", f"{SANDBOX_LIMIT}:{verdict.limit}",
                                  loss_message(verdict, traj.error, last_command(traj)))
            return att.finish("infra_error", cls, f"{traj.error} (loss cause {verdict.cause}: {verdict.evidence})")
        return att.finish("infra_error", cls, traj.error)
    if traj.exit_reason == "model_error":
        return att.finish("model_error", MODEL_ERROR, traj.error)
    if att.prediction is not None:
        att.artifacts["prediction.diff"] = att.prediction.patch_bytes()
        applied, output = await apply_outcome(sandbox)
        att.artifacts["prediction-apply.txt"] = output.encode("utf-8", errors="surrogateescape")
        if not applied:  # the model's outcome: the harness never runs the tests of such a patch
            return att.finish("unresolved", PREDICTION_NOT_APPLIED, _not_applied(output))

    att.gate.phase(row.attempt_uid, "grading")  # the patch capture is the first step of grading
    try:
        patch, capture_note = await capture_freeing_pids(sandbox, repo, task.require_git_patch, base,
                                                          task.environment.resources.pids)
    except PatchError as exc:
        return att.finish("infra_error", PATCH_CAPTURE, str(exc))
    if capture_note is not None:
        att.artifacts["patch-capture.txt"] = capture_note.encode("utf-8", errors="replace")
    row.patch_bytes = len(patch.encode("utf-8", errors="surrogateescape"))
    att.artifacts["patch.diff"] = patch.encode("utf-8", errors="surrogateescape")

    grade = await grade_attempt(task, att.cfg, sandbox, patch, factory,
                                row=row, artifacts=att.artifacts, used=att.used, image_tools=att.image_tools)
    if not grade.valid:
        return att.finish("infra_error", grade.error_class, grade.error)
    # a graded row keeps the note that its processes were killed to capture the patch
    return att.finish("resolved" if grade.resolved else "unresolved",
                      CAPTURE_AFTER_KILL if capture_note else None, capture_note)


async def _start(att: _Attempt, factory: SandboxFactory) -> tuple[Sandbox, str]:
    """The agent's sandbox, started, and the repository the agent works in.

    Raises:
        SandboxError: the sandbox did not start (or was lost while the workspace was prepared).
    """
    task, row = att.task, att.row
    # benchmark.agent_network (a strict twin's no-network) is passed on explicitly: it must win over
    # a backend's own default (sandbox.kubernetes.agent_network), which only the task's setting yields to
    sandbox = factory(task, att.cfg.sandbox, network=att.cfg.benchmark.agent_network, role="agent")
    att.used.append(sandbox)
    uid = row.attempt_uid
    att.gate.phase(uid, "waiting", task.task_id)
    async with att.gate.slot(uid):
        att.gate.phase(uid, "starting")
        # the start's steps (engine build, agent ping, a replayed RUN) reach the progress line
        sandbox.stats.on_step = functools.partial(att.gate.step, uid)
        if sandbox.stats.step:  # a step noted before we listened
            att.gate.step(uid, sandbox.stats.step)
        row.sandbox_started_at = time.time()
        try:
            await sandbox.start()
        finally:
            sandbox.stats.on_step = None
    att.gate.phase(uid, "running")
    repo = task.workdir
    if task.verifier.protocol == "patcheval":
        from farm.grade.patcheval import prepare_workspace

        # the repository may sit below the workspace (/workspace/<project>)
        repo = await prepare_workspace(sandbox, task)
    row.sandbox_start_s = sandbox.stats.start_s
    row.api_calls_start = sandbox.stats.api_calls_start
    row.agent_isolation = sandbox.stats.isolation
    fill_image(row, sandbox.stats.image)
    return sandbox, repo


async def _prepare(att: _Attempt, sandbox: Sandbox, repo: str) -> str | None:
    """Ready the workspace for the agent's first step; the commit its patch is taken against.

    Raises:
        _TaskUnsupported: the task's repository cannot be stripped, or an oracle has no solution.
    """
    task, row = att.task, att.row
    if att.strip:
        # before the agent's first step: the fix must not be one `git log --all` away
        try:
            stripped = await strip_history(sandbox, repo, seal=should_seal(task, att.cfg.benchmark.seal_history))
        except HistoryStripError as exc:  # the task's repository is broken: the same every time
            raise _TaskUnsupported(HISTORY_STRIP, str(exc)) from exc
        row.base_commit = stripped.base_commit
        if stripped.repo:
            row.history_refs_removed, row.history_objects_removed = stripped.refs_removed, stripped.objects_removed
            row.history_sealed = stripped.sealed
    # the patch is taken against the commit the agent started from, so a commit is in it too
    base = row.base_commit or await head_commit(sandbox, repo)
    if base is not None:
        await record_untracked_baseline(sandbox, repo)  # what the image had is no part of the patch
    if att.cfg.grade.verifier_cache.dir:
        # the staging keeps only these as the image's: an agent's uv or env there would run
        # inside the in-place verifier (farm/grade/harbor.py stage_verifier_cache)
        att.image_tools = await home_tools(sandbox)

    if att.policy == "oracle" or (att.policy == "scripted" and task.solution_dir is not None):
        # scripted policies may replay the reference solution too (dry runs of experiments)
        if task.solution_dir is None:
            raise _TaskUnsupported(NO_SOLUTION, f"task {task.task_id} ships no solution/solve.sh")
        await sandbox.upload(task.solution_dir, "/solution")
    if att.prediction is not None:
        await stage_prediction(sandbox, att.prediction)
    return base


async def _run_agent(att: _Attempt, sandbox: Sandbox, base_url: str) -> Trajectory:
    """The agent loop against the policy endpoint at ``base_url``; its steps are kept as they
    come, its counters filled into the row."""
    from farm.agent.llm import LLMClient
    from farm.agent.loop import run_agent, time_budget_s

    spec, task, cfg, row, policy = att.spec, att.task, att.cfg, att.row, att.policy
    # the task's agent timeout is already the whole budget (with_agent_budget): not multiplied twice
    agent_cfg = replace(cfg.agent, max_total_time_s=task.agent_timeout_s, timeout_multiplier=1.0)
    # the budget the agent ran under, so a report can pair a 1x and a 4x arm from the rows alone
    row.timeout_multiplier, row.agent_budget_s = cfg.agent.timeout_multiplier, time_budget_s(agent_cfg, task)
    # a local policy is asked for by its own id, which is also the id it answers with
    model_cfg = replace(cfg.model, base_url=base_url, name=policy if policy in LOCAL_POLICIES else cfg.model.name)
    row.endpoint = host_port(base_url)
    llm = LLMClient(model_cfg, session_id=spec.trial_key, task_id=task.task_id)

    async def on_step(record: Any) -> None:
        att.steps.append(record.to_row(spec.run_id, spec.trial_key, att.attempt))

    try:
        traj = await run_agent(task, sandbox, llm, agent_cfg, session_id=spec.trial_key, on_step=on_step)
    finally:
        # a prediction's row names the model that wrote the patch, not the policy replaying it
        row.model = att.prediction.model if att.prediction else (",".join(llm.served_models) or None)
        close = getattr(llm, "aclose", None) or getattr(llm, "close", None)
        if close is not None:
            res = close()
            if asyncio.iscoroutine(res):
                await res
    for s in att.steps:
        s.attempt_uid = row.attempt_uid
    fill_agent_counters(row, traj)
    return traj


def _not_applied(output: str) -> str:
    tail = " ".join(output.strip().splitlines()[-4:])[-400:]
    return f"the prediction's patch did not apply with any of the harness's commands: {tail or 'no output'}"


def _failed(att: _Attempt, exc: Exception) -> TrialOutcome:
    """The row of an attempt that raised: a refusal of the task, or a bug in farm."""
    reason = refusal_reason(exc) if isinstance(exc, FarmError) else None
    if reason is not None:  # the task itself (its files, its image): deterministic, never retried
        return att.finish("infra_error", unsupported_class(reason), str(exc))
    import traceback

    att.artifacts["traceback.txt"] = "".join(traceback.format_exception(exc)).encode("utf-8", errors="replace")
    summary = (str(exc).strip().splitlines() or [""])[0][:300]
    return att.finish("infra_error", INTERNAL_ERROR,
                      f"{type(exc).__name__}: {summary} (traceback in artifacts/traceback.txt)")
