"""The ``hermes_lenient_json`` rules on model output (farm/serve/lenient_calls.py), no vLLM needed,
and the vLLM plugin itself through vLLM's own ToolParserManager when vLLM is installed.

Recorded outputs of the real Qwen2.5-Coder models served by this stack are in
tests/fixtures/real_model/outputs.json (see docs/real-model.md); each is checked for what the
parser makes of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.serve.lenient_calls import extract_calls

OFFERED = frozenset({"Bash", "Read", "Write", "Edit", "Glob"})
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "real_model" / "outputs.json"


def _args(call) -> dict:
    return json.loads(call.arguments)


def test_hermes_tags_and_an_unclosed_final_tag() -> None:
    text = ('Let me look.\n<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "Read", "arguments": {"file_path": "/app/a.py"}}')
    calls, content = extract_calls(text, OFFERED)
    assert [(c.name, _args(c)) for c in calls] == [("Bash", {"command": "ls"}), ("Read", {"file_path": "/app/a.py"})]
    assert content == "Let me look."


def test_a_fenced_json_call_with_prose_around_it() -> None:
    text = 'I will list the files.\n```json\n{"name": "Bash", "arguments": {"command": "ls -la /app"}}\n```\nThen read.'
    calls, content = extract_calls(text, OFFERED)
    assert [(c.name, _args(c)) for c in calls] == [("Bash", {"command": "ls -la /app"})]
    assert content == "I will list the files.\n\nThen read."


def test_bare_json_call_and_a_list_of_calls() -> None:
    calls, content = extract_calls('{"name": "Glob", "arguments": {"pattern": "**/*.py"}}', OFFERED)
    assert [(c.name, _args(c)) for c in calls] == [("Glob", {"pattern": "**/*.py"})] and content == ""
    two = '[{"name": "Bash", "arguments": {"command": "pwd"}}, {"name": "Bash", "parameters": {"command": "ls"}}]'
    assert [_args(c) for c in extract_calls(two, OFFERED)[0]] == [{"command": "pwd"}, {"command": "ls"}]


def test_arguments_given_as_a_json_string_are_decoded() -> None:
    calls, _ = extract_calls('{"name": "Bash", "arguments": "{\\"command\\": \\"ls\\"}"}', OFFERED)
    assert _args(calls[0]) == {"command": "ls"}


def test_json_that_names_no_offered_tool_is_content_not_a_call() -> None:
    for text in ('```json\n{"name": "farm", "version": "1.0"}\n```',  # a package.json shown in a fence
                 '{"name": "farm", "dependencies": {"x": "1"}}',
                 '```json\n{"a": 1}\n```'):
        calls, content = extract_calls(text, OFFERED)
        assert calls == [] and content == text


def test_a_call_shaped_object_naming_a_tool_nobody_offered_is_a_call() -> None:
    # recorded: the 0.5B model invents tools in the template's shape; as a call the agent answers
    # "Unknown tool" and the model may recover, as a final answer the trial would just end
    calls, _ = extract_calls('```json\n{"name": "Handle function", "arguments": {"root": "/app"}}\n```', OFFERED)
    assert [(c.name, _args(c)) for c in calls] == [("Handle function", {"root": "/app"})]


def test_a_call_attempt_that_is_not_json_becomes_a_call_with_unparseable_arguments() -> None:
    # counted by the agent as a malformed call (tool_parse_failures), not taken as a final answer
    text = '```json\n{"name": "Bash", "arguments": {"command": "echo "hi""}}\n```'
    calls, _ = extract_calls(text, OFFERED)
    assert [c.name for c in calls] == ["Bash"]
    with pytest.raises(ValueError):
        json.loads(calls[0].arguments)


def test_plain_prose_is_left_alone() -> None:
    text = "The bug is fixed: the function now returns the sum."
    assert extract_calls(text, OFFERED) == ([], text)


@pytest.mark.skipif(not RECORDED.is_file(), reason="no recorded outputs")
def test_recorded_real_model_outputs() -> None:
    for case in json.loads(RECORDED.read_text()):
        calls, _ = extract_calls(case["content"], OFFERED)
        assert [c.name for c in calls] == case["expect_calls"], case["content"][:200]
        if "expect_json_arguments" in case:  # parsed calls, or one malformed call the agent counts
            assert all(_json_ok(c.arguments) for c in calls) is case["expect_json_arguments"], case["source"]


def _json_ok(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def test_calls_written_one_after_another_are_all_calls() -> None:
    # JSON Lines in a fence, in a tag and bare: every object is a call; one non-call object
    # (a made-up tool response) makes the block a malformed attempt, as any invalid JSON does
    lines = '{"name": "Bash", "arguments": {"command": "ls"}}\n{"name": "Read", "arguments": {"file_path": "/a"}}'
    for text in (lines, f"<tool_call>\n{lines}\n</tool_call>", f"Now:\n```json\n{lines}\n```"):
        calls, _ = extract_calls(text, OFFERED)
        assert [(c.name, _args(c)) for c in calls] == [("Bash", {"command": "ls"}), ("Read", {"file_path": "/a"})]
    calls, _ = extract_calls(lines + '\n{"error": "no such file"}', OFFERED)
    assert [c.name for c in calls] == ["Bash"] and not _json_ok(calls[0].arguments)


@pytest.mark.serve_stack("vllm")
def test_the_plugin_registers_with_vllm_and_parses_fenced_json() -> None:
    from vllm.tool_parsers.abstract_tool_parser import ToolParserManager

    import farm.serve.vllm_lenient_parser as plugin

    assert plugin.PARSER_NAME in ToolParserManager.list_registered()
    cls = ToolParserManager.get_tool_parser(plugin.PARSER_NAME)

    class Tokenizer:  # the parser only needs a vocabulary lookup at construction
        def get_vocab(self) -> dict[str, int]:
            return {"<tool_call>": 1, "</tool_call>": 2}

    class Request:
        tools = [type("T", (), {"function": type("F", (), {"name": "Bash"})()})()]

    parser = cls(Tokenizer())
    info = parser.extract_tool_calls('```json\n{"name": "Bash", "arguments": {"command": "ls"}}\n```', Request())
    assert info.tools_called and info.tool_calls[0].function.name == "Bash"
    assert json.loads(info.tool_calls[0].function.arguments) == {"command": "ls"}
    plain = parser.extract_tool_calls("All done.", Request())
    assert not plain.tools_called and plain.content == "All done."
