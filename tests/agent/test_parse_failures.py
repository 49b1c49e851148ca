"""What counts as a tool-call parse failure (the per-trial `tool_parse_failures` column)."""

from __future__ import annotations

import json

import pytest

from farm.agent.execution import ToolCall


def _call(name: str, arguments: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    "name, arguments, args, ok",
    [
        ("Bash", json.dumps({"command": "ls"}), {"command": "ls"}, True),
        ("Read", json.dumps({"path": "a.py"}), {"path": "a.py"}, True),  # Leaf's path fallback
        ("Bash", "{}", {}, False),  # what vLLM leaves of an unterminated <parameter>
        ("Edit", json.dumps({"file_path": "a", "old_string": "x"}), {"file_path": "a", "old_string": "x"}, False),
        ("Bash", '{"command": "ls"', {}, False),  # malformed JSON becomes {}
        ("Bash", "[1, 2]", {}, False),  # not an object
        ("Bash", "", {}, False),
        ("NoSuchTool", "{}", {}, True),  # an unknown tool is the tool's business, not a parse failure
    ],
)
def test_args_ok_marks_unusable_arguments(name, arguments, args, ok):
    call = ToolCall.from_openai(_call(name, arguments))
    assert (call.args, call.args_ok) == (args, ok)


def test_llm_errors_are_farm_errors():
    from farm.agent.llm import ContextLengthExceeded, LLMError, LLMQueryError, MalformedResponse
    from farm.errors import FarmError

    for cls in (LLMError, ContextLengthExceeded, LLMQueryError, MalformedResponse):
        assert issubclass(cls, FarmError)
    assert (ContextLengthExceeded.exit_reason, LLMQueryError.exit_reason, MalformedResponse.exit_reason) == (
        "max_context_len", "llm_query_error", "model_error")
