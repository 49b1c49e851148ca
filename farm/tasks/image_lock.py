"""Image references: registry override (mirrors) and digest locks.

A digest lock pins every task of a benchmark to the exact image the vendor measured with, so
a reproduction cannot silently run against a re-pushed ``:latest``. The semantics follow the
vendor's harness, with one deliberate difference: when an override
registry is applied, an unqualified Docker Hub name (``ubuntu``) becomes ``library/ubuntu``
under the mirror, which is where Docker Hub mirrors keep official images.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from farm.errors import ConfigError
from farm.tasks.model import Task

LOCK_DIR = Path(__file__).with_name("image_locks")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def is_qualified(image: str) -> bool:
    """True when the first path component names a registry host (has '.', ':' or is localhost)."""
    first, sep, _ = image.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


def split_reference(image: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of an image reference."""
    repo, _, digest = image.partition("@")
    tag = None
    slash = repo.rfind("/")
    colon = repo.rfind(":")
    if colon > slash:
        repo, tag = repo[:colon], repo[colon + 1:]
    return repo, tag, digest or None


def resolve_image_registry(image: str, override: str | None, default_registry: str | None = None) -> str:
    """Rewrite ``image`` to pull from ``override`` (or the source's default registry).

    With only a source default, qualified references stay as they are. Idempotent.
    """
    registry = override or default_registry
    if not registry:
        return image
    registry = registry.rstrip("/")
    if registry.startswith("/") or "://" in registry:
        raise ConfigError(
            f"image_registry: invalid value {registry!r}: must be a hostname with an optional path prefix"
        )
    if not override and is_qualified(image):
        return image
    if image.startswith(registry + "/"):
        return image
    path = image.split("/", 1)[1] if is_qualified(image) else image
    if "/" not in split_reference(path)[0]:
        path = f"library/{path}"
    return f"{registry}/{path}"


@dataclass(frozen=True)
class ImageLock:
    name: str
    digests: Mapping[str, str]  # task_id -> sha256:<hex>

    def image_for(self, task_id: str, image: str) -> str:
        digest = self.digests.get(task_id)
        if digest is None:
            raise ConfigError(
                f"image lock {self.name!r} has no digest for task {task_id!r}; "
                "refusing to run it unpinned (remove the lock or select locked tasks only)"
            )
        return f"{split_reference(image)[0]}@{digest}"


def lock_path(name_or_path: str) -> Path:
    """A bare name (``sweb-v-20260904``) is a packaged lock; anything else is a file path."""
    p = Path(name_or_path).expanduser()
    if p.suffix == ".json" or "/" in name_or_path:
        return p
    return LOCK_DIR / f"{name_or_path}.json"


def load_image_lock(name_or_path: str) -> ImageLock:
    path = lock_path(name_or_path)
    if not path.is_file():
        known = sorted(q.stem for q in LOCK_DIR.glob("*.json"))
        raise ConfigError(f"image_lock: {name_or_path!r} not found ({path}); packaged locks: {known}")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"image_lock {path}: not valid JSON: {exc}") from None
    images = payload.get("images") if isinstance(payload, dict) else None
    if not isinstance(images, list) or not images:
        raise ConfigError(f"image_lock {path}: expected a non-empty list under 'images'")
    digests: dict[str, str] = {}
    for i, row in enumerate(images):
        where = f"image_lock {path}: images[{i}]"
        if not isinstance(row, dict):
            raise ConfigError(f"{where}: expected an object, got {type(row).__name__}")
        task_id, digest = row.get("task_id"), row.get("digest")
        if not isinstance(task_id, str) or not task_id:
            raise ConfigError(f"{where}.task_id: invalid value {task_id!r}")
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise ConfigError(f"{where}.digest: invalid value {digest!r} (expected sha256:<64 hex>)")
        if task_id in digests:
            raise ConfigError(f"{where}.task_id: duplicate task id {task_id!r}")
        digests[task_id] = digest
    return ImageLock(name=path.stem, digests=digests)


def apply_image_policy(
    tasks: Iterable[Task],
    *,
    registry: str | None = None,
    default_registry: str | None = None,
    lock: ImageLock | None = None,
) -> list[Task]:
    """Registry override, then digest lock, for every task; fails on the first unlocked task.

    Called when a run is planned, so a missing lock entry stops the run before any pod exists.
    """
    out: list[Task] = []
    for task in tasks:
        image = task.environment.image
        if image is None:
            out.append(task)
            continue
        image = resolve_image_registry(image, registry, default_registry)
        if lock is not None:
            image = lock.image_for(task.task_id, image)
        out.append(replace(task, environment=replace(task.environment, image=image)))
    return out
