"""kill_leftovers after a fork storm in a real container (sandbox=docker driving podman + runc).

The container's pids limit is 64 (``--pids-limit`` through ``sandbox.docker.extra_args``, the
last one given wins): shell loops that outlive their command keep every pid taken. Killing the
leftovers ends the commands' PID namespace at once and leaves the sandbox usable, with a fresh
namespace for later commands.
"""

from __future__ import annotations

import uuid

import pytest

from farm.config import DockerSandboxConfig
from farm.sandbox.docker.sandbox import ContainerSandbox
from tests.support.podman import TOOLBOX_IMAGE, podman_task

pytestmark = pytest.mark.integration

PIDS = 64
STORM = ("for i in 1 2 3 4 5 6 7 8; do setsid bash -c 'while :; do sleep 1000 & done' >/dev/null 2>&1 & done; "
         "sleep 1; echo stormed")
COUNT = "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n"  # builtins only: no fork


@pytest.mark.usefixtures("podman_env")
async def test_kill_leftovers_after_a_storm_in_a_container() -> None:
    cfg = DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull="never",
                              extra_args=["--pids-limit", str(PIDS)])
    sb = ContainerSandbox(podman_task(), cfg, run_id="run-podman", trial_key=uuid.uuid4().hex, network="no-network")
    await sb.start()
    try:
        assert sb.stats.isolation == "pid-namespace+proc"
        await sb.exec(STORM, timeout_s=30)
        held = await sb.exec(COUNT)  # the agent answers; the command may not start (exit 126)
        if held.exit_code == 126:
            assert "cannot start the command" in held.stderr, held.output
        else:
            assert int(held.stdout) > PIDS // 2, held.output
        killed = await sb.kill_leftovers()
        assert PIDS // 2 < killed < PIDS  # the storm filled the limit, and the limit held it
        assert (await sb.exec("echo alive")).stdout == "alive\n"
        assert int((await sb.exec(COUNT)).stdout) <= 2
        init = await sb.exec("tr '\\0' ' ' < /proc/1/cmdline")
        assert "jail.py hold" in init.stdout, init.output
    finally:
        await sb.close()
