"""What the local (bubblewrap) backend can run: the task's image and its writable paths.

The local "image" is the host system, so a task qualifies only if its FROM names a generic
image the host can stand in for and its build writes only below top-level directories the
sandbox can give a private writable bind. Both are decided from the task alone, without
starting anything, so the run's preflight (farm/run/preflight.py) and ``LocalSandbox.start``
share these checks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from farm.errors import TaskFormatError, UnsupportedTaskError
from farm.sandbox.base import ImageProvenance
from farm.sandbox.replay import ResolvedStep, literal_task_env, resolve_build_steps
from farm.tasks.dockerfile import parse_cached
from farm.tasks.model import Task

# Official images whose contents the host system can stand in for (a Debian-like userland
# with Python). Anything else carries contents of its own that only a container can provide.
GENERIC_IMAGES = frozenset({"python", "ubuntu", "debian", "buildpack-deps", "bash"})

# Top-level directories that come read-only from the host; the task may not write below them.
READ_ONLY_TOPS = frozenset({"usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev", "proc", "sys",
                            ".farm"})
ALWAYS_WRITABLE = ("tmp", "root", "tests", "logs", "solution")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Under FROM python:* the official image's python is its own (/usr/local, no EXTERNALLY-MANAGED
# marker), so `pip install` works in its RUN steps; the host's python is the distribution's,
# which refuses (PEP 668) and is read-only here. The sandbox gets a writable environment of the
# host's python (a venv seeing the system packages) first on PATH instead (sandbox.py).
PYTHON_ENV = "/.farm/python"

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


def is_generic(image: str | None) -> bool:
    return image is None or image_repository(image) in GENERIC_IMAGES


def check_image(task: Task, allow_any_image: bool = False, prebuilt: str | None = None) -> None:
    """Raise UnsupportedTaskError when the task needs an image's contents.

    ``prebuilt``: the image the task names, when its Dockerfile is built here instead.
    """
    image = task.environment.image
    if allow_any_image or is_generic(image):
        return
    via = (f"names the prebuilt image {prebuilt}, which the local backend cannot provide, so it builds "
           f"the task's Dockerfile instead; that starts FROM {image}, whose contents" if prebuilt
           else f"needs the contents of image {image}, which")
    raise UnsupportedTaskError(
        f"task {task.task_id} {via} the host system cannot stand in for (generic bases: "
        f"{', '.join(sorted(GENERIC_IMAGES))}) — use sandbox=docker or sandbox=kubernetes, or set "
        "sandbox.local.allow_any_image=true to score at your own risk (rows marked image_unfaithful)",
        reason="image_refused",
    )


def local_view(task: Task) -> tuple[Task, str | None]:
    """The task as the local backend builds it, and the prebuilt image it replaces (or None).

    A task that names a prebuilt image (``docker_image``) and ships its Dockerfile loads
    without build steps: the image holds them. The host cannot provide that image, and running
    without the steps would be a different task, so here the Dockerfile is parsed and its FROM
    and steps are used instead.

    Raises:
        UnsupportedTaskError: (``dockerfile_instruction``) the Dockerfile cannot be read.
    """
    envr = task.environment
    if envr.dockerfile is None or envr.build_steps or not Path(envr.dockerfile).is_file():
        return task, None
    try:
        parsed = parse_cached(Path(envr.dockerfile))
    except UnsupportedTaskError:
        raise
    except TaskFormatError as exc:
        raise UnsupportedTaskError(f"task {task.task_id} names the prebuilt image {envr.image}, which the local "
                                   f"backend cannot provide, and its Dockerfile cannot be built here: {exc}",
                                   reason="dockerfile_instruction") from None
    view = replace(envr, image=parsed.image, build_steps=parsed.steps, env={**parsed.env, **envr.env})
    return replace(task, environment=view), envr.image


def wants_python_env(task: Task) -> bool:
    """Whether the task's FROM is an official python image (:data:`PYTHON_ENV`)."""
    image = task.environment.image
    return image is not None and image_repository(image) == "python"


def base_env(task: Task) -> dict[str, str]:
    """The environment the sandbox starts with, before the task's ENV steps."""
    path = f"{PYTHON_ENV}/bin:{BASE_PATH}" if wants_python_env(task) else BASE_PATH
    return {"PATH": path, "HOME": "/root", "LANG": "C.UTF-8", **literal_task_env(task)}


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


@dataclass(frozen=True)
class LocalPlan:
    task: Task  # as built here (local_view): the Dockerfile's FROM and steps for a prebuilt-image task
    env: dict[str, str]  # the base environment, before the ENV steps
    steps: list[ResolvedStep]
    tops: list[str]  # top-level directories with a private writable bind
    provenance: ImageProvenance
    python_env: bool = False  # make PYTHON_ENV before the build steps (FROM python:*)


def plan_local(task: Task, allow_any_image: bool = False) -> LocalPlan:
    """How the local backend builds the task, decided without starting anything.

    Never drops build steps: a prebuilt-image task is built from its Dockerfile or refused.
    ``allow_any_image`` lets a non-generic base through on the host system; such a row is
    marked ``unfaithful`` (the score is not comparable).

    Raises:
        UnsupportedTaskError: the image is refused (``image_refused``) or a step cannot be
            honoured here (``dockerfile_instruction``: COPY --from, a write below /usr, ...).
        TaskFormatError: a build step is malformed.
    """
    view, prebuilt = local_view(task)
    check_image(view, allow_any_image, prebuilt)
    env = base_env(view)
    steps = resolve_build_steps(view, env)
    unfaithful = not is_generic(view.environment.image)  # only allow_any_image lets such a task through
    return LocalPlan(view, env, steps, writable_tops(view, steps), ImageProvenance("host", unfaithful=unfaithful),
                     python_env=wants_python_env(view))
