"""Reading a container's limits without an engine (farm/sandbox/docker/limits.py): the cgroup
found from /proc/<pid>/cgroup on v1 and v2, a pid that is not the container's refused, and what
each combination of counters and end says. The real-podman half is test_podman_limits.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from farm.config import DockerSandboxConfig
from farm.sandbox.docker.limits import ContainerCgroup, Counts, Ended, container_events, parse_state
from farm.sandbox.docker.sandbox import ContainerSandbox
from tests.support.tasks import make_task

CID = "657792b901ceb049a9e49335f59b8dba83c9bcb3fe4b3f50201485182730e9eb"
V1_GROUP = f"libpod_parent/libpod-{CID}"


def _proc(tmp_path: Path, pid: int, lines: list[str]) -> Path:
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text("".join(f"{line}\n" for line in lines))
    return proc


def _v1(tmp_path: Path, oom: int = 0, forks: int = 0) -> tuple[Path, Path]:
    root = tmp_path / "sys"
    (root / "memory" / V1_GROUP).mkdir(parents=True)
    (root / "memory" / V1_GROUP / "memory.oom_control").write_text(
        f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom}\n")
    (root / "pids" / V1_GROUP).mkdir(parents=True)
    (root / "pids" / V1_GROUP / "pids.events").write_text(f"max {forks}\n")
    (root / "cpu,cpuacct" / V1_GROUP).mkdir(parents=True)
    proc = _proc(tmp_path, 42, [f"8:pids:/{V1_GROUP}", f"4:memory:/{V1_GROUP}", f"2:cpu,cpuacct:/{V1_GROUP}",
                                f"0::/{V1_GROUP}"])
    return proc, root


def test_cgroup_v1_counters_are_found_from_the_init_pid(tmp_path: Path) -> None:
    proc, root = _v1(tmp_path, oom=2, forks=5)
    cg = ContainerCgroup.find(CID, 42, proc=proc, root=root)
    assert cg is not None and cg.version == 1 and cg.describe() == "cgroup v1 memory+pids"
    assert cg.counts() == Counts(oom_kills=2, pids_max=5)


def test_cgroup_v2_counters_are_found_from_the_init_pid(tmp_path: Path) -> None:
    group = f"system.slice/docker-{CID}.scope"
    root = tmp_path / "sys"
    (root / group).mkdir(parents=True)
    (root / group / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n")
    (root / group / "pids.events").write_text("max 0\n")
    cg = ContainerCgroup.find(CID, 7, proc=_proc(tmp_path, 7, [f"0::/{group}"]), root=root)
    assert cg is not None and cg.version == 2
    assert cg.counts() == Counts(oom_kills=1, pids_max=0)


def test_a_pid_that_is_not_the_containers_is_refused(tmp_path: Path) -> None:
    """A remote engine's init PID names some other process here: its groups are not the container's."""
    proc, root = _v1(tmp_path, oom=3)
    assert ContainerCgroup.find("f" * 64, 42, proc=proc, root=root) is None
    assert ContainerCgroup.find(CID, 43, proc=proc, root=root) is None  # no such process


def test_counters_gone_with_the_group_read_as_none(tmp_path: Path) -> None:
    proc, root = _v1(tmp_path)
    cg = ContainerCgroup.find(CID, 42, proc=proc, root=root)
    assert cg is not None
    (root / "memory" / V1_GROUP / "memory.oom_control").unlink()
    assert cg.counts() is None


def test_what_counters_and_the_end_say() -> None:
    running = container_events(Counts(1, 0), True, None, "cgroup v1 memory+pids")
    assert running is not None and (running.commands, running.agent) == (("memory",), ())
    assert container_events(Counts(0, 3), True, None, None).commands == ("pids",)  # type: ignore[union-attr]
    quiet = container_events(Counts(0, 0), True, None, None)
    assert quiet is not None and quiet.hit() == []  # read, and nothing met: the sandbox can say so
    # the engine's OOMKilled: killed whole at its limit, with or without counters
    killed = container_events(None, False, Ended("exited", True, 137), None)
    assert killed is not None and killed.agent == ("memory",) and "OOMKilled True" in killed.evidence
    # ended, with OOM kills read after the end: the limit ended it
    whole = container_events(Counts(1, 0), True, Ended("exited", False, 137), None)
    assert whole is not None and (whole.commands, whole.agent) == ((), ("memory",))
    # ended, nothing read after the end, nothing met before it: cannot tell
    assert container_events(Counts(0, 0), False, Ended("exited", False, 137), None) is None
    assert container_events(None, False, Ended("gone", False, None), None) is None
    # ... but what was met before it stays met
    before = container_events(Counts(2, 0), False, Ended("exited", False, 137), None)
    assert before is not None and (before.commands, before.agent) == (("memory",), ())


def test_inspect_state_is_parsed() -> None:
    assert parse_state("running false 0\n") is None
    assert parse_state("exited true 137") == Ended("exited", True, 137)
    assert parse_state("") == Ended("gone", False, None)


async def test_a_container_the_engine_says_was_oom_killed_is_the_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lost channel's inspect (``_why_dead``) names OOMKilled, which makes the loss a
    SandboxOutOfMemoryError (relayed/channel.py), and the sandbox's limits say memory, the
    agent's; with no cgroup visible (a remote engine) the inspect is the only evidence."""
    sb = ContainerSandbox(make_task(image="debian:bookworm"), DockerSandboxConfig(engine="podman"), run_id="r",
                          trial_key=uuid.uuid4().hex)
    answers = iter(["running false 0\n", "exited true 137\n"])

    async def engine(*args: str, check: bool = True, timeout: float = 600) -> str:
        assert args[0] == "inspect", args
        return next(answers)

    monkeypatch.setattr(sb, "_engine", engine)
    assert await sb.limit_events() is None  # nothing readable from here
    assert await sb._why_dead() is None
    why = await sb._why_dead()
    assert why is not None and "OOMKilled" in why
    events = await sb.limit_events()
    assert events is not None and events.agent == ("memory",) and events.hit() == ["memory"], events
