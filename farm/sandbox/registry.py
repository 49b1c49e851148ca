"""One name -> backend table: the only place that knows which module implements a backend.

The run layer (farm/run) opens, checks and collects sandboxes through these functions and
hands over only the ``sandbox`` config section; it never imports a backend module. Backend
modules are imported on first use, so choosing ``local`` never imports the Kubernetes client.

A backend module exposes ``BACKEND``, an object with the ``Backend`` protocol below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol

from farm.config import SandboxConfig
from farm.errors import ConfigError, FarmError, TaskFormatError, UnsupportedTaskError
from farm.sandbox.base import GcReport, Sandbox
from farm.tasks.model import Task

BACKEND_MODULES: dict[str, str] = {
    "local": "farm.sandbox.local.sandbox",
    "kubernetes": "farm.sandbox.kubernetes.sandbox",
    "docker": "farm.sandbox.docker.sandbox",
    "none": "farm.sandbox.none.sandbox",  # no isolation: refused outside bench/fanout.py (farm/sandbox/none/sandbox.py)
}


class Backend(Protocol):
    name: str

    def open(self, task: Task, cfg: SandboxConfig, *, network: str | None, run_id: str, trial_key: str,
             attempt: int, role: str) -> Sandbox:
        """A sandbox for one role (agent | verifier) of one trial attempt; not started yet.

        Raises:
            UnsupportedTaskError: the backend can never run the task.
            ConfigError: the backend's client cannot be set up from the config.
        """
        ...

    def check_task(self, task: Task, cfg: SandboxConfig) -> None:
        """Preflight: refuse, without starting anything, a task the backend can never run.

        Raises:
            UnsupportedTaskError: with a ``reason`` (``image_refused``, ``no_image``, ...).
            TaskFormatError: the task's files are malformed.
        """
        ...

    def check_environment(self, cfg: SandboxConfig) -> None:
        """That this machine can drive the backend (binaries on PATH, client libraries).

        Raises:
            ConfigError: naming what is missing.
        """
        ...

    def gc(self, cfg: SandboxConfig, is_run_alive: Callable[[str], bool], *, dry_run: bool = False) -> GcReport:
        """Remove sandboxes (and what belongs to them) that no live run owns."""
        ...


def get_backend(name: str) -> Backend:
    """The backend registered under ``name``.

    Raises:
        ConfigError: no backend has that name.
    """
    module = BACKEND_MODULES.get(name)
    if module is None:
        raise ConfigError(f"invalid value {name!r} for 'sandbox.backend': choose one of {sorted(BACKEND_MODULES)}")
    return importlib.import_module(module).BACKEND  # type: ignore[no-any-return]


async def unresolvable_images(tasks: list[Task], cfg: SandboxConfig) -> dict[tuple[str, str], str]:
    """(benchmark, task_id) -> why the backend can certainly not get the task's image (preflight).

    Only backends that get images themselves check (docker: `farm images check` without asking a
    registry); the others leave it to the sandbox start."""
    check = getattr(get_backend(cfg.backend), "check_images", None)
    return await check(tasks, cfg) if check is not None and tasks else {}


async def engine_problem(cfg: SandboxConfig, timeout_s: float) -> str | None:
    """Why the backend's engine cannot serve a sandbox now, in the engine's own words (None: it
    answers). Only backends driving an engine of their own ask it (docker: ``<engine> info``); a
    daemon that is not running fails every start the same way, so the run stops before its first."""
    check = getattr(get_backend(cfg.backend), "check_engine", None)
    return await check(cfg, timeout_s) if check is not None else None


def open_sandbox(task: Task, cfg: SandboxConfig, *, network: str | None = None, run_id: str, trial_key: str,
                 attempt: int = 1, role: str = "agent") -> Sandbox:
    """The configured backend's sandbox for one role of one trial attempt (not started)."""
    return get_backend(cfg.backend).open(task, cfg, network=network, run_id=run_id, trial_key=trial_key,
                                         attempt=attempt, role=role)


def check_task(task: Task, cfg: SandboxConfig) -> None:
    """Preflight one task against the configured backend.

    Raises:
        UnsupportedTaskError: the backend can never run ``task``; ``reason`` is the short
            cause a trial row records as ``task_unsupported:<reason>``.
    """
    try:
        get_backend(cfg.backend).check_task(task, cfg)
    except FarmError as exc:
        reason = refusal_reason(exc)
        if reason is None or isinstance(exc, UnsupportedTaskError):
            raise
        raise UnsupportedTaskError(str(exc), reason=reason) from exc


def check_environment(cfg: SandboxConfig) -> None:
    get_backend(cfg.backend).check_environment(cfg)


def gc(cfg: SandboxConfig, is_run_alive: Callable[[str], bool], *, dry_run: bool = False) -> GcReport:
    return get_backend(cfg.backend).gc(cfg, is_run_alive, dry_run=dry_run)


def refusal_reason(exc: BaseException) -> str | None:
    """The reason ``exc`` is a deterministic refusal of the task itself, or None.

    UnsupportedTaskError keeps its own reason; a malformed task file is ``task_format``; a
    ConfigError raised for one task (a registry or image lock that cannot serve it) is
    ``config``. Anything else (a SandboxError, a bug) is not a refusal.
    """
    if isinstance(exc, UnsupportedTaskError):
        return exc.reason
    if isinstance(exc, TaskFormatError):
        return "task_format"
    if isinstance(exc, ConfigError):
        return "config"
    return None
