"""Keeping farm's task-image builds from filling the engine's disk.

A Terminal-Bench run builds one image per task (0.2-2 GB each, 89 tasks), so a long run on a
workstation fills the disk unless old builds go. Only images farm built are touched: they carry
the ``io.farm.task`` label (:mod:`farm.sandbox.images.engine`), so a user's own images and the stand-in
bases are never removed. An image a container still uses is skipped (the engine refuses to
remove it without ``--force``, which farm never passes).

* :func:`evict_for_space` — before a build, remove the oldest farm builds until the engine's
  storage has ``sandbox.docker.image_min_free_gb`` free (the run's own tag is kept);
* :func:`prune` — ``farm images prune``: remove builds whose task's Dockerfile, context or
  base image has changed since (their digest is no longer any selected task's), or every
  build of the selected tasks with ``--all``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from farm.sandbox.images.engine import DIGEST_LABEL, TASK_LABEL, run_engine
from farm.sandbox.images.plan import local_build_digest
from farm.tasks.model import Task

GIB = 1024 ** 3


@dataclass(frozen=True)
class BuiltImage:
    """One image farm built, as the engine lists it."""

    image_id: str
    refs: tuple[str, ...]  # its tags (may be empty for a dangling build)
    task: str  # the io.farm.task label: <benchmark>/<task>
    digest: str  # the io.farm.build-digest label
    created: float  # seconds since the epoch
    size: int  # bytes, as the engine reports (shared layers counted in each image)


async def storage_root(binary: str) -> Path:
    """Where the engine keeps its images (podman's graph root, docker's root dir)."""
    rc, out, _ = await run_engine(binary, "info", "--format", "json", timeout=60)
    if rc == 0:
        try:
            info = json.loads(out)
        except ValueError:
            info = {}
        root = (info.get("store") or {}).get("graphRoot") or info.get("DockerRootDir")
        if root and Path(root).exists():
            return Path(root)
    return Path("/var/lib/containers/storage" if Path("/var/lib/containers/storage").exists() else "/")


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def _created(value: object) -> float:
    """podman gives seconds since the epoch; docker "2026-12-01 16:00:00 +0000 UTC"."""
    if isinstance(value, (int, float)):
        return float(value)
    from datetime import UTC, datetime

    try:
        return datetime.strptime(str(value)[:19].replace("T", " "), "%Y-%m-%d %H:%M:%S").replace(
            tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


async def built_images(binary: str) -> list[BuiltImage]:
    """Every image carrying farm's task label, oldest first.

    Raises:
        RuntimeError: the engine could not list its images.
    """
    rc, out, err = await run_engine(binary, "images", "--filter", f"label={TASK_LABEL}",
                                    "--format", "json", timeout=120)
    if rc != 0:
        raise RuntimeError(f"{binary} images failed: {err.strip()[-300:]}")
    text = out.strip()
    # podman prints one JSON array; docker one JSON object per line
    rows = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines() if line]
    seen: dict[str, BuiltImage] = {}
    for row in rows:
        image_id = str(row.get("Id") or row.get("ID") or "")
        labels = row.get("Labels") or {}
        if isinstance(labels, str):  # docker: "k=v,k=v"
            labels = dict(kv.split("=", 1) for kv in labels.split(",") if "=" in kv)
        names = row.get("Names") or ([f"{row['Repository']}:{row['Tag']}"]
                                     if row.get("Repository") not in (None, "<none>") else [])
        size = row.get("Size") or 0
        seen[image_id] = BuiltImage(image_id, tuple(names), str(labels.get(TASK_LABEL, "")),
                                    str(labels.get(DIGEST_LABEL, "")),
                                    _created(row.get("Created") or row.get("CreatedAt")),
                                    int(size) if isinstance(size, (int, float)) else 0)
    return sorted(seen.values(), key=lambda b: b.created)


async def remove(binary: str, image: BuiltImage) -> bool:
    """Remove one build (never forced: an image in use stays). True when it is gone."""
    rc, _, _ = await run_engine(binary, "rmi", image.image_id, timeout=300)
    return rc == 0


async def evict_for_space(binary: str, min_free_bytes: int, *, keep: frozenset[str] = frozenset(),
                          root: Path | None = None,
                          select: Callable[[BuiltImage], bool] | None = None) -> list[BuiltImage]:
    """Remove farm's oldest builds until ``min_free_bytes`` are free where the engine stores images.

    ``keep``: tags not to remove (the build about to be used); ``select``: which of farm's builds
    may go (default all). Returns what was removed; stops early, without error, when nothing
    removable is left (the build then runs and may fail on the disk, which its log says).
    """
    where = root or await storage_root(binary)
    if free_bytes(where) >= min_free_bytes:
        return []
    removed: list[BuiltImage] = []
    for image in await built_images(binary):
        if keep.intersection(image.refs) or (select is not None and not select(image)):
            continue
        if await remove(binary, image):
            removed.append(image)
        if free_bytes(where) >= min_free_bytes:
            break
    return removed


async def current_digests(binary: str, tasks: list[Task]) -> dict[str, str]:
    """``<benchmark>/<task>`` -> the digest its build would have now (its files and its bases as
    the engine has them), for tasks with a Dockerfile."""
    out: dict[str, str] = {}
    for task in tasks:
        digest = await local_build_digest(binary, task)
        if digest is not None:
            out[f"{task.benchmark}/{task.task_id}"] = digest
    return out


async def prune(binary: str, tasks: list[Task], *, everything: bool = False) -> list[BuiltImage]:
    """Remove the selected tasks' stale builds (or all their builds with ``everything``).

    A build is stale when its digest label differs from what the task's files give now. Builds
    of tasks outside the selection are left alone, so pruning one benchmark keeps another's.
    """
    wanted = await current_digests(binary, tasks)
    removed: list[BuiltImage] = []
    for image in await built_images(binary):
        if image.task not in wanted:
            continue
        if everything or image.digest != wanted[image.task]:
            if await remove(binary, image):
                removed.append(image)
    return removed
