"""Replay a task's interpreted Dockerfile (WORKDIR / ENV / COPY / RUN) through any Sandbox.

Backends without an image builder (bubblewrap on the host; pods whose image lacks the task's
setup) apply the build steps themselves, with Dockerfile-style ``$VAR`` expansion against the
environment accumulated so far.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from farm.errors import TaskFormatError
from farm.sandbox.base import SandboxStartError
from farm.sandbox.pipefail import strict_command
from farm.tasks.dockerfile import check_replayable, expand
from farm.tasks.model import Environment, Task

PACKAGE_MANAGERS = re.compile(r"\b(apt-get|apt|apk|yum|dnf|microdnf|zypper|pacman)\b")


@dataclass(frozen=True)
class ResolvedStep:
    index: int
    kind: str
    text: str  # the instruction as the task wrote it, for error messages
    workdir: str  # WORKDIR in effect
    env: Mapping[str, str]  # ENV instructions in effect (expanded), beyond the base env
    path: str = ""  # workdir / copy destination (absolute)
    src: str = ""  # copy source (relative to the build context)
    into: bool = False  # copy destination named a directory ("dest/")
    command: str = ""  # run
    runtime_env: Mapping[str, str] | None = None  # env: what the running container keeps (no ARGs)


def resolve_build_steps(task: Task, base_env: Mapping[str, str]) -> list[ResolvedStep]:
    """Expand variables and relative paths of the task's build steps without running them.

    Raises:
        UnsupportedTaskError: (``dockerfile_instruction``) a step replay cannot honour
            (COPY --from another stage, ADD of a URL or archive, ...).
        TaskFormatError: a step of an unknown kind.
    """
    check_replayable(task.environment, "build-step replay on a running sandbox")
    envr = task.environment
    workdir = envr.workdir or "/"
    added: dict[str, str] = {}
    build_only: set[str] = set()
    out: list[ResolvedStep] = []
    for i, step in enumerate(envr.build_steps, 1):
        scope = {**base_env, **added}
        text = f"{step.kind.upper()} {step.arg}" + (f" {step.value}" if step.value else "")
        if step.kind == "workdir":
            workdir = _abspath(expand(step.arg, scope), workdir)
            out.append(ResolvedStep(i, "workdir", text, workdir, dict(added), path=workdir))
        elif step.kind == "env":
            added[step.arg] = expand(step.value, scope)
            # an ARG is set for the build steps after it but is not part of the image's env
            (build_only.add if step.build_only else build_only.discard)(step.arg)
            runtime = {k: v for k, v in added.items() if k not in build_only}
            out.append(ResolvedStep(i, "env", text, workdir, dict(added), runtime_env=runtime))
        elif step.kind == "copy":
            raw = expand(step.value, scope)
            dest = _abspath(raw, workdir)
            out.append(
                ResolvedStep(i, "copy", text, workdir, dict(added), path=dest, src=step.arg,
                             into=raw.endswith("/") or raw in (".", "./"))
            )
        elif step.kind == "run":
            out.append(ResolvedStep(i, "run", text, workdir, dict(added), command=step.arg))
        else:
            raise TaskFormatError(task.path or task.task_id, f"build step {i}: unknown kind {step.kind!r}")
    return out


def runtime_env(steps: list[ResolvedStep]) -> dict[str, str]:
    """The environment the image's ENV steps leave for the running sandbox (ARGs excluded)."""
    for step in reversed(steps):
        if step.runtime_env is not None:
            return dict(step.runtime_env)
    return {}


def literal_task_env(task: Task) -> dict[str, str]:
    """The part of ``environment.env`` that no ENV build step sets.

    The task loader copies the Dockerfile's ENV values, unexpanded, into ``environment.env``
    (``PATH=/root/.local/bin:$PATH`` included); those must come from the expanded ENV steps,
    not be exported raw. What remains (task.toml's env, or a task.toml value overriding an
    ENV) is literal. Environment = base + this + the expanded ENV steps + :func:`env_overrides`.
    """
    raw_steps = {s.arg: s.value for s in task.environment.build_steps if s.kind == "env"}
    return {k: v for k, v in task.environment.env.items() if raw_steps.get(k) != v}


def env_overrides(task: Task) -> dict[str, str]:
    """task.toml values that override an ENV step of the same name (applied last)."""
    raw_steps = {s.arg: s.value for s in task.environment.build_steps if s.kind == "env"}
    return {k: v for k, v in task.environment.env.items() if k in raw_steps and raw_steps[k] != v}


def _abspath(path: str, base: str) -> str:
    p = PurePosixPath(base) / path if not path.startswith("/") else PurePosixPath(path)
    return os.path.normpath(str(p)).replace("//", "/")


async def replay_build_steps(sandbox: Any, task: Task, steps: list[ResolvedStep]) -> None:
    """Apply WORKDIR/ENV/COPY/RUN through any Sandbox (backend-agnostic).

    RUN steps execute in the sandbox with the sandbox's own network setting: a no-network
    task cannot download anything while it is being built.
    """
    envr: Environment = task.environment
    stats = getattr(sandbox, "stats", None)
    for step in steps:
        if stats is not None and step.kind in ("copy", "run"):
            # a RUN that hangs is the commonest stalled start: the progress line names it (the
            # step's number is the one a failure's message gives)
            stats.note_step(f"build step {step.index}: {_short(step.text)}")
        if step.kind == "workdir":
            await sandbox.exec(f"mkdir -p {shlex.quote(step.path)}", timeout_s=60, cwd="/")
        elif step.kind == "copy":
            await _copy(sandbox, task, step)
        elif step.kind == "run":
            # pipefail: `curl URL | sh` must fail the step when curl fails (farm/sandbox/pipefail.py)
            res = await sandbox.exec(
                strict_command(step.command), timeout_s=envr.build_timeout_s, cwd=step.workdir, env=step.env,
                merge_stderr=True, output_cap=64 << 10
            )
            if res.exit_code != 0:
                why = (f"timed out after {envr.build_timeout_s:.0f} s" if res.timed_out
                       else f"exited with code {res.exit_code}")
                tail = res.output[-3000:]
                hint = ""
                if PACKAGE_MANAGERS.search(step.command):
                    hint = (
                        "\n(the local backend runs on the host system with read-only system "
                        "directories: packages must already be installed on the host, or use "
                        "sandbox=docker / sandbox=kubernetes)"
                    )
                raise SandboxStartError(f"task {task.task_id}: build step {step.index} ({step.text}) {why}; "
                                        f"output tail:\n{tail}{hint}", reason="build_step")


def _short(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


async def _copy(sandbox: Any, task: Task, step: ResolvedStep) -> None:
    ctx = task.environment.build_context
    if ctx is None:
        raise TaskFormatError(task.path or task.task_id,
                              f"build step {step.index} ({step.text}): COPY needs a build context")
    ctx = Path(ctx).resolve()
    pattern = str(ctx / step.src)
    if glob.has_magic(step.src):
        matches = sorted(glob.glob(pattern))
    else:
        matches = [pattern] if os.path.lexists(pattern) else []
    if not matches:
        raise TaskFormatError(task.path or ctx,
                              f"build step {step.index} ({step.text}): source {step.src!r} not found in {ctx}")
    into = step.into or len(matches) > 1
    if not into:
        into = (await sandbox.stat(step.path)).is_dir
    for m in matches:
        src = Path(m).resolve()
        if src != ctx and ctx not in src.parents:
            raise TaskFormatError(task.path or ctx, f"build step {step.index} ({step.text}): "
                                  f"source {step.src!r} leaves the build context")
        if src.is_dir():
            await sandbox.upload(src, step.path)
        else:
            dest = f"{step.path.rstrip('/')}/{src.name}" if into else step.path
            await sandbox.write_file(dest, src.read_bytes(), mode=src.stat().st_mode & 0o7777)


