"""What a container's own limits did during a trial (issue 40), as ``LimitEvents``.

Two sources, both the container's own evidence:

* **its cgroup's counters**, read from the host where the engine runs on this machine with
  cgroups visible (podman or docker as root): how many processes the OOM killer took at the
  container's memory limit (``memory.oom_control`` ``oom_kill`` on cgroup v1, ``memory.events``
  on v2) and how often a fork met its pids limit (``pids.events`` ``max``). The cgroup is found
  once, from the container's init PID's ``/proc/<pid>/cgroup``, while the container runs: the
  engine removes the group when the container ends, so the counters are read again whenever the
  sandbox looks lost and before it is removed, and the last reading is kept;
* **the engine's ``State.OOMKilled``**, read by the inspect that a lost channel makes anyway
  (``ContainerSandbox._why_dead``); docker and podman on cgroup v2 set it when the memory limit
  ended the container (measured: podman 4.3 on cgroup v1 here never does).

A container is one cgroup: the sandbox agent and the commands share it. On cgroup v1, and on
v2 without ``memory.oom.group`` (docker and podman set none), the OOM killer takes the largest
process, which is the command that grew, and the agent answers the next call: those kills are
the commands'. A container that ended with OOM kills on its counters, or with ``OOMKilled``,
was killed whole at its limit: the agent's (``LimitEvents.agent``). Where nothing was readable
(a remote engine, a group that went with the container before it was read) the answer is None:
farm cannot tell, and the trial says so rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from farm.sandbox.base import LimitEvents

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC = Path("/proc")


@dataclass(frozen=True)
class Counts:
    oom_kills: int
    pids_max: int


@dataclass(frozen=True)
class Ended:
    """The container as the engine's inspect saw it once it no longer ran."""

    status: str  # exited, stopped, ... or "gone" (removed)
    oom_killed: bool
    exit_code: int | None


def parse_state(out: str) -> Ended | None:
    """``inspect -f '{{.State.Status}} {{.State.OOMKilled}} {{.State.ExitCode}}'`` (None: it
    runs). Empty output: the container is gone."""
    parts = out.split()
    if parts and parts[0] == "running":
        return None
    status = parts[0] if parts else "gone"
    code = int(parts[2]) if len(parts) > 2 and parts[2].lstrip("-").isdigit() else None
    return Ended(status, len(parts) > 1 and parts[1].lower() == "true", code)


def _counter(path: Path, key: str) -> int:
    """``key N`` from a flat-keyed cgroup file (OSError: unreadable, e.g. the group is gone)."""
    for line in path.read_text().splitlines():
        k, _, v = line.partition(" ")
        if k == key:
            return int(v)
    return 0  # an old kernel without the key: nothing counted


@dataclass(frozen=True)
class ContainerCgroup:
    """The container's memory and pids groups on this host (the directories that hold its limits)."""

    version: int
    memory: Path | None
    pids: Path | None

    @classmethod
    def find(cls, container_id: str, pid: int, *, proc: Path = PROC,
             root: Path = CGROUP_ROOT) -> ContainerCgroup | None:
        """From ``/proc/<pid>/cgroup`` of the container's init; None where that is not this
        container's (a remote engine's pid means another process here: only a path naming the
        container's id is taken) or no counter file is readable."""
        try:
            lines = (proc / str(pid) / "cgroup").read_text().splitlines()
        except (OSError, ValueError):
            return None
        mem = pids = unified = None
        for line in lines:
            _, ctrls, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
            if container_id not in path:
                continue
            rel = path.lstrip("/")
            names = ctrls.split(",") if ctrls else []
            if "memory" in names:
                mem = _mounted(root, ctrls, "memory", rel)
            if "pids" in names:
                pids = _mounted(root, ctrls, "pids", rel)
            if not ctrls:
                unified = root / rel
        if mem or pids:
            return cls(1, mem if mem and (mem / "memory.oom_control").exists() else None,
                       pids if pids and (pids / "pids.events").exists() else None)
        if unified is not None and (unified / "memory.events").exists():
            return cls(2, unified, unified if (unified / "pids.events").exists() else None)
        return None

    def counts(self) -> Counts | None:
        """The counters now (None: unreadable, the group went with the container)."""
        try:
            oom = 0 if self.memory is None else _counter(
                self.memory / ("memory.oom_control" if self.version == 1 else "memory.events"), "oom_kill")
            forks = 0 if self.pids is None else _counter(self.pids / "pids.events", "max")
        except (OSError, ValueError):
            return None
        return Counts(oom, forks)

    def describe(self) -> str:
        have = [n for n, d in (("memory", self.memory), ("pids", self.pids)) if d is not None]
        return f"cgroup v{self.version} " + "+".join(have)


def _mounted(root: Path, ctrls: str, ctrl: str, rel: str) -> Path | None:
    """A v1 controller's directory: its own mount, or a co-mount named after the list."""
    for mount in (root / ctrl, root / ctrls):
        if (mount / rel).is_dir():
            return mount / rel
    return None


def container_events(counts: Counts | None, current: bool, ended: Ended | None,
                     cgroup: str | None) -> LimitEvents | None:
    """The trial's evidence from what was read: the last counters (None: never readable),
    whether they are ``current`` (read while the container ran, or after it ended: a reading
    from before an end may miss what ended it), how the container ended (None: it ran when last
    asked), and which cgroup was read."""
    oom, forks = (counts.oom_kills, counts.pids_max) if counts else (0, 0)
    killed = ended is not None and ended.oom_killed
    if not killed and (counts is None or (not current and not (oom or forks))):
        return None  # nothing observed, or only a reading that cannot speak for the end
    whole = killed or (ended is not None and current and oom > 0)
    commands = (("memory",) if oom and not whole else ()) + (("pids",) if forks else ())
    words = []
    if counts is not None:
        when = "" if current else " (read before the container ended; the group went with it)"
        words.append(f"{cgroup or 'cgroup'} of the container: OOM kills {oom}, pids limit met {forks}x{when}")
    if ended is not None:
        words.append(f"the container {ended.status} (exit code {ended.exit_code}, OOMKilled {ended.oom_killed})")
    return LimitEvents(commands=commands, agent=("memory",) if whole else (), evidence="; ".join(words))
