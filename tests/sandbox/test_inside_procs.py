"""The sandbox agent's command runner, in-process (farm/sandbox/inside/procs.py).

Timeouts must kill everything a command started, however it tried to get away: a new session
(``setsid``), a double fork, ``nohup``, and a child with a scrubbed environment (``env -i``, which
drops the tag the runner puts into every command's environment). Each escapee would write a
marker a moment after the kill; the tests wait past that moment and look. Only processes these
tests start are ever signalled: the runner works on the command's own process tree.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from farm.sandbox.inside import procs
from farm.sandbox.inside import proctable as pt

# Ways out of a command's process group and environment. Each writes its marker after 1.5 s.
ESCAPES = {
    "setsid": "setsid bash -c 'sleep 1.5; touch {m}' >/dev/null 2>&1 < /dev/null &",
    "env_i": "env -i /bin/bash -c 'sleep 1.5; touch {m}' >/dev/null 2>&1 < /dev/null &",
    "env_i_setsid": "env -i setsid /bin/bash -c 'sleep 1.5; touch {m}' >/dev/null 2>&1 < /dev/null &",
    "double_fork": "( env -i setsid /bin/bash -c 'sleep 1.5; touch {m}' >/dev/null 2>&1 < /dev/null & ) ",
    "nohup": "nohup bash -c 'sleep 1.5; touch {m}' >/dev/null 2>&1 &",
    "holds_pipe": "bash -c 'sleep 1.5; touch {m}' &",
}


@pytest.fixture
def runner() -> procs.Processes:
    return procs.Processes(reap=False)


def run(runner: procs.Processes, command: str, **kw) -> dict:
    return procs.run_command(runner, command, **kw)


def _alive(pid: int) -> bool:
    return not pt.is_zombie(pid)


@pytest.mark.parametrize("how", sorted(ESCAPES))
def test_timeout_kills_every_way_out(runner, tmp_path: Path, how: str):
    marker = tmp_path / how
    res = run(runner, ESCAPES[how].format(m=marker) + "\necho started; sleep 30", timeout_s=0.5)
    assert res["timed_out"] is True and res["exit_code"] == 124 and res["stdout"] == "started\n"
    assert res["duration_s"] < 5
    time.sleep(2.0)
    assert not marker.exists(), f"the {how} escapee survived the timeout"


def test_all_escapes_at_once_with_the_shell_still_running(runner, tmp_path: Path):
    cmd = "\n".join(v.format(m=tmp_path / k) for k, v in ESCAPES.items())
    res = run(runner, cmd + "\nsleep 30", timeout_s=0.5)
    assert res["timed_out"]
    time.sleep(2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_command_that_finishes_keeps_its_background_processes(runner, tmp_path: Path):
    # the control: the markers work, and only the timeout kill stops the escapees above
    marker = tmp_path / "control"
    res = run(runner, ESCAPES["env_i_setsid"].format(m=marker).replace("1.5", "0.3"))
    assert res["exit_code"] == 0 and not res["timed_out"]
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()


def test_a_background_process_holding_the_pipe_runs_into_the_timeout(runner, tmp_path: Path):
    marker = tmp_path / "m"
    res = run(runner, f"(sleep 1.5; touch {marker}) & echo bye", timeout_s=0.5)
    assert res["timed_out"] and res["stdout"] == "bye\n"
    time.sleep(2.0)
    assert not marker.exists()


def test_kill_command_reports_what_it_killed(runner):
    proc = runner.spawn(["/bin/bash", "-c", "env -i setsid sleep 30 & sleep 30"], start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while len(runner.members(proc.pid, "no-tag")) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        members = runner.members(proc.pid, "no-tag")
        assert len(members) == 2 and proc.pid not in members and os.getpid() not in members
        assert runner.kill_command(proc.pid, "no-tag") is True
        proc.wait(10)
        assert proc.returncode == -signal.SIGKILL
        assert not any(_alive(p) for p in members)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        runner.forget(proc)
    assert runner.children == set()


def test_members_found_by_tag_after_the_shell_is_gone(runner, tmp_path: Path):
    # a tagged process that left the tree (its parent died) is still the command's
    tag = runner.new_tag()
    child = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ["PATH"], pt.TAG_VAR: tag},
                             start_new_session=True)
    try:
        assert runner.members(-1, tag) == {child.pid}  # -1: no process tree or session to follow
        assert runner.members(-1, runner.new_tag()) == set()
    finally:
        child.kill()
        child.wait()


def test_tags_are_unique_and_carry_the_prefix(runner):
    a, b = runner.new_tag(), runner.new_tag()
    assert a != b and a.startswith(runner.prefix + "-") and a.endswith("-1") and b.endswith("-2")
    assert procs.Processes(reap=False).prefix != runner.prefix


def test_each_command_gets_its_tag_in_the_environment(runner):
    res = run(runner, f"echo ${pt.TAG_VAR}")
    assert res["stdout"].startswith(runner.prefix + "-")


def test_the_command_shell_is_a_subreaper(runner, tmp_path: Path):
    # an orphan of the command re-parents to its shell, not to init: it cannot leave the tree
    res = run(runner,
              "(sleep 5 & echo $! > orphan) ; sleep 0.2; ps -o ppid= -p $(cat orphan); echo $$; kill $(cat orphan)",
              cwd=str(tmp_path))
    ppid, shell = res["stdout"].split()
    assert ppid == shell


# --- the result of a command ---------------------------------------------------------------------


def test_exit_codes_signals_and_streams(runner, tmp_path: Path):
    res = run(runner, "echo out; echo err >&2; exit 7")
    assert (res["exit_code"], res["stdout"], res["stderr"], res["timed_out"], res["truncated"]) == (
        7, "out\n", "err\n", False, False)
    assert res["output_bytes"] == 8 and 0 <= res["duration_s"] < 5
    assert run(runner, "kill -9 $$")["exit_code"] == 137
    assert run(runner, "kill -TERM $$")["exit_code"] == 143
    merged = run(runner, "echo a; echo b >&2; echo c", merge_stderr=True)
    assert merged["stdout"] == "a\nb\nc\n" and merged["stderr"] == ""


def test_cwd_env_and_a_missing_cwd(runner, tmp_path: Path):
    res = run(runner, "pwd; echo $A$B", cwd=str(tmp_path), env={"A": 1, "B": "x"})
    assert res["stdout"] == f"{tmp_path}\n1x\n"
    missing = run(runner, "echo never", cwd=str(tmp_path / "gone"))
    msg = f"farm: cannot run in {tmp_path / 'gone'}: no such directory\n"
    assert missing == {"exit_code": 1, "stdout": "", "stderr": msg, "timed_out": False, "duration_s": 0.0,
                       "truncated": False, "output_bytes": len(msg)}
    assert run(runner, "echo $HOME", env=None)["stdout"] == os.environ.get("HOME", "") + "\n"


def test_stdin_is_empty_and_the_command_is_not_in_our_session(runner):
    res = run(runner, "cat; ps -o sid= -p $$; echo $$")
    sid, pid = res["stdout"].split()
    assert sid == pid and int(sid) != os.getsid(0)


def test_output_cap_keeps_head_and_tail(runner):
    res = run(runner, "printf 'HEAD'; head -c 1000 /dev/zero | tr '\\0' x; printf 'TAIL'", output_cap=100)
    assert res["truncated"] is True and res["output_bytes"] == 1008
    assert res["stdout"].startswith("HEAD") and res["stdout"].endswith("TAIL")
    assert "\n[... 908 bytes truncated ...]\n" in res["stdout"]
    assert run(runner, "echo hi", output_cap=None)["stdout"] == "hi\n"


def test_a_timed_out_command_keeps_what_it_printed(runner):
    res = run(runner, "echo before; sleep 30", timeout_s=0.3, merge_stderr=True)
    assert res["timed_out"] and res["stdout"] == "before\n"


def test_timeout_after_the_pipes_close(runner):
    # the command closes its output and keeps running: the wait, not the reader, times out
    res = run(runner, "exec >&- 2>&-; sleep 30", timeout_s=0.3)
    assert res["timed_out"] and res["exit_code"] == 124


# --- output capture ------------------------------------------------------------------------------


def test_capture_below_the_cap_is_exact():
    c = procs.Capture(10)
    c.feed(b"12345")
    c.feed(b"67890")
    assert (c.text(), c.truncated, c.total) == ("1234567890", False, 10)


def test_capture_over_the_cap_keeps_head_and_tail_halves():
    c = procs.Capture(6)
    for chunk in (b"ab", b"cdef", b"ghij"):
        c.feed(chunk)
    assert c.truncated and c.total == 10
    assert c.text() == "abc\n[... 4 bytes truncated ...]\nhij"
    odd = procs.Capture(5)
    odd.feed(b"line\n0123456789")
    assert odd.text() == "li\n[... 10 bytes truncated ...]\n789"
    nl = procs.Capture(10)
    nl.feed(b"abcd\n" + b"x" * 20)
    assert nl.text() == "abcd\n[... 15 bytes truncated ...]\nxxxxx"


def test_capture_of_zero_keeps_nothing_but_counts():
    c = procs.Capture(0)
    c.feed(b"abc")
    assert c.total == 3 and c.truncated and c.text() == "[... 3 bytes truncated ...]\n"


def test_capture_decodes_invalid_utf8_with_replacement():
    c = procs.Capture(100)
    c.feed(b"ok\xff")
    assert c.text() == "ok\ufffd"


# --- /proc helpers -------------------------------------------------------------------------------


def test_stat_fields_of_a_process_with_parentheses_in_its_name(tmp_path: Path):
    exe = tmp_path / "we(i r)d"
    exe.symlink_to("/bin/sleep")
    p = subprocess.Popen([str(exe), "30"], start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while pt.stat_fields(p.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        state, ppid, pgrp, session = pt.stat_fields(p.pid)
        assert state in ("S", "R") and ppid == os.getpid() and pgrp == session == p.pid
        assert pt.parent_pid(p.pid) == os.getpid() and not pt.is_zombie(p.pid)
        assert p.pid in pt.process_table() and p.pid in pt.descendants(os.getpid(), pt.process_table())
    finally:
        p.kill()
        p.wait()
    assert pt.stat_fields(p.pid) is None and pt.is_zombie(p.pid) and pt.parent_pid(p.pid) == -1


def test_a_zombie_is_not_a_live_process():
    p = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while not pt.is_zombie(p.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pt.is_zombie(p.pid) and pt.stat_fields(p.pid)[0] == "Z"
    assert p.pid not in pt.process_table()
    p.wait()


def test_environ_tags_of_gone_processes_are_empty():
    p = subprocess.Popen(["sleep", "30"], env={pt.TAG_VAR: "t-1", "OTHER": "x", "PATH": os.environ["PATH"]})
    try:
        deadline = time.monotonic() + 5
        while pt.environ_tags(p.pid) != ("t-1",) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pt.environ_tags(p.pid) == ("t-1",)
    finally:
        p.kill()
        p.wait()
    assert pt.environ_tags(p.pid) == ()


def test_descendants_walks_the_whole_tree():
    table = {2: ("S", 1, 2, 2), 3: ("S", 2, 2, 2), 4: ("S", 3, 4, 4), 5: ("S", 1, 5, 5), 6: ("S", 4, 4, 4)}
    assert pt.descendants(2, table) == {3, 4, 6}
    assert pt.descendants(1, table) == {2, 3, 4, 5, 6}
    assert pt.descendants(6, table) == set()


def test_a_killed_shell_never_runs_its_next_command(runner, tmp_path: Path):
    # killed child by child, a shell would see `sleep` die and run `touch` before its own SIGKILL
    for i in range(5):
        inner = tmp_path / f"inner{i}"
        outer = tmp_path / f"outer{i}"
        res = run(runner, f"bash -c 'sleep 30; touch {inner}' & sleep 30; touch {outer}", timeout_s=0.3)
        assert res["timed_out"]
    time.sleep(0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --- the kill, step by step ----------------------------------------------------------------------


def _wait_for(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def _state(pid: int) -> str | None:
    fields = pt.stat_fields(pid)
    return None if fields is None else fields[0]


def test_freeze_stops_the_shell_and_all_it_started_then_the_kill_ends_them_quickly(runner):
    tag = runner.new_tag()
    env = dict(os.environ, **{pt.TAG_VAR: tag})
    proc = runner.spawn(["/bin/bash", "-c", "bash -c 'sleep 30; true' & sleep 30"], env=env, start_new_session=True)
    # a tagged process outside the shell's tree and session is the command's too
    outside = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ["PATH"], pt.TAG_VAR: tag},
                               start_new_session=True)
    try:
        assert _wait_for(lambda: len(runner.members(proc.pid, tag)) == 4)  # inner bash + sleep, sleep, outside
        members = runner.members(proc.pid, tag)
        assert outside.pid in members
        assert runner.freeze(proc.pid, tag) == members
        everyone = members | {proc.pid}
        # stopped, not killed (SIGSTOP lands asynchronously: a loaded machine shows "R" for a moment)
        assert _wait_for(lambda: {p: _state(p) for p in everyone} == {p: "T" for p in everyone}, 2.0)
        started = time.monotonic()
        assert runner.kill_command(proc.pid, tag) is True
        assert time.monotonic() - started < 0.9
        assert proc.wait(10) == -signal.SIGKILL and outside.wait(10) == -signal.SIGKILL
        assert not any(_alive(p) for p in members)
    finally:
        for p in (proc, outside):
            if p.returncode is None:
                p.kill()
                p.wait()
        runner.forget(proc)


def test_a_job_in_a_group_of_its_own_without_the_tag_is_found_by_its_session_after_the_shell_exited(
        runner, tmp_path: Path):
    # `set -m` puts the job into its own process group; `env -i` drops the tag; the shell exits at
    # once, so the job is outside its tree too, and holds the pipe until the timeout: only the
    # session it shares with the shell still names it
    marker = tmp_path / "m"
    res = run(runner, f"set -m; env -i /bin/bash -c 'sleep 1.5; touch {marker}' & "
                      "echo $$ $(ps -o pgid=,sid= -p $!)", timeout_s=0.5)
    shell, pgid, sid = res["stdout"].split()
    assert pgid != shell and sid == shell
    assert res["timed_out"]
    time.sleep(2.0)
    assert not marker.exists(), "the job survived the timeout"


def test_what_is_still_in_both_pipes_at_the_timeout_is_kept(runner, tmp_path: Path):
    # A child writes numbered lines to stdout and stderr, then appends the number to a file, until
    # the kill stops it (after the reader has given up at the deadline): the lines it wrote
    # meanwhile are still in the pipes, and the result must hold them.
    count = tmp_path / "n"
    cmd = (f"bash -c 'i=0; while :; do i=$((i+1)); echo $i; echo $i >&2; echo $i >> {count}; done' & "
           "sleep 30")
    res = run(runner, cmd, timeout_s=0.5)
    assert res["timed_out"]
    last = int(count.read_text().split()[-1])
    assert int(res["stdout"].split()[-1]) >= last
    assert int(res["stderr"].split()[-1]) >= last


def _zombie_children() -> set[int]:
    me = os.getpid()
    return {p for p in pt.proc_pids() if (f := pt.stat_fields(p)) is not None and f[1] == me and f[0] == "Z"}


def test_reap_orphans_collects_exited_children_it_did_not_start_and_leaves_its_own(runner):
    if _zombie_children():
        pytest.skip("another exited child of this process waits to be collected: reaping it would take its status")
    own = runner.spawn(["/bin/sh", "-c", "exit 3"])
    stray = subprocess.Popen(["/bin/sh", "-c", "exit 4"])  # re-parented orphans look like this
    try:
        assert _wait_for(lambda: _state(own.pid) == "Z" and _state(stray.pid) == "Z")
        runner.reap_orphans()
        assert pt.stat_fields(stray.pid) is None  # collected: gone from /proc
        assert _state(own.pid) == "Z"  # a child of ours is left for Popen.wait and its exit status
        assert own.wait(5) == 3
    finally:
        runner.forget(own)
        stray.wait()


def test_a_tag_that_is_not_ascii_is_read_with_replacement_not_an_error():
    p = subprocess.Popen(["sleep", "30"], env={b"PATH": os.environ["PATH"].encode(), pt.TAG_VAR.encode(): b"t\xff"})
    try:
        assert _wait_for(lambda: pt.environ_tags(p.pid) != ())
        assert pt.environ_tags(p.pid) == ("t\ufffd",)
    finally:
        p.kill()
        p.wait()


def test_stat_fields_tell_the_process_group_from_the_session():
    p = subprocess.Popen(["sleep", "30"], process_group=0)  # a group of its own, in our session
    try:
        assert _wait_for(lambda: pt.stat_fields(p.pid) is not None)
        assert pt.stat_fields(p.pid)[2:] == (p.pid, os.getsid(0))
    finally:
        p.kill()
        p.wait()


def test_the_command_never_reads_the_agents_stdin_nor_inherits_its_descriptors(runner):
    # in the agent, stdin is the channel: a command reading it would eat requests
    r, w = os.pipe()
    saved = os.dup(0)
    extra = os.dup(w)
    os.set_inheritable(extra, True)
    try:
        os.write(w, b"channel bytes\n")
        os.close(w)
        os.dup2(r, 0)
        res = run(runner, f"cat; [ -e /proc/self/fd/{extra} ] && echo leaked {extra}")
    finally:
        os.dup2(saved, 0)
        for fd in (saved, r, extra):
            os.close(fd)
    assert res["stdout"] == ""
