"""kill_leftovers after a fork storm that filled the sandbox's pids limit (issue 12, item 4).

A real bubblewrap sandbox with a cgroup pids limit of 64: shell loops that outlive their command
keep every pid taken. Killing the leftovers must free them all, say how many it killed, and
leave a sandbox whose later commands (the patch capture, an in-place verifier) run, still in a
PID namespace of their own.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.harbor import load_harbor_task
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

pytestmark = pytest.mark.bwrap

PIDS = 64
# eight shell loops, each retrying its fork whenever a pid is free (bash backs off for a second)
SHELL_LOOPS = ("for i in 1 2 3 4 5 6 7 8; do setsid bash -c 'while :; do sleep 1000 & done' >/dev/null 2>&1 & done; "
               "sleep 1; echo stormed")
# one loop that takes every freed pid within a millisecond: not even a thread can start
TIGHT = ("setsid python3 -c 'import os, time\nwhile True:\n try:\n  os.fork() or time.sleep(1000)\n"
         " except OSError:\n  time.sleep(0.001)' >/dev/null 2>&1 & sleep 1; echo stormed")
COUNT = "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n"  # builtins only: no fork


@pytest.mark.parametrize("storm", [SHELL_LOOPS, TIGHT], ids=["shell-loops", "tight-refill"])
async def test_kill_leftovers_after_a_storm_frees_the_pids_and_keeps_the_sandbox(tmp_path: Path, storm: str) -> None:
    task = load_harbor_task(make_task(tmp_path / "tasks", "storm", CHECK_ANSWER), "storm")
    task = replace(task, environment=replace(task.environment,
                                             resources=replace(task.environment.resources, pids=PIDS)))
    sb = LocalSandbox(task, root_dir=tmp_path / "sb", allow_any_image=True)
    await sb.start()
    try:
        if "pids=64" not in str(sb.stats.extra.get("limits")):
            pytest.skip(f"no cgroup pids limit here: {sb.stats.extra.get('limits')}")
        await sb.exec(storm, timeout_s=30)
        # the sandbox agent answers though it may have no pid for a thread or a command (it used
        # to die here: SandboxLostError); a command it cannot start is exit 126
        held = await sb.exec(COUNT)
        if held.exit_code == 126:
            assert "cannot start the command" in held.stderr, held.output
        else:  # a pid was free for a moment: the storm holds most of them
            assert int(held.stdout) > PIDS // 2, held.output
        killed = await sb.kill_leftovers()
        assert killed > PIDS // 2
        assert (await sb.exec("echo alive")).stdout == "alive\n"
        after = await sb.exec(COUNT)
        assert int(after.stdout) <= 2, after.output  # the counting shell (and nothing the storm left)
        assert await sb.kill_leftovers() == 0
        # the commands still run in a fresh jail: PID 1 is its init, and kill -9 -1 spares the agent
        init = await sb.exec("tr '\\0' ' ' < /proc/1/cmdline")
        assert "jail.py hold" in init.stdout, init.output
        spree = await sb.exec("(sleep 300 >/dev/null 2>&1 &); sleep 0.3; kill -9 -1; echo $?")
        assert spree.stdout == "0\n", spree.output
        assert (await sb.exec("echo still")).stdout == "still\n"
    finally:
        await sb.close()
