"""Preflight: everything checked before the first trial starts.

* the tasks the chosen backend can never run (below);
* ``check_engines``: the container engine answers (``docker info``), in its own words when not;
* ``run_preflight``: every arm's endpoint (farm/run/endpoint.py) -- farm's own policy servers
  included -- and one real sandbox start per sandbox section. A failure raises PreflightError
  (one line naming the URL or the cause; ``farm run`` exits 3) and no trial runs.

A refused image, a Dockerfile step the backend cannot honour or a malformed task file fails
the same way on every attempt, so such a trial is recorded once, as ``infra_error`` with
``error_class = task_unsupported:<reason>``, and is never retried or started. Each arm is
checked with its own sandbox section (an arm may switch backends).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from farm.config import FarmConfig, resolved_agent
from farm.errors import FarmError, UnsupportedTaskError
from farm.run.endpoint import EndpointInfo, PreflightError, check_endpoint
from farm.run.plan import TrialSpec
from farm.run.rows import LOCAL_POLICIES, TrialOutcome, base_row, ended_row, unsupported_class
from farm.sandbox.base import SandboxError
from farm.sandbox.registry import (
    check_environment,
    check_task,
    engine_problem,
    open_sandbox,
    refusal_reason,
    unresolvable_images,
)
from farm.tasks.model import Task, with_networks


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def check_backends(arms: dict[str, FarmConfig]) -> None:
    """Every arm's backend can be driven from here (raises ConfigError naming what is missing)."""
    seen: set[str] = set()
    for acfg in arms.values():
        key = repr(acfg.sandbox)
        if key not in seen:
            seen.add(key)
            check_environment(acfg.sandbox)


async def check_engines(arms: dict[str, FarmConfig]) -> None:
    """Every arm's container engine answers (``docker info``), before any task is looked at.

    Raises:
        PreflightError: the engine's own error and the setting to change (``farm run`` exits 3).
    """
    seen: set[str] = set()
    for arm, acfg in arms.items():
        key = repr(acfg.sandbox)
        if key in seen:
            continue
        seen.add(key)
        problem = await engine_problem(acfg.sandbox, acfg.run.preflight_timeout_s)
        if problem is not None:
            prefix = f"arm {arm!r}: " if len(arms) > 1 else ""
            raise PreflightError(f"preflight: {prefix}{problem}")


def refusals(tasks: list[Task], arms: dict[str, FarmConfig]) -> dict[tuple[str, str, str], Refusal]:
    """(arm, benchmark, task_id) -> why the arm's backend refuses the task; absent if it runs."""
    out: dict[tuple[str, str, str], Refusal] = {}
    by_section: dict[str, dict[tuple[str, str], Refusal | None]] = {}
    for arm, acfg in arms.items():
        # arms that share a sandbox section share the verdicts
        verdicts = by_section.setdefault(repr(acfg.sandbox), {})
        for task in tasks:
            key = (task.benchmark, task.task_id)
            if key not in verdicts:
                try:
                    check_task(task, acfg.sandbox)
                    verdicts[key] = None
                except UnsupportedTaskError as exc:
                    verdicts[key] = Refusal(exc.reason, str(exc))
            if verdicts[key] is not None:
                out[(arm, *key)] = verdicts[key]  # type: ignore[assignment]
    return out


async def image_refusals(tasks: list[Task], arms: dict[str, FarmConfig],
                         refused: dict[tuple[str, str, str], Refusal]) -> dict[tuple[str, str, str], Refusal]:
    """``refusals`` for images: tasks whose image the arm's backend can certainly not get (e.g. a
    build base that is absent under ``sandbox.docker.pull=never``) are refused before any start,
    as ``task_unsupported:image_unresolvable``, instead of failing one start per trial."""
    out: dict[tuple[str, str, str], Refusal] = {}
    by_section: dict[str, dict[tuple[str, str], str]] = {}
    for arm, acfg in arms.items():
        key = repr(acfg.sandbox)
        if key not in by_section:
            todo = [t for t in tasks if (arm, t.benchmark, t.task_id) not in refused]
            by_section[key] = await unresolvable_images(todo, acfg.sandbox)
        for (bench, task_id), why in by_section[key].items():
            if (arm, bench, task_id) not in refused:
                out[(arm, bench, task_id)] = Refusal("image_unresolvable", f"task {task_id}: {why}")
    return out


def refused_outcome(spec: TrialSpec, task: Task, cfg: FarmConfig, attempt: int, refusal: Refusal,
                    chash: str | None = None) -> TrialOutcome:
    """The one row a refused trial gets: never started, never retried."""
    row = ended_row(base_row(spec, attempt, cfg, task, uid="preflight", chash=chash),
                    unsupported_class(refusal.reason), refusal.message)
    row.wall_s = 0.0
    return TrialOutcome(row)


def _probe_tool(cfg: FarmConfig) -> dict:
    from farm.agent.tools import load_tools

    tools = load_tools(cfg.agent.tools_file)
    return next((t for t in tools if t.get("function", {}).get("name") == "Bash"), tools[0])


async def check_arm_endpoint(cfg: FarmConfig) -> EndpointInfo:
    """The endpoint one arm's trials will talk to, checked (a local policy: a server of its own)."""
    policy = resolved_agent(cfg)
    timeout = cfg.run.preflight_timeout_s
    if policy not in LOCAL_POLICIES:
        return await check_endpoint(cfg.model, _probe_tool(cfg), timeout_s=timeout)
    from farm.agent.policies.server import start_policy_server

    server = await asyncio.to_thread(start_policy_server, policy, script=cfg.agent.script)
    try:
        model = replace(cfg.model, base_url=server.base_url, name=policy, preflight_tool_call=True)
        # farm's own policy servers write no tokens to cap
        return await check_endpoint(model, _probe_tool(cfg), timeout_s=timeout, check_cap=False)
    finally:
        await asyncio.to_thread(server.close)


SANDBOX_TRIES = 3  # tasks tried before the backend (not a task) is blamed
# start failures that are the task's own (its Dockerfile does not build here, a build step
# fails): the next task is tried, and such failures never count against the backend
TASK_START_REASONS = ("image_build", "build_step")
MAX_TASK_FAILURES = 10


async def check_sandbox_start(cfg: FarmConfig, tasks: list[Task], run_id: str) -> None:
    """Start (and close) one sandbox on the arm's backend, trying up to SANDBOX_TRIES tasks.

    A task whose own files break its start (a COPY source missing, a Dockerfile that does not
    build) is that task's problem, recorded by its trials (``task_unsupported``,
    ``sandbox_start:image_build``); the next task is tried instead. When every task tried
    failed for such a reason of its own, the backend is not blamed and the run goes on.

    Raises:
        PreflightError: naming the backend, the task and the cause, when no sandbox started.
    """
    tried = own_failures = 0
    for task in tasks:
        if tried >= SANDBOX_TRIES or own_failures >= MAX_TASK_FAILURES:
            return
        task = with_networks(task, cfg.benchmark.agent_network, cfg.benchmark.verifier_network)
        sandbox = open_sandbox(task, cfg.sandbox, network=task.agent_network, run_id=run_id,
                               trial_key="preflight", attempt=0, role="agent")
        try:
            await sandbox.start()
            result = await sandbox.exec("true", timeout_s=60)
            if result.exit_code != 0:
                raise PreflightError(f"sandbox.backend={cfg.sandbox.backend}: a sandbox of task {task.task_id!r} "
                                     f"started but `true` exited {result.exit_code}: {result.output[:200]!r}")
            return
        except SandboxError as exc:
            if getattr(exc, "reason", None) in TASK_START_REASONS:
                own_failures += 1
                continue
            raise PreflightError(
                f"sandbox.backend={cfg.sandbox.backend} could not start a sandbox for task {task.task_id!r}: "
                f"{type(exc).__name__}: {exc} (run.preflight_sandbox=false skips this check)"
            ) from None
        except FarmError as exc:
            if refusal_reason(exc) is None:
                raise
        finally:
            try:
                await sandbox.close()
            except Exception:  # noqa: BLE001 - the start's own failure is the message that matters
                pass
        tried += 1


async def run_preflight(arms: dict[str, FarmConfig], tasks: list[Task],
                        refused: dict[tuple[str, str, str], Refusal], run_id: str) -> dict[str, EndpointInfo]:
    """Endpoint and sandbox checks for every arm (shared sections checked once); arm -> endpoint.

    Raises:
        PreflightError: the first check that failed, prefixed with the arm when there are several.
    """
    infos: dict[str, EndpointInfo] = {}
    by_endpoint: dict[tuple, EndpointInfo] = {}
    started: set[str] = set()
    for arm, acfg in arms.items():
        prefix = f"arm {arm!r}: " if len(arms) > 1 else ""
        policy = resolved_agent(acfg)
        key = (policy, acfg.agent.script) if policy in LOCAL_POLICIES else (acfg.model.base_url, acfg.model.name)
        try:
            if key not in by_endpoint:
                by_endpoint[key] = await check_arm_endpoint(acfg)
            infos[arm] = by_endpoint[key]
            section = repr(acfg.sandbox)
            if acfg.run.preflight_sandbox and section not in started:
                runnable = [t for t in tasks if (arm, t.benchmark, t.task_id) not in refused]
                await check_sandbox_start(acfg, runnable, run_id)
                started.add(section)
        except PreflightError as exc:
            raise PreflightError(f"preflight: {prefix}{exc}") from None
    return infos
