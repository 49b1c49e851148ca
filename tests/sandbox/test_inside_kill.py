"""The sandbox agent's kill where it really runs: escapees without the environment tag.

test_inside_procs.py covers every way out in-process; this checks the same inside bubblewrap (the
agent in its own PID namespace) for the timeout kill, and for the agent as its own process
(as in a pod or container) when it shuts down.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from farm.sandbox.channel import LINE_LIMIT, Channel
from farm.sandbox.local.sandbox import INSIDE_DIR, LocalSandbox
from tests.procs import alive
from tests.support.tasks import make_task

SERVER = INSIDE_DIR / "server.py"

# no FARM_EXEC_ID (env -i), a new session (setsid), and re-parented away from the shell (subshell)
UNTAGGED = "( env -i setsid /bin/bash -c 'sleep 1.5; touch /tmp/m/{name}' >/dev/null 2>&1 < /dev/null & )"


@pytest.mark.bwrap
async def test_timeout_kills_untagged_escapees_in_bwrap(tmp_path: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=tmp_path / "sb") as sb:
        await sb.exec("mkdir -p /tmp/m")
        cmd = "\n".join([UNTAGGED.format(name="a"),
                         "env -i /bin/bash -c 'sleep 1.5; touch /tmp/m/b' >/dev/null 2>&1 < /dev/null &",
                         "sleep 30"])
        r = await sb.exec(cmd, timeout_s=0.5)
        assert r.timed_out and r.exit_code == 124
        await asyncio.sleep(2.0)
        assert (await sb.exec("ls -A /tmp/m")).stdout == ""
        # the control: a command that ends normally keeps its untagged background process
        await sb.exec(UNTAGGED.format(name="control").replace("1.5", "0.2"))
        await asyncio.sleep(1.0)
        assert (await sb.exec("ls -A /tmp/m")).stdout == "control\n"




@pytest.mark.parametrize("stop", ["shutdown", "stdin_closed"])
async def test_agent_exit_kills_untagged_background_processes(tmp_path: Path, stop: str) -> None:
    """The agent as its own process (a subreaper, as in a pod or container where no PID namespace
    dies with it): on shutdown or end of input it kills all it started, tagged or not."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", str(SERVER), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT, cwd=tmp_path)
    ch = Channel(proc.stdout, proc.stdin, name="kill-test")  # type: ignore[arg-type]
    ch.start()
    try:
        r = await ch.exec("( env -i setsid sleep 1000 >/dev/null 2>&1 < /dev/null & echo $! > pid ); cat pid",
                          cwd=str(tmp_path))
        sleeper = int(r.stdout)
        assert alive(sleeper)
        if stop == "shutdown":
            assert await ch.request("shutdown") == {}
        else:
            proc.stdin.close()  # type: ignore[union-attr]
        await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == 0
        deadline = time.monotonic() + 20
        while alive(sleeper) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not alive(sleeper), "an untagged orphan outlived the agent"
    finally:
        await ch.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
