"""One trial attempt, end to end: sandbox -> agent -> patch -> grade -> TrialResult.

Every exit path produces exactly one TrialResult with a status from the closed taxonomy, or
raises ``asyncio.CancelledError`` (the run was stopped: no row, the trial stays unfinished and
re-runs on resume). Infrastructure failures never become "unresolved".
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import socket
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import farm
from farm.agent.tools import prompt_columns
from farm.config import FarmConfig, config_hash, resolved_agent
from farm.errors import FarmError
from farm.grade.hack_scan import scan_steps
from farm.grade.harbor import GradeResult, run_harbor_verifier
from farm.grade.history import HistoryStripError, should_strip, strip_history
from farm.grade.patch import PatchError, apply_patch, capture_patch, head_commit
from farm.run.endpoint import host_port
from farm.run.plan import TrialSpec
from farm.sandbox.base import (
    ImageProvenance,
    Sandbox,
    SandboxClosedError,
    SandboxError,
    SandboxLostError,
    SandboxStartError,
)
from farm.sandbox.registry import open_sandbox, refusal_reason
from farm.store.schema import StepRow, TrialResult
from farm.tasks.model import Task

# open_sandbox's signature: (task, sandbox config section, *, network, run_id, trial_key, attempt, role)
SandboxFactory = Callable[..., Sandbox]

# Agent exit reasons that mean the infrastructure (endpoint, sandbox transport) failed.
INFRA_EXIT_REASONS = frozenset({"llm_query_error", "tool_error"})
_LOST_SANDBOX = frozenset({"SandboxLostError", "ReconnectBudgetError", "SandboxOutOfMemoryError"})
# infra_error classes that are properties of the task, not hiccups: retrying cannot help
UNSUPPORTED = "task_unsupported"
# policies farm answers itself, through a real HTTP server per process (farm/agent/policies)
LOCAL_POLICIES = ("oracle", "nop", "scripted")


@dataclass
class TrialOutcome:
    """What a worker sends back to the driver: the row, its steps and its artifacts."""

    result: TrialResult
    steps: list[StepRow] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)


def unsupported_class(reason: str) -> str:
    return f"{UNSUPPORTED}:{reason}"


def start_error_class(exc: SandboxError) -> str:
    """``sandbox_start:<reason>`` when the backend knows why the start failed."""
    reason = getattr(exc, "reason", None)
    return f"sandbox_start:{reason}" if reason else "sandbox_start"


# infra_error classes an attempt-level retry cannot fix: a build of the same content fails the
# same way, and a verifier that could not set itself up was already re-run without the agent
# (grade.verifier_retries) — another attempt would only pay for a second agent run; a verifier
# cache that is not a cache is the run's configuration
NOT_RETRYABLE = frozenset({"sandbox_start:image_build", "verifier_setup", "verifier_cache"})


def retryable(row: TrialResult) -> bool:
    """Only infrastructure hiccups are retried; a task the backend refuses stays refused."""
    cls = row.error_class or ""
    return row.status == "infra_error" and not cls.startswith(UNSUPPORTED + ":") and cls not in NOT_RETRYABLE


def endpoint_origin(cfg: FarmConfig) -> str:
    """Who served the endpoint: farm's policy server, farm's own Ray Serve, or someone else."""
    if resolved_agent(cfg) in LOCAL_POLICIES:
        return "farm-policy"
    return "farm-serve" if cfg.serve.enabled else "external"


def base_row(spec: TrialSpec, attempt: int, cfg: FarmConfig, task: Task, uid: str,
              chash: str | None = None) -> TrialResult:
    # model stays null until the endpoint answers: a row never names a model that did not answer
    policy = resolved_agent(cfg)
    return TrialResult(
        run_id=spec.run_id, trial_key=spec.trial_key, benchmark=spec.benchmark, task_id=spec.task_id,
        seed=spec.seed, arm=spec.arm, attempt=attempt, model=None, status="infra_error",
        policy=policy, model_preset=cfg.model.name, endpoint_origin=endpoint_origin(cfg),
        endpoint=None if policy in LOCAL_POLICIES else host_port(cfg.model.base_url),
        grading_mode=cfg.grade.mode, image=task.environment.image, sandbox_backend=cfg.sandbox.backend,
        agent_network=task.agent_network, verifier_network=task.verifier_network,
        dataset_revision=task.source.revision or None, harness="leaf", harness_version=farm.__version__,
        config_hash=chash or config_hash(cfg), farm_version=farm.__version__,
        worker=f"{socket.gethostname()}:{os.getpid()}", attempt_uid=uid, started_at=time.time(),
        **prompt_columns(cfg.agent.system_prompt_file, cfg.agent.tools_file),
        agent_script_sha256=script_sha256(cfg), agent_compat=cfg.agent.compat,
    )


def script_sha256(cfg: FarmConfig) -> str | None:
    """The content hash of the scripted policy's ``agent.script``; None for any other policy, or
    when the file cannot be read (the policy server then fails with the file's own error)."""
    if resolved_agent(cfg) != "scripted" or not cfg.agent.script:
        return None
    try:
        return hashlib.sha256(Path(cfg.agent.script).expanduser().read_bytes()).hexdigest()
    except OSError:
        return None


def _fill_agent_counters(row: TrialResult, traj: Any) -> None:
    counters = traj.counters
    for name in ("steps", "tool_calls", "tool_calling_turns", "parallel_call_turns", "tool_parse_failures",
                 "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "llm_s", "tool_s"):
        setattr(row, name, getattr(counters, name))
    row.context_tokens = traj.context_tokens
    row.reasoning_field = traj.reasoning_field
    row.exit_reason = traj.exit_reason


def _status(grade: GradeResult) -> str:
    return "infra_error" if not grade.valid else "resolved" if grade.resolved else "unresolved"


def _fill_image(row: TrialResult, image: ImageProvenance | None) -> None:
    if image is None:
        return
    row.image_source, row.image_id, row.image_build_s = image.source, image.image_id, image.build_s
    row.base_image_standin, row.image_unfaithful = image.base_standin, image.unfaithful


# keyed by the loop itself, weakly: an id() of a closed loop can come back for a new one, whose
# trials would then wait on a semaphore bound to the dead loop
_start_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _start_gate(limit: int) -> asyncio.Semaphore:
    """One semaphore per event loop (a worker process may host several loops over its life)."""
    loop = asyncio.get_running_loop()
    gate = _start_gates.get(loop)
    if gate is None:
        gate = _start_gates[loop] = asyncio.Semaphore(limit)
    return gate


async def _close_quietly(sandbox: Sandbox | None) -> None:
    if sandbox is None:
        return
    try:
        await sandbox.close()
    except Exception:  # noqa: BLE001 - closing must never mask the trial's own outcome
        pass


def grading_mode(task: Task, cfg: FarmConfig, sandbox: Sandbox | None) -> str:
    """``in_place``, ``fresh`` or ``both`` for this task: in place only when the agent's sandbox can be
    given the verifier's network (per-phase network, harbor-tasks.md §1.4); otherwise a fresh
    verifier sandbox started with the verifier's network grades the captured patch."""
    if task.verifier.protocol == "patcheval" or cfg.grade.mode == "fresh":
        return "fresh"
    if sandbox is not None and task.verifier_network != task.agent_network and not sandbox.capabilities.set_network:
        return "fresh"
    # both: in place (the vendor's verdict), then fresh from the patch as a tamper check
    return "both" if cfg.grade.mode == "both" else "in_place"


async def _grade(
    task: Task, cfg: FarmConfig, sandbox: Sandbox | None, patch: str, factory: Callable[..., Sandbox]
) -> tuple[GradeResult, Sandbox | None]:
    """Grade once: in ``sandbox`` when given (in place), else in a fresh verifier sandbox that
    is returned for the caller to account for and close."""
    if task.verifier.protocol == "patcheval":
        # PatchEval grades the patch in a fresh sandbox with its own fix-run.sh (grading.md §3)
        from farm.grade.patcheval import grade as patcheval_grade

        verdict = await patcheval_grade(lambda t, role: factory(t, cfg.sandbox, network=t.verifier_network, role=role),
                                        task, patch)
        return GradeResult(verdict.reward, verdict.resolved, verdict.output, None, None, verdict.verify_s), None
    cache = cfg.grade.verifier_cache
    if sandbox is not None:
        if task.verifier_network != task.agent_network:
            await sandbox.set_network(task.verifier_network)  # grading_mode chose in place only if it can
        kill = task.require_git_patch if cfg.grade.kill_leftovers is None else cfg.grade.kill_leftovers
        return await run_harbor_verifier(task, sandbox, cache, kill_leftovers=kill), None
    # fresh: nothing the agent did outside its patch can influence the verdict
    fresh = factory(task, cfg.sandbox, network=task.verifier_network, role="verifier")
    try:
        await fresh.start()
    except BaseException:
        await _close_quietly(fresh)
        raise
    try:
        ok, out = await apply_patch(fresh, task.workdir, patch)
        if not ok:
            return GradeResult(0.0, False, out, None, None), fresh
        return await run_harbor_verifier(task, fresh, cache), fresh
    except BaseException:  # a lost verifier sandbox: nobody else holds it to close it
        await _close_quietly(fresh)
        raise


async def grade_retrying(task: Task, cfg: FarmConfig, sandbox: Sandbox | None, patch: str,
                         factory: Callable[..., Sandbox], used: list[Sandbox]) -> tuple[GradeResult, list[str]]:
    """Grade, re-running only the verifier while it could not set itself up (up to
    ``grade.verifier_retries`` more times): in place on ``sandbox`` when given, else each run in
    a new verifier sandbox from the captured patch (appended to ``used``, closed before the
    next one starts). Returns the last result, with ``runs`` and the summed ``duration_s``,
    and every run's output."""
    outputs: list[str] = []
    total = 0.0
    while True:
        grade, verifier_sandbox = await _grade(task, cfg, sandbox, patch, factory)
        outputs.append(grade.output)
        total += grade.duration_s
        if verifier_sandbox is not None:
            used.append(verifier_sandbox)
            await _close_quietly(verifier_sandbox)
        if grade.error_class != "verifier_setup" or len(outputs) > cfg.grade.verifier_retries:
            break
    error = grade.error
    if error is not None and len(outputs) > 1:
        error = f"{error} (verifier ran {len(outputs)} times)"
    return replace(grade, runs=len(outputs), duration_s=total, error=error), outputs


async def grade_patch(task: Task, cfg: FarmConfig, patch: str, factory: Callable[..., Sandbox]) -> GradeResult:
    """Fresh grading of a captured patch exactly as a trial does it, verifier retries included
    (``farm regrade``). ``factory`` is open_sandbox's signature with the trial's ids bound."""
    used: list[Sandbox] = []
    try:
        grade, _ = await grade_retrying(task, cfg, None, patch, factory, used)
    finally:
        for sb in used:
            await _close_quietly(sb)
    return grade


# error_class of a *graded* row whose patch was captured only after the agent's leftover
# processes were killed (they held the pids farm needs: a fork storm of the agent's own)
CAPTURE_AFTER_KILL = "patch_capture_after_kill"
# the processes the agent's commands left, counted from inside with bash builtins only (no fork
# beyond the shell itself); inside the jail /proc is the commands' namespace's
COUNT_PROCESSES = "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n"


def pid_reserve(limit: int) -> int:
    """The pids of a sandbox kept for farm's own commands (capture, verifier): a quarter, at
    least 32. Leftovers holding more than ``limit - pid_reserve(limit)`` are no daemon."""
    return max(32, limit // 4)


async def capture_freeing_pids(sandbox: Sandbox, repo: str, require_git: bool, base: str | None,
                               pids_limit: int) -> tuple[str, str | None]:
    """The agent's patch, and a note when the agent's leftovers had to be killed first (None
    when they did not).

    The agent's commands may hold (nearly) every pid the sandbox has (a fork storm), so that
    ``git`` cannot start, or starts only now and then: where a count of their processes cannot
    start, or finds them holding the pids kept for farm (``pid_reserve``), or the capture fails,
    the leftovers are killed (``Sandbox.kill_leftovers``) and the patch is captured once more,
    so the agent's own storm ends graded, not retried as an infrastructure error. Nothing is
    killed otherwise: an in-place verifier may test a daemon the agent started (Terminal-Bench).

    Raises:
        PatchError: the capture failed after the kill too.
        SandboxLostError, SandboxClosedError: the sandbox is gone.
    """
    probe = await sandbox.exec(COUNT_PROCESSES, timeout_s=30, cwd="/")
    held = probe.stdout.strip()
    if probe.exit_code != 0 or probe.timed_out or not held.isdigit():
        problem = f"no command could start (exit {probe.exit_code}: {probe.output.strip()[-300:]})"
    elif pids_limit > 0 and int(held) > pids_limit - pid_reserve(pids_limit):
        problem = f"the agent's commands held {held} processes, of the sandbox's {pids_limit} pids"
    else:
        try:
            return await capture_patch(sandbox, repo, require_git, base=base), None
        except PatchError as exc:
            problem = f"patch capture failed ({exc})"
    try:
        what = f"killed {await sandbox.kill_leftovers()} processes the agent's commands left"
    except (SandboxLostError, SandboxClosedError):
        raise
    except SandboxError as exc:  # some survived the kill: the capture may work all the same
        what = f"killing the agent's leftover processes was incomplete ({exc})"
    try:
        patch = await capture_patch(sandbox, repo, require_git, base=base)
    except PatchError as exc:
        raise PatchError(f"{exc} (after {what}; before that: {problem})") from exc
    return patch, f"{problem}; {what}, then captured the patch"


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
) -> TrialOutcome:
    """Run one attempt; ``cfg`` is the arm's config, ``base_url`` the policy endpoint.

    ``chash`` is the arm's config hash when the caller already knows it (hashing a config
    costs milliseconds, per trial that adds up)."""
    from farm.agent.llm import LLMClient
    from farm.agent.loop import run_agent

    uid = uuid.uuid4().hex
    row = base_row(spec, attempt, cfg, task, uid, chash)
    t0 = time.monotonic()
    steps: list[StepRow] = []
    artifacts: dict[str, bytes] = {}
    sandbox: Sandbox | None = None
    used: list[Sandbox] = []  # every sandbox this attempt created, for cleanup and accounting

    strip = should_strip(task, cfg.benchmark.strip_history)  # decided once: the strip and the scan agree

    def finish(status: str, error_class: str | None = None, error: str | None = None) -> TrialOutcome:
        if steps:
            # where the automatic setting judged the history part of the task (not patch-graded,
            # so not stripped), reading it is no shortcut; an explicit setting keeps the rule
            auto_kept = cfg.benchmark.strip_history is None and not strip
            skip = ("git_history",) if auto_kept else ()
            row.hack_flags = [f.label() for f in scan_steps(steps, policy=policy, base_commit=row.base_commit,
                                                            skip=skip)]
        row.status = status
        row.error_class = error_class
        row.error = error
        row.finished_at = time.time()
        row.wall_s = time.monotonic() - t0
        return TrialOutcome(row, steps, artifacts)

    factory = functools.partial(sandbox_factory, run_id=spec.run_id, trial_key=spec.trial_key, attempt=attempt)
    try:
        try:
            sandbox = factory(task, cfg.sandbox, role="agent")
            used.append(sandbox)
            async with _start_gate(cfg.run.max_concurrent_starts):
                await sandbox.start()
            repo = task.workdir
            if task.verifier.protocol == "patcheval":
                from farm.grade.patcheval import prepare_workspace

                # the repository may sit below the workspace (/workspace/<project>)
                repo = await prepare_workspace(sandbox, task)
        except SandboxError as exc:
            return finish("infra_error", start_error_class(exc), str(exc))
        row.sandbox_start_s = sandbox.stats.start_s
        row.api_calls_start = sandbox.stats.api_calls_start
        row.agent_isolation = sandbox.stats.isolation
        _fill_image(row, sandbox.stats.image)
        if strip:
            # before the agent's first step: the fix must not be one `git log --all` away
            try:
                stripped = await strip_history(sandbox, repo)
            except HistoryStripError as exc:  # the task's repository is broken: the same every time
                return finish("infra_error", unsupported_class("history_strip"), str(exc))
            row.base_commit = stripped.base_commit
            if stripped.repo:
                row.history_refs_removed, row.history_objects_removed = stripped.refs_removed, \
                    stripped.objects_removed
        # the patch is taken against the commit the agent started from, so a commit is in it too
        base = row.base_commit or await head_commit(sandbox, repo)

        if policy == "oracle" or (policy == "scripted" and task.solution_dir is not None):
            # scripted policies may replay the reference solution too (dry runs of experiments)
            if task.solution_dir is None:
                return finish("infra_error", unsupported_class("no_solution"),
                              f"task {task.task_id} ships no solution/solve.sh")
            await sandbox.upload(task.solution_dir, "/solution")

        agent_cfg = cfg.agent
        if agent_cfg.max_total_time_s is None:
            agent_cfg = replace(agent_cfg, max_total_time_s=task.agent_timeout_s)
        # a local policy is asked for by its own id, which is also the id it answers with
        model_cfg = replace(cfg.model, base_url=base_url,
                            name=policy if policy in LOCAL_POLICIES else cfg.model.name)
        row.endpoint = host_port(base_url)
        llm = LLMClient(model_cfg, session_id=spec.trial_key, task_id=task.task_id)

        async def on_step(record: Any) -> None:
            steps.append(record.to_row(spec.run_id, spec.trial_key, attempt))

        try:
            traj = await run_agent(task, sandbox, llm, agent_cfg, session_id=spec.trial_key, on_step=on_step)
        finally:
            row.model = ",".join(llm.served_models) or None
            close = getattr(llm, "aclose", None) or getattr(llm, "close", None)
            if close is not None:
                res = close()
                if asyncio.iscoroutine(res):
                    await res
        for s in steps:
            s.attempt_uid = uid
        _fill_agent_counters(row, traj)
        if traj.exit_reason == "cancelled":
            raise asyncio.CancelledError()
        if traj.exit_reason in INFRA_EXIT_REASONS:
            error = getattr(traj, "error", None)
            # a sandbox lost under a tool call is named so, not folded into "tool_error"
            lost = traj.exit_reason == "tool_error" and (error or "").split(":", 1)[0] in _LOST_SANDBOX
            return finish("infra_error", "sandbox_lost" if lost else traj.exit_reason, error)
        if traj.exit_reason == "model_error":
            return finish("model_error", "model_error", getattr(traj, "error", None))

        try:
            patch, capture_note = await capture_freeing_pids(sandbox, repo, task.require_git_patch, base,
                                                              task.environment.resources.pids)
        except PatchError as exc:
            return finish("infra_error", "patch_capture", str(exc))
        if capture_note is not None:
            artifacts["patch-capture.txt"] = capture_note.encode("utf-8", errors="replace")
        row.patch_bytes = len(patch.encode("utf-8", errors="surrogateescape"))
        artifacts["patch.diff"] = patch.encode("utf-8", errors="surrogateescape")

        mode = grading_mode(task, cfg, sandbox)
        row.grading_mode = mode
        if mode == "fresh":
            await _close_quietly(sandbox)  # free its resources before the verifier's sandbox starts
            sandbox = None
        grade, outputs = await grade_retrying(task, cfg, sandbox, patch, factory, used)
        for i, text in enumerate(outputs, 1):
            artifacts["verifier.txt" if i == 1 else f"verifier-{i}.txt"] = text.encode("utf-8", errors="replace")
        row.verifier_runs = grade.runs
        row.verify_s = grade.duration_s
        row.reward = grade.reward
        if mode == "both":
            await _close_quietly(sandbox)
            sandbox = None
            fresh, fresh_outputs = await grade_retrying(task, cfg, None, patch, factory, used)
            for i, text in enumerate(fresh_outputs, 1):
                artifacts[f"verifier-fresh-{i}.txt"] = text.encode("utf-8", errors="replace")
            row.verifier_runs += fresh.runs
            row.verify_s += fresh.duration_s
            row.fresh_status = _status(fresh)
            # resolved where the agent worked, not from its patch alone: something outside the
            # patch (a process, an ignored file, the environment) made the difference
            row.tamper_suspect = grade.valid and grade.resolved and fresh.valid and not fresh.resolved
        if not grade.valid:
            return finish("infra_error", grade.error_class, grade.error)
        # a graded row keeps the note that its processes were killed to capture the patch
        return finish("resolved" if grade.resolved else "unresolved",
                      CAPTURE_AFTER_KILL if capture_note else None, capture_note)
    except SandboxStartError as exc:  # the fresh verifier sandbox
        return finish("infra_error", start_error_class(exc), str(exc))
    except SandboxError as exc:
        return finish("infra_error", "sandbox_lost", f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a bug must cost one attempt, not the whole run
        reason = refusal_reason(exc) if isinstance(exc, FarmError) else None
        if reason is not None:  # the task itself (its files, its image): deterministic, never retried
            return finish("infra_error", unsupported_class(reason), str(exc))
        import traceback

        artifacts["traceback.txt"] = "".join(traceback.format_exception(exc)).encode("utf-8", errors="replace")
        summary = (str(exc).strip().splitlines() or [""])[0][:300]
        return finish("infra_error", "internal_error",
                      f"{type(exc).__name__}: {summary} (traceback in artifacts/traceback.txt)")
    finally:
        # close first: CPU accounting is final only once a sandbox has stopped
        for sb in used:
            await _close_quietly(sb)
        for sb in used:
            for name, data in sb.stats.artifacts.items():
                artifacts.setdefault(f"sandbox/{name}", data)
        cpu = [sb.stats.cpu_s for sb in used if sb.stats.cpu_s is not None]
        row.sandbox_cpu_s = sum(cpu) if cpu else None
        if used:
            row.api_calls_after_start = used[0].stats.api_calls_after_start
            extra = used[0].stats.extra  # Kubernetes: the kubelet's Pulled event and spec.nodeName
            row.image_pull_s, row.sandbox_node = extra.get("image_pull_s"), extra.get("node")
