"""The conformance suite with the Kubernetes-specific differences, shared by the two Kubernetes
backends of the tests: the in-process fakes (test_kubernetes_backend.py) and the API-server
emulator (test_emulator_conformance.py). Each test module subclasses it with its own ``backend``
fixture, as tests/sandbox/conformance.py is subclassed per sandbox backend.
"""

from __future__ import annotations

from typing import Any

import pytest

from farm.sandbox.base import ToolRequest
from farm.sandbox.kubernetes.sandbox import KubernetesSandbox
from farm.tasks.model import Task
from tests.support.kubernetes import image_task

from ..conformance import SandboxConformance


class KubernetesConformance(SandboxConformance):
    def build_task(self, **kw: Any) -> Task:
        return image_task(**kw)

    @pytest.mark.skip(reason="a pod's root filesystem is the image's own writable layer; read-only "
                      "system directories are a property of the local backend only")
    async def test_system_dirs_are_read_only(self) -> None:  # type: ignore[override]
        pass

    async def test_a_command_that_kills_every_process_it_sees_leaves_the_sandbox_working(  # type: ignore[override]
            self, make_sandbox) -> None:
        """No jail in a pod (Pod Security refuses its capabilities): the command kills the sandbox
        agent, and the relay, PID 1, which no signal from inside reaches, starts it again."""
        sb = await make_sandbox()
        assert isinstance(sb, KubernetesSandbox) and sb.channel is not None
        assert not sb.capabilities.isolated_commands
        assert sb.stats.isolation is not None and sb.stats.isolation.startswith("pid1-relay: agent restarted"), \
            sb.stats.isolation
        killed = await sb.exec("(sleep 300 >/dev/null 2>&1 &); sleep 0.3; kill -9 -1; echo survived")
        assert killed.exit_code == 137 and "SandboxAgentKilled" in killed.stderr, killed
        assert "survived" not in killed.stdout
        assert (await sb.exec("echo alive")).stdout == "alive\n"
        # SIGTERM to every Python and to PID 1: the agent dies of it, the relay ignores it
        term = await sb.tool(ToolRequest("Bash", {"command": "kill -TERM 1; pkill -f python; sleep 5"}, "/"))
        assert term.error == "SandboxAgentKilled" and "signal 15 (SIGTERM)" in term.observation, term
        init = await sb.exec("tr '\\0' ' ' < /proc/1/cmdline")
        assert "relay.py serve" in init.stdout, init.output
        # what a killed agent's commands left dies with it: nothing outlives every later kill
        left = await sb.exec("setsid sleep 301 >/dev/null 2>&1 </dev/null & sleep 0.3; kill -9 $PPID; sleep 5")
        assert left.exit_code == 137, left
        listed = await sb.exec("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")
        assert "sleep 301" not in listed.stdout and "server.py" in listed.stdout, listed.stdout
        # the kills did not use up the reconnects a broken stream may need (the last one left
        # the stream alone: the host hears of it when it asks)
        assert await sb.channel.relay_status()
        assert sb.channel.reconnects == 0 and sb.channel.agent_restarts == 3
        assert [k["name"] for k in sb.channel.agent_kills] == ["SIGKILL", "SIGTERM", "SIGKILL"]
        assert "kill -9 -1" in sb.channel.agent_kills[0]["requests"][0]["command"]
        assert sb.channel.agent_kills[2]["killed_processes"] >= 2  # the shell and its sleep
        await sb.close()
        assert b'"restarts": 3' in sb.stats.artifacts["agent-kills.json"]
