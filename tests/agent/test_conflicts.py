"""Which calls of one turn must wait for which (farm/agent/execution.py), and how calls are parsed."""

from __future__ import annotations

import pytest
from agent_helpers import agent_cfg

from farm.agent.execution import ToolCall, ToolExecutor


def call(name: str, **args) -> ToolCall:
    return ToolCall(call_id="c", name=name, args=args, args_ok=True)


def executor(**cfg) -> ToolExecutor:
    # the conflict rules never touch the sandbox
    return ToolExecutor(None, "/app", agent_cfg(tool_execution="concurrent", **cfg))  # type: ignore[arg-type]


@pytest.mark.parametrize("a, b, conflict", [
    (call("Read", file_path="x"), call("Read", file_path="x"), False),
    (call("Read", file_path="x"), call("Glob", pattern="*"), False),
    (call("Glob", pattern="*"), call("Glob", pattern="*"), False),
    (call("Write", file_path="x"), call("Glob", pattern="*"), True),
    (call("Glob", pattern="*"), call("Edit", file_path="x"), False),
    (call("Write", file_path="x"), call("Edit", file_path="./x"), True),
    (call("Write", file_path="x"), call("Edit", file_path="/app/x"), True),
    (call("Write", file_path="x"), call("Read", file_path="y"), False),
    (call("Write", path="x"), call("Edit", path="y"), False),  # the `path` alias names the file too
    (call("Write", path="x"), call("Edit", file_path="x"), True),
    (call("Write", file_path=5), call("Read", file_path="y"), True),  # unknown path: conflicts
    (call("Write"), call("Read", file_path="y"), True),
    (call("Read", file_path="x"), call("Bash", command="ls"), True),
    (call("Read", file_path="x"), call("Grep", pattern="x"), False),  # unknown tools never wait
])
def test_conflicts(a, b, conflict):
    assert executor()._conflict(a, b) is conflict


def test_concurrent_bash_declares_commands_free_of_side_effects():
    assert executor(concurrent_bash=True)._conflict(call("Bash", command="ls"), call("Write", file_path="x")) is False
    assert executor()._conflict(call("Bash", command="ls"), call("Bash", command="ls")) is True


def test_path_normalisation():
    ex = executor()
    assert ex._path(call("Read", file_path="a/../b")) == "/app/b"
    assert ex._path(call("Read", file_path="/etc/x")) == "/etc/x"
    assert ex._path(call("Read", path="p")) == "/app/p"
    assert ex._path(call("Read", file_path="", path="q")) == "/app/q"
    assert ex._path(call("Read", file_path=["x"])) is None and ex._path(call("Read")) is None


@pytest.mark.parametrize("arguments, args, ok", [
    ('{"command": "ls"}', {"command": "ls"}, True),
    ('{"command": "ls"', {}, False),  # malformed JSON
    ("[1, 2]", {}, False),  # not an object
    ("", {}, False),  # nothing: the required parameter is missing
    ('{"description": "x"}', {"description": "x"}, False),  # missing required command
])
def test_from_openai(arguments, args, ok):
    tc = ToolCall.from_openai({"id": "id1", "function": {"name": "Bash", "arguments": arguments}})
    assert (tc.call_id, tc.name, tc.args, tc.args_ok) == ("id1", "Bash", args, ok)
    other = ToolCall.from_openai({"id": "id2", "function": {"name": "Custom", "arguments": "{}"}})
    assert other.args_ok is True  # only the default tools' required parameters are known
