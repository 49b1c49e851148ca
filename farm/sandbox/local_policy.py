"""What the local (bubblewrap) backend can run: the task's image and its writable paths.

The local "image" is the host system, so a task qualifies only if its FROM names a generic
image the host can stand in for and its build writes only below top-level directories the
sandbox can give a private writable bind. Both are decided from the task alone, without
starting anything, so the run's preflight (farm/run/preflight.py) and ``LocalSandbox.start``
share these checks.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from farm.errors import UnsupportedTaskError
from farm.sandbox.build import ResolvedStep, literal_task_env, resolve_build_steps
from farm.tasks.model import Task

# Official images whose contents the host system can stand in for (a Debian-like userland
# with Python). Anything else carries contents of its own that only a container can provide.
GENERIC_IMAGES = frozenset({"python", "ubuntu", "debian", "buildpack-deps", "bash"})

# Top-level directories that come read-only from the host; the task may not write below them.
READ_ONLY_TOPS = frozenset({"usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev", "proc", "sys",
                            ".farm"})
ALWAYS_WRITABLE = ("tmp", "root", "tests", "logs", "solution")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# --- FROM -----------------------------------------------------------------------------------


def image_repository(image: str) -> str:
    """``docker.io/library/python:3.11-slim@sha256:..`` -> ``python``; keeps namespaces."""
    ref = image.split("@", 1)[0]
    parts = ref.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry, parts = parts[0], parts[1:]
        if registry not in ("docker.io", "index.docker.io", "registry-1.docker.io"):
            return ref.rsplit(":", 1)[0] if ":" in parts[-1] else ref
    if len(parts) == 2 and parts[0] == "library":
        parts = parts[1:]
    last = parts[-1].split(":", 1)[0]
    return "/".join(parts[:-1] + [last])


def check_image(task: Task, allow_any_image: bool = False) -> None:
    """Raise UnsupportedTaskError when the task needs an image's contents."""
    image = task.environment.image
    if image is None or allow_any_image or image_repository(image) in GENERIC_IMAGES:
        return
    raise UnsupportedTaskError(
        f"task {task.task_id} needs the contents of image {image}; the local backend runs tasks "
        "on the host system — use sandbox=docker or sandbox=kubernetes, or set "
        "sandbox.local.allow_any_image=true",
        reason="image_refused",
    )


def base_env(task: Task) -> dict[str, str]:
    """The environment the sandbox starts with, before the task's ENV steps."""
    return {"PATH": BASE_PATH, "HOME": "/root", "LANG": "C.UTF-8", **literal_task_env(task)}


# --- writable directories ------------------------------------------------------------------


def _top(path: str) -> str:
    parts = PurePosixPath(path).parts
    return parts[1] if len(parts) > 1 else ""


def writable_tops(task: Task, steps: list[ResolvedStep]) -> list[str]:
    """The top-level directories that get a private writable bind, checked for conflicts."""
    tops = list(ALWAYS_WRITABLE)
    wanted = [("workdir", task.environment.workdir)] + [
        (s.text, s.path) for s in steps if s.kind in ("workdir", "copy")
    ]
    for what, path in wanted:
        top = _top(path)
        if not top:
            raise UnsupportedTaskError(f"task {task.task_id}: {what} targets the root directory {path!r}; the local "
                                       "backend only writes below a top-level directory",
                                       reason="dockerfile_instruction")
        if top in READ_ONLY_TOPS:
            raise UnsupportedTaskError(
                f"task {task.task_id}: {what} writes below /{top} ({path}), which the local "
                "backend mounts read-only from the host; use sandbox=docker or sandbox=kubernetes",
                reason="dockerfile_instruction",
            )
        if top not in tops:
            tops.append(top)
    return tops


def plan_local(task: Task, allow_any_image: bool = False) -> tuple[dict[str, str], list[ResolvedStep], list[str]]:
    """The base environment, resolved build steps and writable top-level directories.

    Raises:
        UnsupportedTaskError: the image is refused (``image_refused``) or a WORKDIR/COPY writes
            where the local backend cannot (``dockerfile_instruction``).
        TaskFormatError: a build step is malformed.
    """
    check_image(task, allow_any_image)
    env = base_env(task)
    steps = resolve_build_steps(task, env)
    return env, steps, writable_tops(task, steps)
