"""A Harbor task directory on disk, for the image tests (tests/sandbox/test_images*.py, test_image_cache.py)."""

from __future__ import annotations

from pathlib import Path

from farm.tasks.harbor import load_harbor_task
from farm.tasks.model import Task


def harbor_task(root: Path, dockerfile: str, *, docker_image: str | None = None, files: dict[str, str] | None = None,
                name: str = "t") -> Task:
    """A Harbor task directory on disk, loaded by farm's own loader."""
    d = root / name
    (d / "environment").mkdir(parents=True, exist_ok=True)
    (d / "tests").mkdir(exist_ok=True)
    image = f'docker_image = "{docker_image}"\n' if docker_image else ""
    (d / "task.toml").write_text(f'version = "1.0"\n[environment]\n{image}')
    (d / "instruction.md").write_text("do it\n")
    (d / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, text in (files or {}).items():
        (d / "environment" / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / "environment" / rel).write_text(text)
    return load_harbor_task(d, "bench")
