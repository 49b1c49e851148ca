"""The image a relay-backed sandbox runs, and the preflight check of a task (relayed/sandbox.py's
start follows the same rules): registry mirror, digest lock, build-or-pull plan."""

from __future__ import annotations

from dataclasses import replace

from farm.config import DockerSandboxConfig, KubernetesSandboxConfig
from farm.errors import UnsupportedTaskError
from farm.sandbox.images.plan import ImageFacts, ImagePlan, plan_image
from farm.sandbox.replay import literal_task_env, resolve_build_steps
from farm.tasks.image_lock import apply_image_policy, load_image_lock
from farm.tasks.model import Task

# what the image's environment gives a root shell when the task does not say otherwise
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROOT_ENV = {"HOME": "/root", "PATH": DEFAULT_PATH}

RelayConfig = KubernetesSandboxConfig | DockerSandboxConfig


def resolve_image(task: Task, cfg: RelayConfig, backend: str) -> str:
    """The image reference the sandbox runs: registry mirror, then the digest lock.

    Raises:
        UnsupportedTaskError: the task has no image (``no_image``) or the lock has no digest
            for it (``image_lock``).
        ConfigError: the lock itself cannot be loaded.
    """
    if task.environment.image is None:
        raise UnsupportedTaskError(
            f"task {task.benchmark}/{task.task_id} has no image; sandbox={backend} needs one", reason="no_image")
    lock = load_image_lock(cfg.image_lock) if cfg.image_lock else None
    if lock is not None and task.task_id not in lock.digests:
        raise UnsupportedTaskError(
            f"image lock {lock.name!r} has no digest for task {task.task_id!r}; refusing to run it unpinned "
            "(remove the lock or select locked tasks only)", reason="image_lock")
    (resolved,) = apply_image_policy([task], registry=cfg.image_registry, lock=lock)
    return resolved.environment.image  # type: ignore[return-value]


def relay_plan(task: Task, cfg: RelayConfig, policy: str, *, builder: bool) -> ImagePlan:
    """The image plan a relay-backed backend follows.

    ``builder``: the backend can build on the machine that runs the container (docker/podman).
    A cluster cannot: there a build is used only through ``build_registry`` (what
    ``farm images build --push`` filled); without one it falls back to the named image.
    """
    plan = plan_image(task, policy)
    if plan.build and not builder and not getattr(cfg, "build_registry", None):
        return plan_image(task, "pull")
    return plan


def check_relay_task(task: Task, cfg: RelayConfig, backend: str, policy: str = "pull", *,
                     builder: bool = False) -> None:
    """Preflight: everything a relay-backed start would refuse before any pod or container.

    Raises:
        UnsupportedTaskError, TaskFormatError: as ``RelaySandbox.start`` would.
        ConfigError: an unknown image policy.
    """
    plan = relay_plan(task, cfg, policy, builder=builder)
    if plan.pull_first:
        resolve_image(task, cfg, backend)
    if plan.replay:
        resolve_build_steps(task, {**ROOT_ENV, **task.environment.env})


def built_view(task: Task, facts: ImageFacts | None) -> Task:
    """The task as a sandbox runs it from an image that already holds its build: no steps to
    replay, only task.toml's literal env exported (the image's ENV comes from the image), and
    the image's WORKDIR as the workdir when it has one."""
    envr = replace(task.environment, build_steps=(), env=literal_task_env(task),
                   workdir=(facts.workdir if facts and facts.workdir else task.environment.workdir))
    return replace(task, environment=envr)
