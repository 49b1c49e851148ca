"""vLLM tool-call parser ``hermes_lenient_json``: Hermes tags, fenced JSON and bare JSON calls.

A vLLM tool-parser plugin (``tool_parser_plugin: farm.serve.vllm_lenient_parser`` with
``tool_call_parser: hermes_lenient_json``). Importing this module registers the parser. Plain
``vllm serve`` imports the plugin itself; under Ray Serve LLM, which does not,
farm/serve/plugins.py imports it in the replica before the engine starts.

Non-streaming replies (what farm's agent asks for) go through farm/serve/lenient_calls.py.
Streaming keeps vLLM's Hermes behaviour: tagged calls stream as calls, and fenced or bare JSON
streams as content, because it cannot be told from prose until the reply ends.
"""

from __future__ import annotations

from typing import Any

from vllm.entrypoints.generate.base.protocol import ExtractedToolCallInformation, FunctionCall, ToolCall
from vllm.tool_parsers.abstract_tool_parser import ToolParserManager
from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

from farm.serve.lenient_calls import extract_calls

PARSER_NAME = "hermes_lenient_json"


def _offered(request: Any) -> frozenset[str] | None:
    tools = getattr(request, "tools", None)
    if not tools:
        return None
    names = set()
    for tool in tools:
        fn = getattr(tool, "function", None)
        name = getattr(fn, "name", None)
        if isinstance(name, str):
            names.add(name)
    return frozenset(names) or None


class HermesLenientJsonToolParser(Hermes2ProToolParser):
    """Hermes2ProToolParser whose non-streaming extraction also reads fenced and bare JSON calls."""

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        calls, content = extract_calls(model_output, _offered(request))
        if not calls:
            return ExtractedToolCallInformation(tools_called=False, tool_calls=[], content=model_output)
        return ExtractedToolCallInformation(
            tools_called=True,
            tool_calls=[ToolCall(type="function", function=FunctionCall(name=c.name, arguments=c.arguments))
                        for c in calls],
            content=content or None,
        )


ToolParserManager.register_module(PARSER_NAME, force=True, module=HermesLenientJsonToolParser)
