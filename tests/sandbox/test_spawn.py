"""The jail's resident spawner (farm/sandbox/inside/spawn.py, issue 41): what every command it
starts must have, by both of its ways (posix_spawn for the vendor's shell, a fork for a
subreaper), on a real PID namespace made by jail.start in this process.

What the per-command launcher did before is the contract: the command in the namespace with
its own status and signal, its session, no jail capability in any of the five sets, SIGPIPE at
its default, a subreaper only where asked, the umask, directory and environment it was given,
the commands' cgroup joined (and the init back in its own), "cannot start" when that group's
process limit is full, and the agent knowing the shell by its PID in the agent's namespace.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from farm.sandbox.inside import jail, procs

pytestmark = pytest.mark.root

JAIL_CAPS = [jail.CAP_NUMBERS[n] for n in ("CAP_SETPCAP", "CAP_SYS_CHROOT", "CAP_SYS_ADMIN")]
SYS_ADMIN = jail.CAP_NUMBERS["CAP_SYS_ADMIN"]
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "ONLY": "this"}
WAYS = [pytest.param(False, id="posix_spawn"), pytest.param(True, id="fork-subreaper")]


@pytest.fixture(scope="module")
def made():
    made, why = jail.start(drop=JAIL_CAPS)
    if made is None:
        pytest.skip(f"no jail here: {why}")
    yield made
    made.kill()


def run(made, command, subreaper, cwd="/tmp", env=ENV, umask=None, merge=False):
    proc = made.spawner.spawn(["/bin/bash", "-c", command], cwd, env, umask, subreaper, merge_stderr=merge)
    out = proc.stdout.read()
    err = proc.stderr.read() if proc.stderr is not None else b""
    proc.wait(30)
    proc.stdout.close()
    if proc.stderr is not None:
        proc.stderr.close()
    return proc, out.decode(errors="surrogateescape"), err.decode(errors="surrogateescape")


def status_field(pid: int | str, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {name} in /proc/{pid}/status")


@pytest.mark.parametrize("subreaper", WAYS)
def test_status_signal_and_the_shells_pid_as_the_agent_sees_it(made, subreaper: bool) -> None:
    proc, out, err = run(made, "echo out; echo err >&2; exit 7", subreaper)
    assert (proc.returncode, out, err) == (7, "out\n", "err\n")
    proc = made.spawner.spawn(["/bin/bash", "-c", "echo $$; exec sleep 30"], "/", ENV, None, subreaper)
    inner = int(proc.stdout.readline())
    # the agent's PID for it names the same process: its namespace PID is the one it printed
    assert status_field(proc.pid, "NSpid").split()[-1] == str(inner) and inner != proc.pid
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL  # the shell's own signal, not an exit code
    proc.stdout.close()
    proc.stderr.close()


@pytest.mark.parametrize("subreaper", WAYS)
def test_session_capabilities_signals_and_subreaper(made, subreaper: bool) -> None:
    _, out, _ = run(made, "echo $$ $(cut -d' ' -f6 /proc/$$/stat); grep ^Cap /proc/$$/status; "
                    "yes | head -1 >/dev/null; echo pipe ${PIPESTATUS[0]}; "
                    "(sleep 5 & echo $! > orphan.$$) ; sleep 0.2; "
                    "echo parent $(cut -d' ' -f4 /proc/$(cat orphan.$$)/stat); kill $(cat orphan.$$); rm orphan.$$",
                    subreaper)
    lines = out.splitlines()
    pid, session = lines[0].split()
    assert pid == session  # a session of its own
    caps = dict(line.split(":") for line in lines if line.startswith("Cap"))
    assert set(caps) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
    for name, value in caps.items():
        assert not int(value, 16) >> SYS_ADMIN & 1, (name, value)  # the jail's caps: in no set
    assert "pipe 141" in lines  # `yes` ended by SIGPIPE (128 + 13), not ignoring it
    # a subreaper keeps its orphans; the vendor's shell is none: they go to the init
    assert f"parent {pid if subreaper else 1}" in lines


@pytest.mark.parametrize("subreaper", WAYS)
def test_umask_directory_environment_stdin_and_merged_output(made, subreaper: bool, tmp_path: Path) -> None:
    _, out, _ = run(made, "umask; pwd; env | grep -v '^_=\\|^PWD=\\|^SHLVL=' | sort; cat; echo end",
                    subreaper, cwd=str(tmp_path), umask=0o027)
    assert out.splitlines() == ["0027", str(tmp_path), "ONLY=this", f"PATH={ENV['PATH']}", "end"]
    proc, out, err = run(made, "echo a; echo b >&2; echo c", subreaper, merge=True)
    assert (out, err, proc.stderr) == ("a\nb\nc\n", "", None)
    # a command's text passes whole, bytes that are not UTF-8 too
    big = "#" + "x" * 100_000 + "\nprintf '%s' \udcff"
    _, out, _ = run(made, big, subreaper)
    assert out.encode(errors="surrogateescape") == b"\xff"


@pytest.mark.parametrize("subreaper", WAYS)
def test_a_missing_program_or_directory_is_127_with_its_reason(made, subreaper: bool) -> None:
    proc = made.spawner.spawn(["/no/such/program"], "/", ENV, None, subreaper)
    assert proc.wait(10) == 127 and b"cannot run /no/such/program" in proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    proc, _, err = run(made, "true", subreaper, cwd="/no/such/dir")
    assert proc.returncode == 127 and "cannot run in /no/such/dir" in err


def test_the_standby_is_the_jails_own_and_becomes_the_next_forked_command(made) -> None:
    run(made, "true", True)  # a command that needs a fork: from now on one waits ready
    deadline = time.monotonic() + 5
    while not (standbys := [p for p in _children(made.init_pid) if made.own(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    (standby,) = standbys
    assert int(status_field(standby, "CapEff"), 16) >> SYS_ADMIN & 1  # how the agent tells it apart
    assert made.members() == set()  # an idle jail: the standby is no command's
    proc = made.spawner.spawn(["/bin/bash", "-c", "exec sleep 30"], "/", ENV, None, True)
    assert proc.pid == standby  # it became this command, and lost the capabilities at its exec
    time.sleep(0.1)
    assert not made.own(proc.pid) and proc.pid in made.members()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    proc.stderr.close()


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


# --- the commands' cgroup (the local backend's, issue 40) ----------------------------------


@pytest.fixture
def groups():
    """A commands' group per controller below this process's own, as local/cgroups.py makes
    them: (join fds, home fds, {controller: commands dir})."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(","):
            own[name] = path
    dirs = {}
    for ctrl in ("pids", "memory"):
        mount = Path("/sys/fs/cgroup") / ctrl
        if not (mount / "cgroup.procs").exists() or ctrl not in own:
            pytest.skip(f"no cgroup v1 {ctrl} controller mounted at {mount}")
        dirs[ctrl] = mount / own[ctrl].lstrip("/") / f"farm-spawn-test-{uuid.uuid4().hex[:8]}"
        dirs[ctrl].mkdir()
    join = [os.open(d / "cgroup.procs", os.O_WRONLY) for d in dirs.values()]
    home = [os.open(d.parent / "cgroup.procs", os.O_WRONLY) for d in dirs.values()]
    yield join, home, dirs
    for fd in join + home:
        os.close(fd)
    for d in dirs.values():
        for pid in (d / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 5
        while True:
            try:
                d.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


@pytest.mark.parametrize("subreaper", WAYS)
def test_commands_are_born_in_their_cgroup_and_the_init_stays_home(groups, subreaper: bool) -> None:
    join, home, dirs = groups
    made, why = jail.start(drop=JAIL_CAPS, join_fds=join, home_fds=home)
    assert made is not None, why
    try:
        init_groups = Path(f"/proc/{made.init_pid}/cgroup").read_text()
        _, out, _ = run(made, "cat /proc/self/cgroup", subreaper)
        for ctrl, d in dirs.items():
            line = next(x for x in out.splitlines() if ctrl in x.split(":")[1].split(","))
            assert line.endswith("/" + d.name), (ctrl, line)
        assert Path(f"/proc/{made.init_pid}/cgroup").read_text() == init_groups  # moved back, if it moved
        # the commands' process limit full: the command cannot start, as a fork would say. Two:
        # what starts a command counts in the group while it does (the init moved in for its
        # posix_spawn, or the forked child before its exec), so one command fills it
        (dirs["pids"] / "pids.max").write_text("2")
        holder = made.spawner.spawn(["/bin/bash", "-c", "echo up; exec sleep 30"], "/", ENV, None, subreaper)
        assert holder.stdout.readline() == b"up\n"
        if subreaper:  # the forked child joins, then cannot start a task: 126 and why
            proc, _, err = run(made, "echo never", True)
            assert proc.returncode == 126 and "cannot start the command" in err, (proc.returncode, err)
        else:  # posix_spawn is refused in the group itself: the agent gets the fork's error
            with pytest.raises(OSError) as refused:
                run(made, "echo never", False)
            assert refused.value.errno == 11  # EAGAIN, as procs.fork_failed reports it
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        holder.stdout.close()
        holder.stderr.close()
    finally:
        made.kill()


def test_a_dead_init_ends_its_commands_and_the_next_command_gets_a_new_jail(monkeypatch) -> None:
    monkeypatch.setenv(jail.ENV_VAR, "CAP_SETPCAP,CAP_SYS_CHROOT,CAP_SYS_ADMIN")
    runner = procs.Processes(reap=False)
    runner.start_jail()
    first = runner.jail
    assert first is not None, runner.isolation
    try:
        proc = runner.spawn(["/bin/bash", "-c", "exec sleep 30"], stdin=procs.subprocess.DEVNULL,
                            stdout=procs.subprocess.PIPE, stderr=procs.subprocess.PIPE, env=ENV)
        os.kill(first.init_pid, signal.SIGKILL)  # as the OOM killer might: its namespace goes with it
        assert proc.wait(10) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while not first.spawner.dead and time.monotonic() < deadline:
            time.sleep(0.01)
        res = procs.run_command(runner, "echo again", timeout_s=10, env=ENV)
        assert (res["exit_code"], res["stdout"]) == (0, "again\n")
        assert runner.jail is not first and runner.jail.init_pid != first.init_pid
    finally:
        runner.kill_jail(restart=False)
