"""A trial attempt's row: how it starts (``base_row``), what fills it, and its error classes.

``TrialResult.status`` is one of four (farm/store/schema.py); ``error_class`` names the finer
cause inside it. The classes a trial, a worker, the preflight or a regrade writes are named
here (the verifier's own in farm/grade/harbor.py), so every writer and reader spells them the
same way. The driver (retries, the circuit breaker), the preflight (refusals), the workers (a
lost worker) and the conductor (farm/run/trial.py) all build rows from these helpers.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import farm
from farm.agent.tools import prompt_columns
from farm.agent.trajectory import ExitReason, Trajectory
from farm.config import FarmConfig, config_hash, resolved_agent
from farm.grade.harbor import VERIFIER_CACHE, VERIFIER_SETUP
from farm.run.endpoint import host_port
from farm.run.plan import TrialSpec
from farm.run.serving_facts import ServingFacts, fill_serving, preset_facts
from farm.sandbox.base import ImageProvenance, SandboxError, SandboxLostError
from farm.store.schema import StepRow, TrialResult
from farm.tasks.model import Task

# --- error classes (TrialResult.error_class) ----------------------------------------------------
# the sandbox did not start: ``sandbox_start:<reason>`` where the backend knows why
SANDBOX_START = "sandbox_start"
# a sandbox (the agent's or a verifier's) went away while the trial used it
SANDBOX_LOST = "sandbox_lost"
# the agent's patch could not be captured: the attempt cannot be graded fairly
PATCH_CAPTURE = "patch_capture"
# a bug in farm: one attempt lost, the traceback kept in the attempt's artifacts
INTERNAL_ERROR = "internal_error"
# the process running the trial died (a Ray actor lost): written by the driver's executor
WORKER_LOST = "worker_lost"
# an attempt admitted (its agent started) that never got a row: the driver died or the run was
# stopped while it ran. Written on resume, before the trial is drawn again (farm/run/driver.py)
ATTEMPT_LOST = "attempt_lost"
# the endpoint answered with something that is not a chat completion (status model_error too)
MODEL_ERROR = "model_error"
# the endpoint failed after the SDK's retries; the sandbox failed under a tool call. Both are
# exit reasons of the agent loop recorded as the class of an infra_error.
LLM_QUERY_ERROR: ExitReason = "llm_query_error"
TOOL_ERROR: ExitReason = "tool_error"
# a *graded* row whose patch was captured only after the agent's leftover processes were killed
# (they held the pids farm needs: a fork storm of the agent's own)
CAPTURE_AFTER_KILL = "patch_capture_after_kill"
# *unresolved* rows of agent=predictions whose patch the verifier never saw, as the harness
# counts them: the file's model_patch is empty (its empty_patch_ids: not run), or none of the
# harness's apply commands applied it (its "Patch Apply Failed": an error, never resolved)
PREDICTION_EMPTY = "prediction_empty"
PREDICTION_NOT_APPLIED = "prediction_not_applied"
# ``task_unsupported:<reason>``: a property of the task (its files, its image), not a hiccup;
# recorded once, never retried
UNSUPPORTED = "task_unsupported"
# reasons of task_unsupported the trial finds itself (the backends and the preflight name others)
HISTORY_STRIP = "history_strip"
NO_SOLUTION = "no_solution"
NO_PREDICTION = "no_prediction"

# Agent exit reasons that mean the infrastructure (endpoint, sandbox transport) failed.
INFRA_EXIT_REASONS: frozenset[ExitReason] = frozenset({LLM_QUERY_ERROR, TOOL_ERROR})

# infra_error classes an attempt-level retry cannot fix: a build of the same content fails the
# same way (the engine's build, or a replayed build step on the local backend or under
# image_policy=pull; the local FROM python environment), and a verifier that could not set
# itself up was already re-run without the agent (grade.verifier_retries) — another attempt
# would only pay for a second agent run; a verifier cache that is not a cache is the run's
# configuration
NOT_RETRYABLE = frozenset({f"{SANDBOX_START}:image_build", f"{SANDBOX_START}:build_step",
                           f"{SANDBOX_START}:python_env", VERIFIER_SETUP, VERIFIER_CACHE})

# policies farm answers itself, through a real HTTP server per process (farm/agent/policies)
LOCAL_POLICIES = ("oracle", "nop", "scripted", "predictions")


@dataclass
class TrialOutcome:
    """What a worker sends back to the driver: the row, its steps and its artifacts."""

    result: TrialResult
    steps: list[StepRow] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)


def unsupported_class(reason: str) -> str:
    return f"{UNSUPPORTED}:{reason}"


def is_unsupported(error_class: str | None) -> bool:
    """Whether ``error_class`` is a ``task_unsupported:<reason>`` (a refusal, never retried)."""
    return (error_class or "").startswith(UNSUPPORTED + ":")


def start_error_class(exc: SandboxError) -> str:
    """``sandbox_start:<reason>`` when the backend knows why the start failed."""
    reason = getattr(exc, "reason", None)
    return f"{SANDBOX_START}:{reason}" if reason else SANDBOX_START


def agent_error_class(traj: Trajectory) -> str:
    """The error class of an agent run that ended in an infrastructure exit reason: a sandbox
    lost under a tool call is named so (decided on the exception's type, which the loop
    carries), not folded into ``tool_error``."""
    lost = traj.exit_reason == TOOL_ERROR and traj.tool_error_type is not None \
        and issubclass(traj.tool_error_type, SandboxLostError)
    return SANDBOX_LOST if lost else traj.exit_reason


def retryable(row: TrialResult) -> bool:
    """Only infrastructure hiccups are retried; a task the backend refuses stays refused."""
    cls = row.error_class or ""
    return row.status == "infra_error" and not is_unsupported(cls) and cls not in NOT_RETRYABLE


def endpoint_origin(cfg: FarmConfig) -> str:
    """Who served the endpoint: farm's policy server, farm's own Ray Serve, or someone else."""
    if resolved_agent(cfg) in LOCAL_POLICIES:
        return "farm-policy"
    return "farm-serve" if cfg.serve.enabled else "external"


def base_row(spec: TrialSpec, attempt: int, cfg: FarmConfig, task: Task, uid: str,
             chash: str | None = None, serving: ServingFacts | None = None) -> TrialResult:
    """The row an attempt starts from; ``serving`` is what the driver asked the arm's endpoint
    (farm/run/serving_facts.py), else what the config alone says."""
    # model stays null until the endpoint answers: a row never names a model that did not answer;
    # a prediction's model is the file's, which the plan carries (farm/run/predictions.py plan_model)
    policy = resolved_agent(cfg)
    row = TrialResult(
        run_id=spec.run_id, trial_key=spec.trial_key, benchmark=spec.benchmark, task_id=spec.task_id,
        seed=spec.seed, arm=spec.arm, attempt=attempt, model=spec.model if policy == "predictions" else None,
        status="infra_error",
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
    fill_serving(row, serving if serving is not None else preset_facts(cfg))
    return row


def ended_row(row: TrialResult, error_class: str, error: str) -> TrialResult:
    """``row`` as the one row of an attempt that never ran (refused, or its worker lost)."""
    row.status = "infra_error"
    row.error_class = error_class
    row.error = error
    row.finished_at = time.time()
    return row


def script_sha256(cfg: FarmConfig) -> str | None:
    """The content hash of the file that drives a farm policy: the scripted policy's
    ``agent.script``, the predictions policy's ``agent.predictions``; None for any other policy,
    or when the file cannot be read (the policy then fails with the file's own error)."""
    policy = resolved_agent(cfg)
    path = cfg.agent.script if policy == "scripted" else cfg.agent.predictions if policy == "predictions" else None
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()
    except OSError:
        return None


def fill_agent_counters(row: TrialResult, traj: Trajectory) -> None:
    counters = traj.counters
    for name in ("steps", "tool_calls", "tool_calling_turns", "parallel_call_turns", "tool_parse_failures",
                 "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "llm_s", "tool_s"):
        setattr(row, name, getattr(counters, name))
    row.queue_s_total = counters.queue_s
    row.generation_s_total = counters.generation_s
    row.context_tokens = traj.context_tokens
    row.reasoning_field = traj.reasoning_field
    row.exit_reason = traj.exit_reason


def fill_image(row: TrialResult, image: ImageProvenance | None) -> None:
    if image is None:
        return
    row.image_source, row.image_id, row.image_build_s = image.source, image.image_id, image.build_s
    if image.ref:  # what ran, not what the task or the image lock named (a build runs its own tag)
        row.image = image.ref
    row.base_image_standin, row.image_unfaithful = image.base_standin, image.unfaithful
