"""Per-sandbox resource limits with Linux cgroups (v1 controllers or the v2 hierarchy).

Used where the kernel lets us (root on this machine): a group per sandbox with memory, pids
and CPU quota from the task's resources, and the CPU seconds it used read back on close. When
cgroups are not writable, ``CgroupLimits.create`` raises ``CgroupUnavailable`` and the sandbox
runs without limits (and says so in its stats).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import time
from pathlib import Path

from farm.tasks.model import Resources

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


class CgroupUnavailable(Exception):
    """No writable cgroup hierarchy: the sandbox runs without limits (the reason says why)."""


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for cgroup v2) -> this process's group path."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
            out[c] = path
    return out


class CgroupLimits:
    """Per-sandbox cgroups below this process's own: v1 controllers if mounted, else v2.

    The bwrap process joins them before it execs (a small ``sh`` wrapper writes its pid into
    every ``cgroup.procs``), so nothing in the sandbox ever runs outside them.
    """

    def __init__(self, dirs: list[Path], applied: list[str], cpu_usage: tuple[Path, str] | None, version: int) -> None:
        self.dirs = dirs
        self.applied = applied
        self.cpu_usage = cpu_usage
        self.version = version

    @classmethod
    def create(cls, name: str, res: Resources) -> CgroupLimits:
        own = _own_cgroups()
        reasons: list[str] = []
        if (CGROUP_ROOT / "memory" / "cgroup.procs").exists() or (CGROUP_ROOT / "pids" / "cgroup.procs").exists():
            try:
                return cls._create_v1(name, res, own)
            except OSError as e:
                reasons.append(f"cgroup v1: {e}")
        unified = CGROUP_ROOT / "unified" if (CGROUP_ROOT / "unified" / "cgroup.procs").exists() else CGROUP_ROOT
        if (unified / "cgroup.controllers").exists() and "" in own:
            try:
                return cls._create_v2(name, res, unified / own[""].lstrip("/"))
            except OSError as e:
                reasons.append(f"cgroup v2: {e}")
        raise CgroupUnavailable("; ".join(reasons) or "no cgroup hierarchy mounted at /sys/fs/cgroup")

    @classmethod
    def _create_v1(cls, name: str, res: Resources, own: dict[str, str]) -> CgroupLimits:
        dirs: list[Path] = []
        applied: list[str] = []
        cpu_usage = None
        seen: set[Path] = set()
        try:
            for ctrl in ("memory", "pids", "cpu", "cpuacct"):
                mount = CGROUP_ROOT / ctrl
                if ctrl not in own or not (mount / "cgroup.procs").exists():
                    continue
                d = mount / own[ctrl].lstrip("/") / f"farm-{name}"
                if d.resolve() in seen:  # cpu,cpuacct co-mounted
                    continue
                d.mkdir()
                seen.add(d.resolve())
                dirs.append(d)
                if ctrl == "memory" and res.memory_mb > 0:
                    (d / "memory.limit_in_bytes").write_text(str(res.memory_mb << 20))
                    applied.append(f"memory={res.memory_mb}MiB")
                if ctrl == "pids" and res.pids > 0:
                    (d / "pids.max").write_text(str(res.pids))
                    applied.append(f"pids={res.pids}")
                if (d / "cpu.cfs_quota_us").exists() and res.cpus > 0:
                    (d / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                    (d / "cpu.cfs_quota_us").write_text(str(int(res.cpus * CPU_PERIOD_US)))
                    applied.append(f"cpus={res.cpus:g}")
                if (d / "cpuacct.usage").exists():
                    cpu_usage = (d / "cpuacct.usage", "ns")
            if not dirs:
                raise OSError("no memory/pids/cpu controller mounted")
        except OSError:
            cls(dirs, applied, None, 1).remove()
            raise
        return cls(dirs, applied, cpu_usage, 1)

    @classmethod
    def _create_v2(cls, name: str, res: Resources, parent: Path) -> CgroupLimits:
        d = parent / f"farm-{name}"
        # enabling controllers for children can fail (no-internal-process rule): limits that
        # are then missing are reported, not fatal
        for ctrl in ("memory", "pids", "cpu"):
            try:
                (parent / "cgroup.subtree_control").write_text(f"+{ctrl}")
            except OSError:
                pass
        d.mkdir()
        applied: list[str] = []
        try:
            if (d / "memory.max").exists() and res.memory_mb > 0:
                (d / "memory.max").write_text(str(res.memory_mb << 20))
                applied.append(f"memory={res.memory_mb}MiB")
            if (d / "pids.max").exists() and res.pids > 0:
                (d / "pids.max").write_text(str(res.pids))
                applied.append(f"pids={res.pids}")
            if (d / "cpu.max").exists() and res.cpus > 0:
                (d / "cpu.max").write_text(f"{int(res.cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}")
                applied.append(f"cpus={res.cpus:g}")
        except OSError:
            cls([d], applied, None, 2).remove()
            raise
        return cls([d], applied, (d / "cpu.stat", "usage_usec"), 2)

    def describe(self) -> str:
        return f"cgroup v{self.version}: " + (", ".join(self.applied) or "accounting only")

    def wrap(self, argv: list[str]) -> list[str]:
        joins = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "farm-sandbox"] + argv

    def cpu_seconds(self) -> float | None:
        if self.cpu_usage is None:
            return None
        path, unit = self.cpu_usage
        try:
            text = path.read_text()
            if unit == "ns":
                return int(text.strip()) / 1e9
            for line in text.splitlines():
                k, _, v = line.partition(" ")
                if k == unit:
                    return int(v) / 1e6
        except (OSError, ValueError):
            pass
        return None

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return out

    def remove(self) -> None:
        """Kill whatever is still in the groups, then delete them."""
        deadline = time.monotonic() + 5.0
        while True:
            left = self.pids()
            if not left or time.monotonic() > deadline:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        for d in reversed(self.dirs):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY until the last task has fully exited
                    time.sleep(0.02)
            else:
                log.warning("could not remove cgroup %s", d)


