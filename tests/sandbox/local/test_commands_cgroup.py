"""The local backend's commands' cgroup (issue 40): its limits, its counters, and who is in it.

The counters are read from files the tests write in the kernel's formats (v1 and v2); which
processes sit where is read from a real bubblewrap sandbox's groups.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.sandbox.local.cgroups import CgroupLimits, command_limits
from farm.tasks.model import Resources


def test_the_commands_get_the_sandbox_limits_less_the_agents_reserve() -> None:
    assert command_limits(Resources(memory_mb=4096, pids=8192)) == (4096 - 192, 8192 - 64)  # the caps
    assert command_limits(Resources(memory_mb=1024, pids=256)) == (1024 - 128, 256 - 32)  # an eighth
    assert command_limits(Resources(memory_mb=256, pids=64)) == (256 - 64, 64 - 16)  # the floors
    assert command_limits(Resources(memory_mb=64, pids=8)) == (64 - 32, 8 - 4)  # never more than half
    assert command_limits(Resources(memory_mb=0, pids=0)) == (0, 0)  # no limit stays no limit


def _groups(root: Path, version: int) -> CgroupLimits:
    box, commands = root / "box", root / "box" / "commands"
    commands.mkdir(parents=True)
    for d in (box, commands):
        (d / "pids.max").write_text("max\n")
        (d / "pids.events").write_text("max 0\n")
        if version == 1:
            (d / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
        else:
            (d / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    return CgroupLimits([box], [], None, version, [commands])


@pytest.mark.parametrize("version", [1, 2])
def test_the_counters_say_whose_limit_was_met(tmp_path: Path, version: int) -> None:
    groups = _groups(tmp_path, version)
    assert groups.events().hit() == []
    (tmp_path / "box" / "commands" / "pids.events").write_text("max 5120\n")
    oom = "memory.oom_control" if version == 1 else "memory.events"
    text = (tmp_path / "box" / oom).read_text().replace("oom_kill 0", "oom_kill 2")
    (tmp_path / "box" / oom).write_text(text)
    events = groups.events()
    assert (events.commands, events.agent) == (("pids",), ("memory",))
    assert events.hit() == ["memory", "pids"]
    assert "pids limit met 5120x" in events.evidence and "OOM kills 2" in events.evidence


def test_groups_gone_read_as_nothing_met(tmp_path: Path) -> None:
    groups = CgroupLimits([tmp_path / "gone"], [], None, 1, [tmp_path / "gone" / "commands"])
    assert groups.events().hit() == []


@pytest.mark.bwrap
@pytest.mark.root
async def test_commands_join_the_child_group_and_the_agent_stays_above_it(tmp_path: Path) -> None:
    from farm.sandbox.local.sandbox import LocalSandbox
    from farm.tasks.harbor import load_harbor_dir
    from tests.support.tasks import CHECK_ANSWER, make_task_dir

    make_task_dir(tmp_path / "tasks", "contained", CHECK_ANSWER)
    (task,) = load_harbor_dir(tmp_path / "tasks", "local")
    sb = LocalSandbox(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        groups = sb._cgroups
        assert groups is not None and groups.command_dirs, sb.stats.extra
        assert sb.stats.isolation == "pid-namespace+proc+cgroup"
        res = await sb.exec("cat /proc/self/cgroup")
        own = {line.split(":")[1]: line.split(":")[2] for line in res.stdout.splitlines()}
        for ctrl in ("memory", "pids", "freezer"):  # the command's shell is in the commands' groups
            assert own[ctrl].endswith("/commands"), (ctrl, own)
        agent_pids = {int(p) for d in groups.sandbox_dirs for p in (d / "cgroup.procs").read_text().split()}
        command_pids = {int(p) for d in groups.command_dirs for p in (d / "cgroup.procs").read_text().split()}
        assert agent_pids and not agent_pids & command_pids  # the agent (bwrap, server.py, the jail) above
        await sb.exec("sleep 0.2 & sleep 0.2 & wait")
        after = {int(p) for d in groups.sandbox_dirs for p in (d / "cgroup.procs").read_text().split()}
        # no command process ever stayed in the agent's group; what is new there is at most the
        # jail's standby (inside/spawn.py), a fork waiting for the next command, which holds the
        # jail's capabilities as no command can
        new = after - agent_pids
        assert len(new) <= 1 and all(_holds_sys_admin(p) for p in new), new
    finally:
        await sb.close()
    assert (await sb.limit_events()) is not None  # read at close, still there after


def _holds_sys_admin(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 21 & 1)
    return False


@pytest.mark.root
def test_removing_the_groups_ends_a_frozen_command(tmp_path: Path) -> None:
    # an agent that dies between a fork bomb's freeze and its thaw leaves the commands frozen; a
    # frozen process takes SIGKILL only once thawed, so removal thaws first (else: shells in D
    # state forever and a group that cannot be removed)
    import subprocess
    import time
    import uuid

    freezer = Path("/sys/fs/cgroup/freezer")
    if not (freezer / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 freezer mounted at /sys/fs/cgroup/freezer")
    box = freezer / f"farm-test-{uuid.uuid4().hex[:8]}"
    commands = box / "commands"
    commands.mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        (commands / "cgroup.procs").write_text(str(proc.pid))
        (commands / "freezer.state").write_text("FROZEN")
        started = time.monotonic()
        CgroupLimits([box], [], None, 1, [commands]).remove()
        assert proc.wait(5) == -9 and time.monotonic() - started < 5  # TimeoutExpired: still frozen
        assert not box.exists()
    finally:  # never a frozen leftover of the test's own, whatever failed
        if commands.exists():
            (commands / "freezer.state").write_text("THAWED")
        proc.kill()
        proc.wait()
        for d in (commands, box):
            if d.exists():
                d.rmdir()
