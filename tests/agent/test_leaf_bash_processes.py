"""One process per Bash call under the vendor's rules (issue 28 item 6): a ``Bash true`` call
under agent.compat=leaf-2609 starts its login shell and nothing else inside the sandbox; the
vendor's Bash semantics (shell-only kill, raw bytes, negative codes for signals) run in the
sandbox agent's own process. A regression back to a per-call runner interpreter fails here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agent_helpers import QUIET_HOME, agent_cfg, tool_agent

from farm.agent.execution import ToolCall, ToolExecutor


@pytest.fixture(autouse=True)
def _no_outside_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):  # CI's FARM_REQUIRE_* etc. would reach the in-process agent's shell
        if name.startswith(("FARM", "AWS", "CI")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("compat", ["leaf-2609", "leaf-legacy"])
def test_the_agent_spawns_the_login_shell_and_nothing_else(workspace: Path, compat: str) -> None:
    agent = tool_agent()
    spawned: list[list[str]] = []
    real_spawn = agent.procs.spawn

    def traced(argv: list[str], **kwargs):  # every process the runner starts goes through here
        spawned.append(list(argv))
        return real_spawn(argv, **kwargs)

    agent.procs.spawn = traced
    res = agent.op_tool("Bash", {"command": "true"}, str(workspace), {"compat": compat, "env": {"HOME": QUIET_HOME}})
    assert res["observation"] == "Exit code: 0\nSTDOUT:\n\nSTDERR:\n"
    assert spawned == [["/bin/bash", "-lc", "true"]]


async def _bash(ex: ToolExecutor, command: str) -> str:
    [out] = await ex.run_turn([ToolCall("c1", "Bash", {"command": command}, True)])
    assert out.failure is None, out.failure
    return out.observation or ""


def _stdout(observation: str) -> str:
    return observation.split("\nSTDOUT:\n", 1)[1].split("\nSTDERR:\n", 1)[0]


async def test_a_bash_call_forks_one_process_in_the_sandbox(sandbox) -> None:
    sb, _ = sandbox
    isolation = (await sb.call("ping")).get("agent_isolation") or ""
    if not isolation.startswith("pid-namespace"):
        pytest.skip(f"the commands have no PID namespace of their own here ({isolation})")
    ex = ToolExecutor(sb, "/app", agent_cfg(compat="leaf-2609"))
    for _ in range(3):  # the namespace's pids are handed out in order: count what one call forks
        # the last pid forked in the commands' namespace, read by builtins (no fork of its own)
        last = int(_stdout(await _bash(ex, "read -r n < /proc/sys/kernel/ns_last_pid; echo $n")))
        # the next call's shell: any runner started before it would have taken a pid first
        shell = int(_stdout(await _bash(ex, "echo $$")))
        assert shell == last + 1, f"a Bash call forked {shell - last} processes in the sandbox, not one (the shell)"
    assert _stdout(await _bash(ex, "true; echo done")) == "done\n"


async def test_signals_and_timeouts_through_the_jail(sandbox) -> None:
    # in a sandbox the shell's parent is the jail's launcher: the shell's own status still reads
    # as the vendor's runner reports it, and a timeout still kills the shell alone
    sb, _ = sandbox
    ex = ToolExecutor(sb, "/app", agent_cfg(compat="leaf-2609"))
    assert (await _bash(ex, "kill -9 $$")).startswith("Exit code: -9\n")
    assert (await _bash(ex, "exit 137")).startswith("Exit code: 137\n")
    assert (await _bash(ex, "kill -PIPE $$")).startswith("Exit code: -13\n")
    # the shell starts with SIGPIPE at its default, as the vendor's subprocess gives it (Python
    # ignores it, and a launcher in between must not hand that on): no "Broken pipe" from yes
    pipe = "Exit code: 0\nSTDOUT:\ny\n141 0\n\nSTDERR:\n"
    safe = ToolExecutor(sb, "/app", agent_cfg(compat="farm-safe"))
    for executor in (ex, safe):
        assert await _bash(executor, "yes | head -1; echo ${PIPESTATUS[@]}") == pipe
    # nor is the shell a subreaper (the vendor's is none): what it orphans goes up past it
    orphan = ("(sleep 30 & echo $! > /tmp/o); sleep 0.3; read -r _ _ _ pp _ < /proc/$(cat /tmp/o)/stat; "
              "echo $((pp != $$))")
    assert _stdout(await _bash(ex, orphan)) == "1\n"
    [out] = await ex.run_turn([ToolCall("c2", "Bash", {"command": "sleep 300 & echo $! > /tmp/bg; sleep 300",
                                                      "timeout": 1}, True)])
    assert (out.observation or "").startswith("Timed out after 1.0s\n")
    # the background job the shell started outlives the call, as under the vendor's runner
    assert (await _bash(ex, "kill -0 $(cat /tmp/bg) && echo alive")).endswith("STDOUT:\nalive\n\nSTDERR:\n")
    await sb.kill_leftovers()
