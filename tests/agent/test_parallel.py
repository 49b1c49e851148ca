"""Parallel tool calls: counting them, running them concurrently, and never losing a write."""

from __future__ import annotations

import pytest
from agent_helpers import agent_cfg, sandbox_file

from farm.agent import run_agent
from farm.agent.execution import ToolCall, ToolExecutor

# Answers three FIFO readers with "together" only if all three are waiting at the same time;
# after 3 s it gives up and answers "alone" (what strictly sequential reads get).
RENDEZVOUS = r"""
import errno, os, time
paths = ["/app/f1", "/app/f2", "/app/f3"]
fds, deadline = {}, time.monotonic() + 3
while len(fds) < 3 and time.monotonic() < deadline:
    for p in paths:
        if p not in fds:
            try:
                fds[p] = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
    time.sleep(0.01)
word = b"together\n" if len(fds) == 3 else b"alone\n"
for p in paths:
    fd = fds.get(p)
    if fd is None:
        fd = os.open(p, os.O_WRONLY)
    os.write(fd, word)
    os.close(fd)
"""


def rendezvous_script() -> list[dict]:
    return [
        {"tool_calls": [
            {"name": "Write", "arguments": {"file_path": "rv.py", "content": RENDEZVOUS}},
            {"name": "Bash", "arguments": {"command": "mkfifo f1 f2 f3 && (python3 rv.py >/dev/null 2>&1 &)"}},
        ]},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": f"f{i}"}} for i in (1, 2, 3)]},
        {"content": "done"},
    ]


@pytest.mark.parametrize("mode, word", [("concurrent", "together"), ("sequential", "alone")])
async def test_three_reads_in_one_turn_overlap_only_when_concurrent(sandbox, policy, llm_for, mode, word):
    sb, task = sandbox
    srv = policy(rendezvous_script())
    traj = await run_agent(task, sb, llm_for(srv), agent_cfg(tool_execution=mode), session_id="s")
    assert traj.exit_reason == "agent", traj.error
    reads = traj.messages[-4:-1]
    assert [m["content"] for m in reads] == [f"f{i}\n1. {word}" for i in (1, 2, 3)]
    c = traj.counters
    assert (c.tool_calls, c.tool_calling_turns, c.parallel_call_turns) == (5, 2, 2)
    assert [s.n_tool_calls for s in traj.steps] == [2, 3, 0]
    recs = traj.steps[1].tool_calls
    overlap = max(r.started for r in recs) < min(r.ended for r in recs)
    assert overlap is (mode == "concurrent")


async def test_edits_to_one_file_in_one_turn_all_land(sandbox, policy, llm_for):
    sb, task = sandbox
    lines = [f"value_{i} = {i}\n" for i in range(8)]
    srv = policy([
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "m.py", "content": "".join(lines)}}]},
        {"tool_calls": [
            {"name": "Edit", "arguments": {"file_path": "m.py", "old_string": f"value_{i} = {i}",
                                           "new_string": f"value_{i} = {i * 100}"}}
            for i in range(8)
        ] + [{"name": "Edit", "arguments": {"file_path": "/app/./m.py", "old_string": "value_0 = 0",
                                             "new_string": "value_0 = -1"}}]},
        {"content": "done"},
    ])
    traj = await run_agent(task, sb, llm_for(srv), agent_cfg(tool_execution="concurrent"), session_id="s")
    assert traj.exit_reason == "agent"
    assert [m["content"] for m in traj.messages if m["role"] == "tool"][1:] == ["Edited m.py (1 replacement)."] * 9
    expected = "".join(f"value_{i} = {i * 100 if i else -1}\n" for i in range(8))
    assert (await sandbox_file(sb, "/app/m.py")).decode() == expected


async def test_bash_waits_for_earlier_writes_in_the_turn(sandbox, policy, llm_for):
    sb, task = sandbox
    srv = policy([
        {"tool_calls": [
            {"name": "Write", "arguments": {"file_path": "a.txt", "content": "new"}},
            {"name": "Bash", "arguments": {"command": "cat a.txt"}},
            {"name": "Write", "arguments": {"file_path": "a.txt", "content": "newer"}},
        ]},
        {"content": "done"},
    ])
    traj = await run_agent(task, sb, llm_for(srv), agent_cfg(tool_execution="concurrent"), session_id="s")
    assert traj.messages[4]["content"] == "Exit code: 0\nSTDOUT:\nnew\nSTDERR:\n"
    assert await sandbox_file(sb, "/app/a.txt") == b"newer"


def test_conflict_rules():
    ex = ToolExecutor(sandbox=None, workdir="/app", cfg=agent_cfg(tool_execution="concurrent"))  # type: ignore[arg-type]

    def call(name, **args):
        return ToolCall("id", name, args, True)

    c = ex._conflict
    assert not c(call("Read", file_path="a"), call("Read", file_path="a"))
    assert not c(call("Read", file_path="a"), call("Glob", pattern="*"))
    assert c(call("Edit", file_path="a"), call("Edit", file_path="/app/a"))
    assert not c(call("Edit", file_path="a"), call("Edit", file_path="b"))
    assert c(call("Write", file_path="a"), call("Read", file_path="./a"))
    assert c(call("Write", file_path="x"), call("Glob", pattern="*"))
    assert not c(call("Edit", file_path="x"), call("Glob", pattern="*"))
    assert c(call("Bash", command="ls"), call("Read", file_path="a"))
    assert not c(call("Frob"), call("Write", file_path="a"))
    ex.concurrent_bash = True
    assert not c(call("Bash", command="ls"), call("Bash", command="ls"))
