"""What a container backend does to get a task's image, and the names it gets.

``sandbox.image_policy`` decides (:func:`plan_image`):

* ``pull`` — run the image the task names (its ``docker_image``, else its Dockerfile's FROM
  with the build steps replayed on the running container: farm's behaviour before builds);
* ``build`` — build ``environment/Dockerfile`` with the engine's own ``build``;
* ``pull-or-build`` (default) — a task that names a prebuilt image runs it when it is present
  or pulls, and builds its Dockerfile otherwise; a task whose image *is* its Dockerfile (no
  ``docker_image``) is built.

A build is tagged by content (:func:`build_digest`: the Dockerfile, every file of the build
context and the identity of each image its FROM lines read, with a format version), so an
existing tag is the same build and is reused (:mod:`farm.sandbox.images.ensure` gets the image
there). A base's identity is its local image id as the engine sees it at build time
(:func:`base_identities`), so a base rebuilt under the same tag gives the task a new tag
instead of the stale build on the old base. A tag in a registry (``farm images build --push``,
a cluster's ``build_registry``) is keyed by the task's files alone: a cluster cannot ask the
build machine's engine, and each push replaces what the tag serves.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from farm.errors import ConfigError, FarmError
from farm.sandbox.images.engine import STANDIN_LABEL, run_engine
from farm.tasks.dockerfile import parse_cached
from farm.tasks.model import Task

FORMAT_VERSION = 2  # bump when what goes into a build (flags, labels, the RUN rewrite) changes its result
TAG_REPOSITORY = "farm-task"
POLICIES = ("pull", "build", "pull-or-build")


@dataclass(frozen=True)
class ImagePlan:
    named: str | None  # the image the task names (docker_image or FROM), tried first when pull_first
    pull_first: bool  # run the named image when it is present or pulls
    build: bool  # build environment/Dockerfile (after a failed pull, when pull_first)
    replay: bool  # replay the task's interpreted build steps on the running container

    @property
    def describe(self) -> str:
        if self.pull_first and self.build:
            return f"pull {self.named}, else build the Dockerfile"
        return "build the Dockerfile" if self.build else f"pull {self.named}"


def dockerfile_of(task: Task) -> Path | None:
    path = task.environment.dockerfile
    return Path(path) if path is not None and Path(path).is_file() else None


def plan_image(task: Task, policy: str, named: str | None = None) -> ImagePlan:
    """What a container backend does to get the task's image under ``policy``.

    ``named`` is the task's image after the registry mirror and digest lock (default: as the
    task names it).

    Raises:
        ConfigError: an unknown policy.
    """
    if policy not in POLICIES:
        raise ConfigError(f"invalid value {policy!r} for 'sandbox.image_policy': choose one of {list(POLICIES)}")
    named = named if named is not None else task.environment.image
    dockerfile = dockerfile_of(task)
    if dockerfile is None or policy == "pull":
        return ImagePlan(named, pull_first=True, build=False, replay=True)
    # the loader parses the Dockerfile into build steps only when the task names no image of its
    # own: then the named image is just the base, and the task's image is what the build makes
    prebuilt = not task.environment.build_steps
    if policy == "pull-or-build" and prebuilt and named:
        return ImagePlan(named, pull_first=True, build=True, replay=False)
    return ImagePlan(named, pull_first=False, build=True, replay=False)


def build_digest(dockerfile: Path, context: Path | None, bases: Mapping[str, str] | None = None) -> str:
    """sha256 over the format version, the Dockerfile, each context file (path, mode, bytes) and
    ``bases`` (FROM reference -> identity, :func:`base_identities`; None for a registry tag).

    Files a ``.dockerignore`` leaves out still count: a change there costs one rebuild, never
    a stale image. Read in full at every start (task contexts are kilobytes to a few MB): a
    cache keyed by mtime could miss an edit within the filesystem's timestamp resolution.
    """
    h = hashlib.sha256(f"farm-image-build v{FORMAT_VERSION}\0".encode())
    h.update(b"Dockerfile\0" + dockerfile.read_bytes() + b"\0")
    for ref, ident in sorted((bases or {}).items()):
        h.update(f"base\0{ref}\0{ident}\0".encode())
    for rel, path, st in _context_files(context) if context is not None else []:
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        h.update(f"{rel}\0{st.st_mode:o}\0{len(data)}\0".encode() + data)
    return h.hexdigest()


def _context_files(context: Path) -> list[tuple[str, Path, os.stat_result]]:
    out = []
    for root, dirs, names in os.walk(context):
        dirs.sort()
        for name in sorted(names) + [d for d in dirs if Path(root, d).is_symlink()]:
            path = Path(root, name)
            st = path.lstat()
            out.append((path.relative_to(context).as_posix(), path, st))
    out.sort(key=lambda t: t[0])
    return out


def sanitise(text: str) -> str:
    """``text`` as a name that is valid in an image tag and as a file name."""
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower())
    name = re.sub(r"([._-])[._-]+", r"\1", name).strip("._-")
    return name[:120].rstrip("._-") or "task"


def task_tag(task: Task, digest: str, registry: str | None = None) -> str:
    """``<registry>/farm-task/<benchmark>-<task_id>:<digest[:16]>`` (registry default localhost)."""
    prefix = registry_prefix(registry) if registry else "localhost"
    return f"{prefix}/{TAG_REPOSITORY}/{sanitise(f'{task.benchmark}-{task.task_id}')}:{digest[:16]}"


def registry_prefix(value: str, key: str = "sandbox.kubernetes.build_registry") -> str:
    """A registry (``host[:port][/path]``) that built images are pushed to and pulled from.

    Raises:
        ConfigError: a scheme, whitespace, a tag or an empty value.
    """
    text = str(value).strip().rstrip("/")
    if not text or "://" in text or re.search(r"\s|@", text) or not re.fullmatch(
            r"[A-Za-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)*", text):
        raise ConfigError(f"invalid value {value!r} for '{key}': expected host[:port][/path] "
                          "(no scheme, no tag), e.g. registry.example.com:5000/farm")
    return text


def build_context(task: Task, dockerfile: Path) -> Path:
    """The directory the engine builds in (the Dockerfile's own when the task names none)."""
    return task.environment.build_context or dockerfile.parent


def task_build_tag(task: Task, registry: str | None = None, bases: Mapping[str, str] | None = None) -> str | None:
    """The content-hashed tag of the task's Dockerfile build; None without a Dockerfile.

    ``bases``: the FROM images' identities (:func:`base_identities`) — given for the engine's
    local tag, left out for a registry tag (see the module doc).
    """
    dockerfile = dockerfile_of(task)
    if dockerfile is None:
        return None
    return task_tag(task, build_digest(dockerfile, build_context(task, dockerfile), bases), registry)


def from_images(dockerfile: Path) -> tuple[str, ...]:
    """Every external image the Dockerfile's FROM lines read; none when it cannot be parsed
    (the build then fails with the engine's own message, as before)."""
    try:
        return parse_cached(dockerfile).base_images
    except FarmError:
        return ()


async def base_identities(binary: str, dockerfile: Path, *, pull: bool = False) -> dict[str, str]:
    """FROM reference -> the engine's local image id, or the reference itself when the image is
    not present (the build then fails, or pulls it, as before). One ``image inspect`` per
    distinct base: the check that a base rebuilt under the same tag is noticed.

    ``pull``: an absent base is pulled first (what the build would do anyway), so that the tag
    names the base the build will use and the next start, finding it present, computes the
    same tag; a failed pull leaves the reference (the build then reports it).
    """
    refs = sorted(set(from_images(dockerfile)))

    async def inspect(ref: str) -> str:
        rc, out, _ = await run_engine(binary, "image", "inspect", "--format", "{{.Id}}", ref, timeout=60)
        return out.strip().splitlines()[0] if rc == 0 and out.strip() else ""

    async def one(ref: str) -> str:
        ident = await inspect(ref)
        if not ident and pull:
            rc, _, _ = await run_engine(binary, "pull", ref, timeout=1800)
            ident = await inspect(ref) if rc == 0 else ""
        return ident or ref

    return dict(zip(refs, await asyncio.gather(*(one(r) for r in refs)), strict=True))


async def local_build_digest(binary: str, task: Task) -> str | None:
    """The digest of the task's build on this engine (its bases as present now); None without
    a Dockerfile. What ``farm run``, ``farm images build`` and ``farm images check`` all tag."""
    dockerfile = dockerfile_of(task)
    if dockerfile is None:
        return None
    bases = await base_identities(binary, dockerfile)
    return build_digest(dockerfile, build_context(task, dockerfile), bases)


async def local_build_tag(binary: str, task: Task) -> str | None:
    """The engine-local tag of the task's build (:func:`local_build_digest`)."""
    digest = await local_build_digest(binary, task)
    return task_tag(task, digest) if digest is not None else None


@dataclass
class ImageFacts:
    """What `<engine> image inspect` says about an image."""

    image_id: str
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def standin(self) -> bool:
        return self.labels.get(STANDIN_LABEL, "").lower() == "true"
