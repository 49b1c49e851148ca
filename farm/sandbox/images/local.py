"""The engine's local image storage: what an image is (inspect), a per-tag build lock, and
which step a build log shows failing. Shared by the task-image builds (ensure.py) and the
SWE-bench stand-in builds (swebench/build.py)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from farm.sandbox.images.engine import run_engine
from farm.sandbox.images.plan import ImageFacts, sanitise
from farm.sandbox.pipefail import original_step


async def inspect_image(binary: str, ref: str) -> ImageFacts | None:
    """The image's id, ENV, WORKDIR and labels; None when the engine has no such image."""
    rc, out, _ = await run_engine(binary, "image", "inspect", ref, timeout=60)
    if rc != 0:
        return None
    data = json.loads(out)
    data = data[0] if isinstance(data, list) else data
    config = data.get("Config") or {}
    env = dict(e.split("=", 1) for e in (config.get("Env") or []) if "=" in e)
    labels = {**(data.get("Labels") or {}), **(config.get("Labels") or {})}
    return ImageFacts(str(data.get("Id", "")), env, config.get("WorkingDir") or None,
                      {str(k): str(v) for k, v in labels.items()})


def _lock_dir(lock_dir: Path | None) -> Path:
    return lock_dir or Path(os.environ.get("FARM_IMAGE_LOCK_DIR") or Path(tempfile.gettempdir()) / "farm-image-locks")


@contextlib.asynccontextmanager
async def tag_lock(tag: str, lock_dir: Path | None = None) -> AsyncIterator[None]:
    """An exclusive cross-process lock per tag (flock; polled so that cancellation is clean)."""
    folder = _lock_dir(lock_dir)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / (sanitise(tag) + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                await asyncio.sleep(0.2)
        yield
    finally:
        os.close(fd)  # releases the lock


_STEP_LINE = re.compile(r"^(?:STEP \d+/\d+: |Step \d+/\d+ : |#\d+ \[[^\]]+\] )(.+)$")


def failing_step(log: str) -> str | None:
    """The last build step the log shows starting (podman/buildah, legacy docker, BuildKit)."""
    step = None
    for line in log.splitlines():
        m = _STEP_LINE.match(line.strip())
        if m:
            step = original_step(m.group(1).strip())
    return step
