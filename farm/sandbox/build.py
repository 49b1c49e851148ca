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
from farm.tasks.model import Environment, Task

PACKAGE_MANAGERS = re.compile(r"\b(apt-get|apt|apk|yum|dnf|microdnf|zypper|pacman)\b")


_VAR = re.compile(r"\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Dockerfile variable substitution: $VAR, ${VAR}, ${VAR:-default}, ${VAR:+alt}, \\$."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "\\$":
            return "$"
        name = m.group(1) or m.group(4)
        cur = env.get(name, "")
        if m.group(2) == "-":
            return cur or m.group(3)
        if m.group(2) == "+":
            return m.group(3) if cur else ""
        return cur

    return _VAR.sub(sub, value)


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


def resolve_build_steps(task: Task, base_env: Mapping[str, str]) -> list[ResolvedStep]:
    """Expand variables and relative paths of the task's build steps without running them."""
    envr = task.environment
    workdir = envr.workdir or "/"
    added: dict[str, str] = {}
    out: list[ResolvedStep] = []
    for i, step in enumerate(envr.build_steps, 1):
        scope = {**base_env, **added}
        text = f"{step.kind.upper()} {step.arg}" + (f" {step.value}" if step.value else "")
        if step.kind == "workdir":
            workdir = _abspath(expand(step.arg, scope), workdir)
            out.append(ResolvedStep(i, "workdir", text, workdir, dict(added), path=workdir))
        elif step.kind == "env":
            added[step.arg] = expand(step.value, scope)
            out.append(ResolvedStep(i, "env", text, workdir, dict(added)))
        elif step.kind == "copy":
            raw = expand(step.value, scope)
            dest = _abspath(raw, workdir)
            out.append(
                ResolvedStep(i, "copy", text, workdir, dict(added), path=dest, src=step.arg, into=raw.endswith("/") or raw in (".", "./"))
            )
        elif step.kind == "run":
            out.append(ResolvedStep(i, "run", text, workdir, dict(added), command=step.arg))
        else:
            raise TaskFormatError(task.path or task.task_id, f"build step {i}: unknown kind {step.kind!r}")
    return out


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
    for step in steps:
        if step.kind == "workdir":
            await sandbox.exec(f"mkdir -p {shlex.quote(step.path)}", timeout_s=60, cwd="/")
        elif step.kind == "copy":
            await _copy(sandbox, task, step)
        elif step.kind == "run":
            res = await sandbox.exec(
                step.command, timeout_s=envr.build_timeout_s, cwd=step.workdir, env=step.env, merge_stderr=True, output_cap=64 << 10
            )
            if res.exit_code != 0:
                why = f"timed out after {envr.build_timeout_s:.0f} s" if res.timed_out else f"exited with code {res.exit_code}"
                tail = res.output[-3000:]
                hint = ""
                if PACKAGE_MANAGERS.search(step.command):
                    hint = (
                        "\n(the local backend runs on the host system with read-only system "
                        "directories: packages must already be installed on the host, or use "
                        "sandbox=docker / sandbox=kubernetes)"
                    )
                raise SandboxStartError(f"task {task.task_id}: build step {step.index} ({step.text}) {why}; output tail:\n{tail}{hint}",
                                        reason="build_step")


async def _copy(sandbox: Any, task: Task, step: ResolvedStep) -> None:
    ctx = task.environment.build_context
    if ctx is None:
        raise TaskFormatError(task.path or task.task_id, f"build step {step.index} ({step.text}): COPY needs a build context")
    ctx = Path(ctx).resolve()
    pattern = str(ctx / step.src)
    matches = sorted(glob.glob(pattern)) if glob.has_magic(step.src) else ([pattern] if os.path.lexists(pattern) else [])
    if not matches:
        raise TaskFormatError(task.path or ctx, f"build step {step.index} ({step.text}): source {step.src!r} not found in {ctx}")
    into = step.into or len(matches) > 1
    if not into:
        into = (await sandbox.stat(step.path)).is_dir
    for m in matches:
        src = Path(m).resolve()
        if src != ctx and ctx not in src.parents:
            raise TaskFormatError(task.path or ctx, f"build step {step.index} ({step.text}): source {step.src!r} leaves the build context")
        if src.is_dir():
            await sandbox.upload(src, step.path)
        else:
            dest = f"{step.path.rstrip('/')}/{src.name}" if into else step.path
            await sandbox.write_file(dest, src.read_bytes(), mode=src.stat().st_mode & 0o7777)


