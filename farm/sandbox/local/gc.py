"""What crashed drivers left behind on this machine: bwrap staging dirs and their cgroups.

A driver killed with SIGKILL never ran ``LocalSandbox.close()``: its sandboxes died with it
(``--die-with-parent``) but their staging dirs and cgroups remain until collected here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from farm.sandbox.local.cgroups import CgroupLimits

OWNER_FILE = "bwrap.pid"  # "<pid> <start time>" of the sandbox's bwrap, for gc_local
CGROUPS_FILE = "cgroups"  # the sandbox's cgroup directories, one a line, for gc_local


def _rmtree(path: Path) -> None:
    def retry(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc's own words), or None when it
    is gone or a zombie: a crashed driver's bwrap may wait unreaped for a while (its new parent,
    PID 1 of a container or a VM, need not reap it at once), and it runs nothing any more."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def gc_local(root_dir: Path | None = None, min_age_s: float = 60.0, dry_run: bool = False) -> list[str]:
    """Remove what crashed drivers left behind: staging dirs whose bwrap is gone, with the
    cgroups recorded in them. Returns the paths removed (or, in a dry run, that would be)."""
    root = Path(root_dir) if root_dir else Path(tempfile.gettempdir()) / "farm-sandboxes"
    removed: list[str] = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if not d.is_dir():
            continue
        try:
            pid_s, start = (d / OWNER_FILE).read_text().split()
            alive = _start_time(int(pid_s)) == start
        except (OSError, ValueError):
            # no owner yet: a sandbox that is starting right now, unless it is old
            alive = time.time() - d.stat().st_mtime < min_age_s
        if alive:
            continue
        try:
            dirs = [Path(x) for x in (d / CGROUPS_FILE).read_text().split("\n") if x]
        except OSError:
            dirs = []
        if dirs and not dry_run:
            CgroupLimits(dirs, [], None, 0).remove()
        removed += [str(x) for x in dirs]
        if not dry_run:
            _rmtree(d)
        removed.append(str(d))
    return removed
