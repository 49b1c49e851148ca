"""One turn's tool calls through a real sandbox (farm/agent/execution.py): what each call's
record holds, the turn's limits, and where a turn ends when the sandbox fails."""

from __future__ import annotations

from pathlib import Path

from agent_helpers import agent_cfg, make_task

from farm.agent.execution import ToolCall, ToolExecutor
from farm.sandbox.local.sandbox import LocalSandbox


def call(call_id: str, name: str, args_ok: bool = True, **args) -> ToolCall:
    return ToolCall(call_id, name, args, args_ok)


async def test_each_record_carries_the_calls_identity_and_the_tools_result(sandbox):
    sb, _ = sandbox
    ex = ToolExecutor(sb, "/app", agent_cfg(read_output_chars=100))
    await sb.write_file("/app/long.txt", b"x" * 1000)
    outs = await ex.run_turn([
        call("c1", "Bash", command="sleep 0.3; echo hi"),
        call("c2", "Read", file_path="missing.txt"),
        call("c3", "Read", False, file_path="long.txt"),
        call("c4", "Frob"),
    ])
    bash, missing, long_read, unknown = (o.record for o in outs)
    assert [r.call_id for r in (bash, missing, long_read, unknown)] == ["c1", "c2", "c3", "c4"]
    assert [r.args_ok for r in (bash, missing, long_read, unknown)] == [True, True, False, True]
    assert "hi" in outs[0].observation and bash.error is None and bash.truncated is False
    assert 0.3 <= bash.command_s <= bash.duration_s < 10  # the command ran inside the call
    assert missing.error is not None and missing.command_s is None
    assert long_read.truncated is True and "[truncated" in outs[2].observation  # the turn's limits apply
    assert (outs[3].observation, unknown.error) == ("Unknown tool: Frob", "UnknownTool")
    assert all(o.failure is None for o in outs)


async def test_two_calls_are_enough_to_run_concurrently(sandbox):
    sb, _ = sandbox
    ex = ToolExecutor(sb, "/app", agent_cfg(tool_execution="concurrent", concurrent_bash=True))
    outs = await ex.run_turn([call("a", "Bash", command="sleep 1"), call("b", "Bash", command="sleep 1")])
    a, b = (o.record for o in outs)
    assert max(a.started, b.started) < min(a.ended, b.ended)  # they overlapped


async def test_a_concurrent_turn_ends_at_its_first_failure(tmp_path: Path):
    sb = LocalSandbox(make_task(workdir="/app"), root_dir=tmp_path / "sbx")
    await sb.start()
    await sb.close()  # every call into the sandbox now fails: infrastructure, not the model
    ex = ToolExecutor(sb, "/app", agent_cfg(tool_execution="concurrent"))
    outs = await ex.run_turn([call("u", "Frob"), call("r1", "Read", file_path="a"),
                              call("r2", "Read", file_path="b"), call("r3", "Read", file_path="c")])
    assert [o.call.call_id for o in outs] == ["u", "r1"]  # up to and including the first failure
    assert outs[0].failure is None and outs[1].failure


def test_empty_arguments_are_an_empty_object():
    tc = ToolCall.from_openai({"id": "i", "function": {"name": "Custom", "arguments": ""}})
    assert (tc.args, tc.args_ok) == ({}, True)
