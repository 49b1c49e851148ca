"""Reassembling a streamed chat completion into the body the non-streaming path parses.

A streamed answer arrives as ``chat.completion.chunk`` events whose ``choices[0].delta`` carry
pieces of the message. They are folded here into one ``chat.completion``-shaped dict so that
``farm.agent.llm.parse_completion`` reads both paths with the same code: a tool call, a
reasoning field or a finish reason means exactly the same thing whether it came whole or in
pieces, and a trajectory does not depend on ``model.stream``.

Folding rules (OpenAI's streaming format, as vLLM and SGLang emit it):

* ``content`` and each reasoning field (``reasoning``, ``reasoning_content``: whichever the
  server used) are the concatenation of their pieces; content that never had a non-empty
  piece is ``None``, as servers send it unstreamed for a pure tool-call turn (vLLM's first
  chunk carries ``content: ""`` beside the role).
* tool calls are keyed by their ``index``: the first non-empty ``id`` and ``type`` win, the
  ``function.name`` and ``function.arguments`` pieces are concatenated.
* the last non-null ``finish_reason``, the last ``usage`` (``stream_options.include_usage``
  sends it in a final chunk with no choices), ``model`` and the server's per-request
  ``metrics`` (vLLM ``--enable-per-request-metrics``) are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REASONING_FIELDS = ("reasoning_content", "reasoning")  # SGLang / older vLLM, newer vLLM



@dataclass
class _ToolCallParts:
    id: str = ""
    type: str = ""
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    """Folds chunks (plain dicts) into one completion body; ``feed`` says when tokens start."""

    content: list[str] = field(default_factory=list)
    # per field name: a server may send both names (one an alias); parse_completion chooses
    reasoning: dict[str, list[str]] = field(default_factory=dict)
    tool_calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Any = None
    model: str | None = None
    metrics: Any = None
    chunks: int = 0

    def feed(self, chunk: Any) -> bool:
        """Fold one chunk in; True when it carried generated text (content, reasoning or a call)."""
        self.chunks += 1
        if not isinstance(chunk, dict):
            return False
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        if chunk.get("metrics") is not None:
            self.metrics = chunk["metrics"]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return False
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        produced = False
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            self.content.append(piece)
            produced = True
        for name in REASONING_FIELDS:
            piece = delta.get(name)
            if isinstance(piece, str) and piece:
                self.reasoning.setdefault(name, []).append(piece)
                produced = True
        for i, tc in enumerate(delta.get("tool_calls") or []):
            if not isinstance(tc, dict):
                continue
            index = tc.get("index") if isinstance(tc.get("index"), int) else i
            parts = self.tool_calls.setdefault(index, _ToolCallParts())
            parts.id = parts.id or str(tc.get("id") or "")
            parts.type = parts.type or str(tc.get("type") or "")
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
            if isinstance(fn.get("name"), str) and fn["name"]:
                parts.name.append(fn["name"])
            if isinstance(fn.get("arguments"), str) and fn["arguments"]:
                parts.arguments.append(fn["arguments"])
            produced = True
        return produced

    def completion(self) -> dict[str, Any]:
        """The ``chat.completion`` body these chunks add up to (an empty choice list if none came)."""
        if not self.chunks:
            return {"choices": []}
        text = "".join(self.content)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": p.id or None, "type": p.type or "function",
                 "function": {"name": "".join(p.name), "arguments": "".join(p.arguments)}}
                for _, p in sorted(self.tool_calls.items())
            ]
        for name, pieces in self.reasoning.items():
            message[name] = "".join(pieces)
        body: dict[str, Any] = {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }
        if self.model:
            body["model"] = self.model
        if self.metrics is not None:
            body["metrics"] = self.metrics
        return body
