"""One filled toolbox volume for every container sandbox of one toolbox image and one farm version.

A container sandbox mounts, read-only at ``/.farm``, a volume holding the standalone Python and
the sandbox agent's programs, filled by the toolbox init container (relayed/manifests.py). Made
per sandbox, that fill was half of a start from a cached image (~0.6 of 1.2 s on podman,
docs/performance.md). Its content depends only on the toolbox image and on the init command,
which carries the agent's programs; the task container cannot write to it. So the volume is
made once per (toolbox image ID, init command) and shared:

* its name is ``farm-toolbox-<digest>``; it carries ``farm.dev/toolbox`` and not the sandboxes'
  labels, so ``farm gc`` (which removes the volumes of dead runs, containers using them
  included) never touches it; ``<engine> volume prune`` removes it once no container uses it;
* it is used only once the marker ``.farm-toolbox-ready`` is in it, written from this host
  after the fill succeeded; a volume without it (a fill that died) is made again and filled;
* the check and the fill run under a lock: an asyncio one in this process, and ``flock`` on a
  file beside the engine's volumes for other processes on the machine (the fill overwrites
  files a running sandbox may be reading, so it must never run once the marker is there);
* where this host cannot see the volume's mount point (a remote engine, another user's
  storage), ``shared_volume`` returns None and the sandbox fills a volume of its own as before.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from farm.sandbox.images.engine import engine

LABEL = "farm.dev/toolbox"
READY = ".farm-toolbox-ready"
LOCKS = Path(os.environ.get("FARM_TOOLBOX_LOCKS", "/var/tmp/farm-toolbox-locks"))

_locks: dict[str, asyncio.Lock] = {}


def volume_name(image_id: str, command: Sequence[str]) -> str:
    digest = hashlib.sha256(json.dumps([image_id, list(command)]).encode()).hexdigest()
    return f"farm-toolbox-{digest[:20]}"


async def shared_volume(binary: str, image: str, command: Sequence[str],
                        fill: Callable[[str], list[str]]) -> str | None:
    """The name of the filled shared volume for ``image`` and its init ``command`` (made, and
    filled by the engine command ``fill(volume name)``, if needed), or None where it cannot be
    shared.

    Raises:
        SandboxStartError: the engine failed (inspecting the image, making or filling the volume).
    """
    image_id = (await engine(binary, "image", "inspect", "--format", "{{.Id}}", image, check=False)).strip()
    if not image_id:
        return None  # not present here: the sandbox's own init container pulls it as before
    name = volume_name(image_id, command)
    lock = _locks.setdefault(name, asyncio.Lock())
    async with lock:
        try:
            LOCKS.mkdir(parents=True, exist_ok=True)
            fd = os.open(LOCKS / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None
        try:
            while True:  # polled, not a blocking flock in a thread: a cancelled start leaves no waiter
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.05)
            return await _ready(binary, name, image_id, fill)
        finally:
            os.close(fd)  # releases the flock


async def _ready(binary: str, name: str, image_id: str, fill: Callable[[str], list[str]]) -> str | None:
    where = await _mount_point(binary, name)
    if where is not None and (where / READY).exists():
        return name
    # none yet, or a fill that died (the init script cannot fill over its own leftovers): a new
    # one. A remove without -f never takes a container with it; one that is in use (a container
    # started on it by hand) stays, and this sandbox fills its own
    if await _exists(binary, name):
        await engine(binary, "volume", "rm", name, check=False)
        if await _exists(binary, name):
            return None
    await engine(binary, "volume", "create", "--label", f"{LABEL}={image_id}", name)
    where = await _mount_point(binary, name)
    if where is None:
        await engine(binary, "volume", "rm", name, check=False)
        return None  # this host cannot see it: the sandbox fills its own
    await engine(binary, *fill(name))
    (where / READY).write_text(image_id + "\n")
    return name


async def _exists(binary: str, name: str) -> bool:
    out = await engine(binary, "volume", "ls", "--quiet", "--filter", f"name=^{name}$", check=False)
    return name in out.split()


async def _mount_point(binary: str, name: str) -> Path | None:
    """The volume's directory on this host, if it exists and this host can see it."""
    out = await engine(binary, "volume", "inspect", "--format", "{{.Mountpoint}}", name, check=False)
    path = out.strip()
    if not path or not os.path.isdir(path):
        return None
    return Path(path)
