"""Tool calls as small instruct models really write them: Hermes tags, fenced JSON, bare JSON.

Qwen2.5-Coder's chat template asks for ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
but the 0.5B/1.5B instruct models mostly write the same JSON in a ```json fence or bare
(docs/real-model.md). vLLM's stock ``hermes`` parser only reads the tags, so those turns would
reach the agent as plain final answers. This module is the pure-Python part of the
``hermes_lenient_json`` parser (farm/serve/vllm_lenient_parser.py): no vLLM import, so it is
tested on recorded model output anywhere.

Rules, in order, and why:

* ``<tool_call>`` bodies (a missing closing tag at the end of the output is tolerated: the turn
  may have hit its token cap);
* fenced blocks (```json, ```tool_call or a bare ```) whose body is a call object or a list of
  them;
* otherwise the whole reply, when it is exactly one call object or a list of them (bare JSON).

Wherever a list of calls is accepted, so are call objects written one after another (one per
line, as JSON Lines): the 0.5B wrote five calls that way in one turn, and reading the block as
one malformed call gave the model "file_path is required" until it gave up
(tests/fixtures/real_model/outputs.json).

A fenced or bare object is a call only when it names a tool the request offered or has the
call's shape (``name`` plus ``arguments``/``parameters``): a model that shows a JSON file in a
fence is not calling anything, but one that calls a tool it invented is (the agent answers
``Unknown tool``). A block that is clearly a call attempt (it
names an offered tool) but is not valid JSON still becomes a call, with its raw text as the
arguments: the agent then records it as a malformed call in ``tool_parse_failures`` instead of
the turn silently looking like a final answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
FENCE = re.compile(r"```[ \t]*(?:json|tool_call|tool_code|JSON)?[ \t]*\n(.*?)\n?[ \t]*```", re.S)
NAME = re.compile(r'"(?:name|function)"\s*:\s*"([^"\\]+)"')
ARG_KEYS = ("arguments", "parameters", "args")


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str  # a JSON object as text, or the raw text of a call that did not parse


def _as_call(obj: Any) -> Call | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # OpenAI's own shape, written out as text
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args: Any = next((obj[k] for k in ARG_KEYS if k in obj), {})
    if isinstance(args, str):
        try:  # arguments written as a JSON string, as the API returns them
            args = json.loads(args)
        except ValueError:
            return Call(name, args)
    return Call(name, json.dumps(args, ensure_ascii=False))


def _json_items(body: str) -> list[Any] | None:
    """The JSON values a text holds: one value (a list is its items), or several written one after
    another; None when any part is not JSON."""
    decoder, items, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):
            return items or None
        try:
            value, pos = decoder.raw_decode(body, pos)
        except ValueError:
            return None
        items.extend(value if isinstance(value, list) else [value])


def _calls_in(body: str) -> list[Call] | None:
    """The call(s) a JSON text holds; None when it is not JSON or anything in it is not a call."""
    items = _json_items(body)
    if items is None:
        return None
    calls = [c for c in (_as_call(x) for x in items) if c is not None]
    return calls if calls and len(calls) == len(items) else None


def _attempt(body: str, offered: frozenset[str] | None) -> Call | None:
    """A block that names an offered tool but is not valid JSON: a malformed call, kept."""
    m = NAME.search(body)
    if m and (offered is None or m.group(1) in offered):
        return Call(m.group(1), body)
    return None


def _offered(calls: list[Call], offered: frozenset[str] | None, body: str) -> bool:
    """A call when it names an offered tool, or has the template's call shape (``name`` plus an
    arguments key): the 0.5B model calls tools it invented, in exactly that shape
    (tests/fixtures/real_model/outputs.json); the agent answers ``Unknown tool`` and the model
    can recover, where a final answer would end the trial."""
    if offered is None or all(c.name in offered for c in calls):
        return True
    items = _json_items(body)
    return items is not None and all(
        isinstance(x, dict) and isinstance(x.get("name"), str) and any(k in x for k in ARG_KEYS) for x in items)


def extract_calls(text: str, offered: frozenset[str] | None = None) -> tuple[list[Call], str]:
    """(calls, the content left once they are removed). ``offered``: the request's tool names
    (None accepts any name; tags accept any name, as vLLM's ``hermes`` does)."""
    calls: list[Call] = []
    if "<tool_call>" in text:
        for m in TAG.finditer(text):
            found = _calls_in(m.group(1))
            if found:
                calls.extend(found)
            else:
                attempt = _attempt(m.group(1), None)
                if attempt:
                    calls.append(attempt)
        if calls:
            return calls, text[: text.index("<tool_call>")].strip()
    spans: list[tuple[int, int]] = []
    for m in FENCE.finditer(text):
        body = m.group(1).strip()
        found = _calls_in(body)
        if found is not None and _offered(found, offered, body):
            calls.extend(found)
            spans.append(m.span())
        elif found is None:
            attempt = _attempt(body, offered)
            if attempt:
                calls.append(attempt)
                spans.append(m.span())
    if calls:
        left, pos = [], 0
        for start, end in spans:
            left.append(text[pos:start])
            pos = end
        left.append(text[pos:])
        return calls, "".join(left).strip()
    stripped = text.strip()
    if stripped[:1] in "{[":
        found = _calls_in(stripped)
        if found is not None and _offered(found, offered, stripped):
            return found, ""
        if found is None and stripped[:1] == "{":
            attempt = _attempt(stripped, offered)
            if attempt:
                return [attempt], ""
    return [], text
