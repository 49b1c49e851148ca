"""How one attempt is graded: in place, fresh from its patch, or both; verifier retries.

``grade.mode`` and the task decide where the verdict comes from (``grading_mode``): in the
agent's own sandbox (the vendor's way), in a fresh verifier sandbox started from the task's
image with the captured patch applied (nothing the agent did outside its patch counts), or
both (in place is the verdict, fresh a tamper check). A verifier that could not set itself up
is re-run alone, up to ``grade.verifier_retries`` more times, never the agent (``grade_retrying``).
``farm regrade`` grades stored patches through ``grade_patch``, exactly as a trial grades fresh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from farm.config import FarmConfig
from farm.grade.harbor import VERIFIER_SETUP, GradeResult, run_harbor_verifier
from farm.grade.patch import apply_patch
from farm.grade.tamper import verifier_tamper
from farm.sandbox.base import Sandbox
from farm.store.schema import TrialResult
from farm.tasks.model import Task

# open_sandbox's signature with the trial's ids bound: (task, sandbox config section, *, network, role)
Factory = Callable[..., Sandbox]


async def close_quietly(sandbox: Sandbox | None) -> None:
    if sandbox is None:
        return
    try:
        await sandbox.close()
    except Exception:  # noqa: BLE001 - closing must never mask the trial's own outcome
        pass


def status_of(grade: GradeResult) -> str:
    """The row status a verdict gives: ``resolved``, ``unresolved``, or ``infra_error`` when the
    verifier produced no valid reward."""
    return "infra_error" if not grade.valid else "resolved" if grade.resolved else "unresolved"


# what a graded patch may not carry under strict (``grade.tamper_fails``): code that runs when
# Python or pytest starts, or pytest's configuration, found in the captured patch by the hack
# scan (farm/grade/hack_patch.py). The patch alone does it, graded fresh as much as in place, so
# dual grading cannot catch it (SWE-bench's conftest.py); no gold patch of SWE-bench Verified's
# 500 carries one (docs/integrity.md)
PATCH_HOOKS = ("import_hook@patch", "test_config@patch")


def strict_status(status: str, flags: list[str], cfg: FarmConfig) -> str:
    """``status`` as strict grading records it: a resolved trial whose patch carries a start-up
    hook or test configuration (``PATCH_HOOKS``) is unresolved under ``grade.tamper_fails``."""
    if status == "resolved" and cfg.grade.tamper_fails and any(f in PATCH_HOOKS for f in flags):
        return "unresolved"
    return status


def grading_mode(task: Task, cfg: FarmConfig, sandbox: Sandbox | None) -> str:
    """``in_place``, ``fresh`` or ``both`` for this task (``grade.mode=patch_both``: ``both`` for a
    patch-graded task, else in place): in place only when the agent's sandbox can be
    given the verifier's network (docs/grading.md, "Where it runs, with which network"); otherwise a fresh
    verifier sandbox started with the verifier's network grades the captured patch."""
    if task.verifier.protocol == "patcheval" or cfg.grade.mode == "fresh":
        return "fresh"
    if sandbox is not None and task.verifier_network != task.agent_network and not sandbox.capabilities.set_network:
        return "fresh"
    # both: in place (the vendor's verdict), then fresh from the patch as a tamper check;
    # patch_both (the strict twin's): both only where the task's answer is its git patch, since
    # a Terminal-Bench answer is container state that a fresh sandbox from the patch cannot hold
    if cfg.grade.mode == "both" or (cfg.grade.mode == "patch_both" and task.require_git_patch):
        return "both"
    return "in_place"


async def _grade_once(
    task: Task, cfg: FarmConfig, sandbox: Sandbox | None, patch: str, factory: Factory,
    image_tools: dict[str, str] | None = None,
) -> tuple[GradeResult, Sandbox | None]:
    """Grade once: in ``sandbox`` when given (in place), else in a fresh verifier sandbox that
    is returned for the caller to account for and close. ``image_tools``: run_harbor_verifier's."""
    if task.verifier.protocol == "patcheval":
        # PatchEval grades the patch in a fresh sandbox with its own fix-run.sh (farm/grade/patcheval.py)
        from farm.grade.patcheval import grade as patcheval_grade

        verdict = await patcheval_grade(lambda t, role: factory(t, cfg.sandbox, network=t.verifier_network, role=role),
                                        task, patch)
        return GradeResult(verdict.reward, verdict.resolved, verdict.output, None, None, verdict.verify_s), None
    cache = cfg.grade.verifier_cache
    if sandbox is not None:
        if task.verifier_network != task.agent_network:
            await sandbox.set_network(task.verifier_network)  # grading_mode chose in place only if it can
        kill = task.require_git_patch if cfg.grade.kill_leftovers is None else cfg.grade.kill_leftovers
        return await run_harbor_verifier(task, sandbox, cache, kill_leftovers=kill, image_tools=image_tools), None
    # fresh: nothing the agent did outside its patch can influence the verdict
    fresh = factory(task, cfg.sandbox, network=task.verifier_network, role="verifier")
    try:
        await fresh.start()
    except BaseException:
        await close_quietly(fresh)
        raise
    try:
        ok, out = await apply_patch(fresh, task.workdir, patch)
        if not ok:
            return GradeResult(0.0, False, out, None, None), fresh
        return await run_harbor_verifier(task, fresh, cache), fresh
    except BaseException:  # a lost verifier sandbox: nobody else holds it to close it
        await close_quietly(fresh)
        raise


async def grade_retrying(task: Task, cfg: FarmConfig, sandbox: Sandbox | None, patch: str,
                         factory: Factory, used: list[Sandbox],
                         image_tools: dict[str, str] | None = None) -> tuple[GradeResult, list[str]]:
    """Grade, re-running only the verifier while it could not set itself up (up to
    ``grade.verifier_retries`` more times): in place on ``sandbox`` when given, else each run in
    a new verifier sandbox from the captured patch (appended to ``used``, closed before the
    next one starts). Returns the last result, with ``runs`` and the summed ``duration_s``,
    and every run's output."""
    outputs: list[str] = []
    total = 0.0
    while True:
        grade, verifier_sandbox = await _grade_once(task, cfg, sandbox, patch, factory, image_tools)
        outputs.append(grade.output)
        total += grade.duration_s
        if verifier_sandbox is not None:
            used.append(verifier_sandbox)
            await close_quietly(verifier_sandbox)
        if grade.error_class != VERIFIER_SETUP or len(outputs) > cfg.grade.verifier_retries:
            break
    error = grade.error
    if error is not None and len(outputs) > 1:
        error = f"{error} (verifier ran {len(outputs)} times)"
    return replace(grade, runs=len(outputs), duration_s=total, error=error), outputs


async def grade_patch(task: Task, cfg: FarmConfig, patch: str, factory: Factory) -> GradeResult:
    """Fresh grading of a captured patch exactly as a trial does it, verifier retries included
    (``farm regrade``). ``factory`` is open_sandbox's signature with the trial's ids bound."""
    used: list[Sandbox] = []
    try:
        grade, _ = await grade_retrying(task, cfg, None, patch, factory, used)
    finally:
        for sb in used:
            await close_quietly(sb)
    return grade


def _keep_outputs(artifacts: dict[str, bytes], outputs: list[str], name: Callable[[int], str]) -> None:
    for i, text in enumerate(outputs, 1):
        artifacts[name(i)] = text.encode("utf-8", errors="replace")


async def grade_attempt(task: Task, cfg: FarmConfig, sandbox: Sandbox, patch: str, factory: Factory, *,
                        row: TrialResult, artifacts: dict[str, bytes], used: list[Sandbox],
                        image_tools: dict[str, str] | None = None) -> GradeResult:
    """Grade one attempt's work by ``grading_mode``; the verdict of record (in place, or fresh).

    Fills the row's grading columns (``grading_mode``, ``verifier_runs``, ``verify_s``,
    ``reward``; with ``both`` also ``fresh_status`` and ``tamper_suspect``) and the verifiers'
    outputs into ``artifacts`` as each grade ends, so an attempt whose grading fails part-way
    (a verifier sandbox lost) keeps what was graded before. The agent's ``sandbox`` is closed
    here once the verdict no longer needs it; every verifier sandbox started is appended to
    ``used`` (the caller accounts for and closes them all). ``image_tools``: ~/.local/bin's uv,
    uvx and env as they were before the agent's first step (farm/grade/harbor.py ``home_tools``)."""
    mode = grading_mode(task, cfg, sandbox)
    row.grading_mode = mode
    in_place: Sandbox | None = sandbox
    flags: list[str] = []
    if mode == "fresh":
        await close_quietly(sandbox)  # free its resources before the verifier's sandbox starts
        in_place = None
    elif task.verifier.protocol != "patcheval":
        # before the verifier wipes /logs/verifier: what the agent did to what it relies on
        flags, evidence = await verifier_tamper(sandbox)
        if evidence:
            artifacts["verifier-tamper.txt"] = evidence.encode("utf-8", errors="replace")
    grade, outputs = await grade_retrying(task, cfg, in_place, patch, factory, used, image_tools)
    flags += [f for f in grade.flags if f not in flags]
    _keep_outputs(artifacts, outputs, lambda i: "verifier.txt" if i == 1 else f"verifier-{i}.txt")
    row.verifier_runs = grade.runs
    row.verify_s = grade.duration_s
    row.reward = grade.reward
    if mode == "both":
        await close_quietly(sandbox)
        fresh, fresh_outputs = await grade_retrying(task, cfg, None, patch, factory, used)
        _keep_outputs(artifacts, fresh_outputs, lambda i: f"verifier-fresh-{i}.txt")
        row.verifier_runs += fresh.runs
        row.verify_s += fresh.duration_s
        row.fresh_status = status_of(fresh)
        # resolved where the agent worked, not from its patch alone: something outside the
        # patch (a process, an ignored file, the environment) made the difference
        row.tamper_suspect = grade.valid and grade.resolved and fresh.valid and not fresh.resolved
    if flags:
        # kept by the trial's hack scan (farm/run/trial.py); a suspect whatever its verdict
        row.hack_flags = [*row.hack_flags, *(f for f in flags if f not in row.hack_flags)]
        row.tamper_suspect = True
    if row.tamper_suspect and cfg.grade.tamper_fails:
        # strict: a suspect is not resolved (the in-place reward stays on the row, the verdict
        # does not count it)
        return replace(grade, resolved=False)
    return grade
