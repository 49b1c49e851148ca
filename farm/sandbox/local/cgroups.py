"""Per-sandbox resource limits with Linux cgroups (v1 controllers or the v2 hierarchy).

Used where the kernel lets us (root on this machine): a group per sandbox with memory, pids
and CPU quota from the task's resources, and the CPU seconds it used read back on close. When
cgroups are not writable, ``CgroupLimits.create`` raises ``CgroupUnavailable`` and the sandbox
runs without limits (and says so in its stats).

Inside each sandbox group a child group, ``commands``, holds every process the agent's commands
start, with the sandbox's limits less a reserve kept for the sandbox agent (issue 40): a fork
bomb fills the commands' pids and a memory blow-up meets the OOM killer there, while the agent
still has pids to spawn the next command and memory to answer. The agent moves each command
into it through descriptors opened here (``command_fds``): writing ``0`` to a ``cgroup.procs``
moves the writer, and needs nothing more than the open descriptor, so the sandbox needs no view
of /sys/fs/cgroup. What the limits did is read back as ``LimitEvents`` (how often the commands
met their pids limit, how many of their processes the OOM killer took, and the same for the
agent's group), the evidence a trial row keeps to say whose the failure was.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import time
from pathlib import Path

from farm.sandbox.base import LimitEvents
from farm.sandbox.inside.contain import CGROUP_ENV, FREEZER_ENV, HOME_ENV
from farm.tasks.model import Resources

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
COMMANDS = "commands"  # the child group of the agent's commands
# what the sandbox agent keeps for itself (its threads, the jail's holder and init, the init's
# standby for a forked command; ~60 MiB resident): an eighth of the limit, capped
AGENT_PIDS_RESERVE = 64
AGENT_PIDS_FLOOR = 16
AGENT_MEMORY_RESERVE_MB = 192
AGENT_MEMORY_FLOOR_MB = 64
COMMANDS_CPU_SHARES = 2


def command_limits(res: Resources) -> tuple[int, int]:
    """(memory MiB, pids) for the commands' group: the sandbox's limits less the agent's reserve
    (0: no limit, as in ``res``). The reserve is an eighth, within [floor, cap], and never more
    than half: the agent alone (pinned, with the jail's two helpers) holds ~45 MiB and a dozen
    pids, which an eighth of a small sandbox would not cover."""
    def reserve(total: int, floor: int, cap: int) -> int:
        return min(cap, max(floor, total // 8), total // 2)

    memory = res.memory_mb - reserve(res.memory_mb, AGENT_MEMORY_FLOOR_MB, AGENT_MEMORY_RESERVE_MB) \
        if res.memory_mb > 0 else 0
    pids = res.pids - reserve(res.pids, AGENT_PIDS_FLOOR, AGENT_PIDS_RESERVE) if res.pids > 0 else 0
    return max(memory, 1) if res.memory_mb > 0 else 0, max(pids, 1) if res.pids > 0 else 0


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

    def __init__(self, dirs: list[Path], applied: list[str], cpu_usage: tuple[Path, str] | None, version: int,
                 command_dirs: list[Path] | None = None) -> None:
        # every group, sandbox groups before their commands' child groups (removal goes backwards)
        self.dirs = dirs + [d for d in command_dirs or [] if d not in dirs]
        self.sandbox_dirs = dirs
        self.command_dirs = list(command_dirs or [])
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
        commands: list[Path] = []
        applied: list[str] = []
        cpu_usage = None
        seen: set[Path] = set()
        try:
            for ctrl in ("memory", "pids", "cpu", "cpuacct", "freezer"):
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
                if ctrl in ("memory", "pids", "freezer") or (d / "cpu.shares").exists():
                    commands.append(cls._commands_v1(d, ctrl, res))
            if not dirs:
                raise OSError("no memory/pids/cpu controller mounted")
        except OSError:
            cls(dirs, applied, None, 1, commands).remove()
            raise
        if commands:
            applied.append("commands contained")
        return cls(dirs, applied, cpu_usage, 1, commands)

    @staticmethod
    def _commands_v1(parent: Path, ctrl: str, res: Resources) -> Path:
        memory_mb, pids = command_limits(res)
        d = parent / COMMANDS
        d.mkdir()
        if ctrl == "memory" and memory_mb > 0:
            (d / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
        if ctrl == "pids" and pids > 0:
            (d / "pids.max").write_text(str(pids))
        if (d / "cpu.shares").exists():
            # the kernel's least weight: under the sandbox's CPU quota the agent's own threads
            # run before any command, so a command that spins on every core cannot starve it
            (d / "cpu.shares").write_text(str(COMMANDS_CPU_SHARES))
        return d

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
        joins = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.sandbox_dirs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "farm-sandbox"] + argv

    def command_fds(self, parents: bool = False) -> list[int]:
        """Write-only descriptors of the commands' ``cgroup.procs`` files (``parents``: of the
        sandbox's groups above them), for the sandbox agent (inherited through bwrap; the
        caller closes its own copies once bwrap started)."""
        fds: list[int] = []
        try:
            for d in self.command_dirs:
                fds.append(os.open((d.parent if parents else d) / "cgroup.procs", os.O_WRONLY))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def freezer_fd(self) -> int | None:
        """A write-only descriptor of the commands' ``freezer.state`` (None: no freezer): the
        agent stops every command at once with it before it ends a fork bomb (procs.py)."""
        for d in self.command_dirs:
            if (d / "freezer.state").exists():
                return os.open(d / "freezer.state", os.O_WRONLY)
        return None

    def hand_over(self) -> tuple[list[int], dict[str, str]]:
        """What the sandbox agent gets (inside/contain.py): the descriptors to pass to bwrap
        (the caller closes its copies once bwrap started) and the environment naming them:
        the commands' groups and, in the same order, the sandbox's own (where the agent lives)."""
        fds = self.command_fds()
        env = {CGROUP_ENV: ",".join(map(str, fds))}
        home = self.command_fds(parents=True)
        fds += home
        env[HOME_ENV] = ",".join(map(str, home))
        freezer = self.freezer_fd()
        if freezer is not None:
            fds.append(freezer)
            env[FREEZER_ENV] = str(freezer)
        return fds, env

    def events(self) -> LimitEvents:
        """The kernel's counters of what the limits did (zero where a file is missing)."""
        def count(d: Path | None, name: str, key: str) -> int:
            if d is None:
                return 0
            try:
                for line in (d / name).read_text().splitlines():
                    k, _, v = line.partition(" ")
                    if k == key:
                        return int(v)
            except (OSError, ValueError):
                pass
            return 0

        def find(dirs: list[Path], ctrl_file: str) -> Path | None:
            return next((d for d in dirs if (d / ctrl_file).exists()), None)

        # v1 counts OOM kills in memory.oom_control, v2 in memory.events; both say "oom_kill N"
        oom_file = "memory.oom_control" if self.version == 1 else "memory.events"
        cmd_pids, cmd_mem = find(self.command_dirs, "pids.max"), find(self.command_dirs, oom_file)
        box_pids, box_mem = find(self.sandbox_dirs, "pids.max"), find(self.sandbox_dirs, oom_file)
        counts = {"commands": (count(cmd_pids, "pids.events", "max"), count(cmd_mem, oom_file, "oom_kill")),
                  "agent": (count(box_pids, "pids.events", "max"), count(box_mem, oom_file, "oom_kill"))}
        hit = {who: tuple(name for name, n in (("memory", oom), ("pids", forks)) if n)
               for who, (forks, oom) in counts.items()}
        evidence = "; ".join(f"{who}: pids limit met {forks}x, OOM kills {oom}" for who, (forks, oom) in counts.items())
        return LimitEvents(commands=hit["commands"], agent=hit["agent"], evidence=f"cgroup v{self.version} {evidence}")

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
        # a frozen process takes its SIGKILL only once thawed: an agent that died between the
        # freeze and the thaw of a fork bomb's kill (procs.py end_command) would otherwise leave
        # thousands of frozen shells that no kill ends and a group that cannot be removed
        for d in self.dirs:
            try:
                (d / "freezer.state").write_text("THAWED")
            except OSError:
                pass  # no freezer here, or the group is gone
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


