"""The LLM client: AsyncOpenAI against model.base_url, plus Leaf's error classification.

The response body is read as plain JSON rather than through the SDK's typed models: servers
disagree on extra fields (vLLM's ``reasoning`` vs SGLang's ``reasoning_content``), and a
malformed answer must end in a defined exit reason instead of a validation traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from farm.agent.trajectory import ExitReason
from farm.config import ModelConfig
from farm.errors import FarmError

LENGTH_REASONS = frozenset({"length", "max_tokens", "max_new_tokens"})
REASONING_FIELDS = ("reasoning_content", "reasoning")  # SGLang / older vLLM, newer vLLM


class LLMError(FarmError):
    """A model call that ends the trajectory; ``exit_reason`` says how."""

    exit_reason: ExitReason = "llm_query_error"


class ContextLengthExceeded(LLMError):
    exit_reason: ExitReason = "max_context_len"


class LLMQueryError(LLMError):
    """The endpoint failed after the SDK's retries (retryable by the runner)."""

    exit_reason: ExitReason = "llm_query_error"


class MalformedResponse(LLMError):
    """HTTP 200 whose body is not a usable chat completion (no choices, no message, not JSON)."""

    exit_reason: ExitReason = "model_error"


def is_context_length_error(text: str) -> bool:
    """Leaf's rule: the server's error text names the context limit."""
    t = text.lower()
    return (
        "context_length_exceeded" in t
        or "reduce the length" in t
        or "maximum context length" in t
        or ("context length" in t and "exceed" in t)
    )


@dataclass
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        if not isinstance(data, dict):
            return cls()

        def num(obj: Any, key: str) -> int | None:
            v = obj.get(key) if isinstance(obj, dict) else None
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return cls(
            prompt_tokens=num(data, "prompt_tokens"),
            completion_tokens=num(data, "completion_tokens"),
            total_tokens=num(data, "total_tokens"),
            cached_tokens=num(data.get("prompt_tokens_details"), "cached_tokens"),
            reasoning_tokens=num(data.get("completion_tokens_details"), "reasoning_tokens"),
        )

    def context_tokens(self) -> int | None:
        if self.total_tokens is not None:
            return self.total_tokens
        if self.prompt_tokens is not None and self.completion_tokens is not None:
            return self.prompt_tokens + self.completion_tokens
        return None


@dataclass
class Reply:
    message: dict[str, Any]  # the assistant message as stored and resent (Leaf's whitelist)
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    usage: Usage
    reasoning_field: str | None
    latency_s: float
    content: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    model: str | None = None  # the model id the server says answered (response.model)

    @property
    def truncated(self) -> bool:
        return (self.finish_reason or "").lower() in LENGTH_REASONS


def _tool_calls(raw: Any) -> list[dict[str, Any]]:
    calls = []
    for i, tc in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(tc, dict):
            continue
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = "" if args is None else json.dumps(args)
        calls.append({
            "id": str(tc.get("id") or f"call_{i}"),
            "type": "function",
            "function": {"name": str(fn.get("name") or ""), "arguments": args},
        })
    return calls


def parse_completion(data: Any, *, keep_reasoning: bool, latency_s: float = 0.0) -> Reply:
    """Turn a chat.completion JSON body into a Reply, or raise MalformedResponse."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse(f"response has no choices: {str(data)[:200]!r}")
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise MalformedResponse(f"choice 0 has no message: {str(choices[0])[:200]!r}")
    content = msg.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content)
    calls = _tool_calls(msg.get("tool_calls"))
    reasoning_field = next((f for f in REASONING_FIELDS if msg.get(f)), None)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    if keep_reasoning and reasoning_field:
        # Resent under Leaf's key, which Qwen chat templates read, whichever key the server used.
        message["reasoning_content"] = str(msg[reasoning_field])
    finish = choices[0].get("finish_reason")
    served = data.get("model")
    return Reply(
        message=message,
        tool_calls=calls,
        finish_reason=str(finish) if finish is not None else None,
        usage=Usage.from_json(data.get("usage")),
        reasoning_field=reasoning_field,
        latency_s=latency_s,
        content=content or "",
        model=str(served) if isinstance(served, str) and served else None,
    )


# One HTTP connection pool per event loop and endpoint, shared by the trials that loop drives.
# Creating an httpx client costs ~50 ms of CPU and ~0.8 MiB (it loads a TLS context) and one per
# trial was the orchestrator's largest cost per trial in flight (bench/fanout.py --sandbox none).
# Unbounded connections: a shared pool must not queue 10,000 trials' requests behind httpx's
# default cap of 100. Keyed by the loop itself, weakly: a client is bound to its loop.
_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, httpx.AsyncClient]] = \
    weakref.WeakKeyDictionary()


def shared_http_client(base_url: str) -> httpx.AsyncClient | None:
    """The running loop's pooled client for ``base_url`` (None outside a running loop)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    pools = _POOLS.setdefault(loop, {})
    client = pools.get(base_url)
    if client is None or client.is_closed:
        client = pools[base_url] = openai.DefaultAsyncHttpxClient(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=1024))
    return client


class LLMClient:
    """One trial's view of the endpoint: session routing headers, retries, Leaf's request shape."""

    def __init__(self, model_cfg: ModelConfig, *, session_id: str, task_id: str) -> None:
        if not model_cfg.base_url:
            raise ValueError("model.base_url is not set: the agent needs an OpenAI-compatible endpoint")
        self.cfg = model_cfg
        # every model id the endpoint answered with, in order of first appearance: the trial
        # row records what answered, not what the config asked for
        self.served_models: list[str] = []
        self.headers = {model_cfg.session_header: session_id, "X-Farm-Task": task_id}
        self._shared = shared_http_client(model_cfg.base_url)
        self._client = openai.AsyncOpenAI(
            base_url=model_cfg.base_url,
            api_key=os.environ.get(model_cfg.api_key_env) or "EMPTY",
            max_retries=model_cfg.max_retries,
            timeout=model_cfg.timeout_s,
            http_client=self._shared,
        )

    def request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        cfg = self.cfg
        req: dict[str, Any] = {
            "model": cfg.name,
            "messages": messages,
            "tools": tools,
            "tool_choice": "auto",
            "temperature": cfg.temperature,
            "parallel_tool_calls": cfg.parallel_tool_calls,
        }
        if cfg.max_tokens_per_turn:
            req["max_completion_tokens"] = cfg.max_tokens_per_turn
        if cfg.extra_body:
            req.update(cfg.extra_body)  # top_p, top_k, min_p, chat_template_kwargs, ... as extra_body does
        return req

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        time_left_s: float | None = None,
        keep_reasoning: bool = True,
    ) -> Reply:
        """One model call. Raises ContextLengthExceeded, LLMQueryError or MalformedResponse."""
        timeout = self.cfg.timeout_s if time_left_s is None else max(0.1, min(self.cfg.timeout_s, time_left_s))
        headers = dict(self.headers)
        if time_left_s is not None:
            headers["X-Farm-Time-Left"] = f"{time_left_s:.1f}"
        # Serialised here and posted through the client's request machinery (retries, backoff,
        # timeouts): the SDK's typed transform of `messages` costs O(conversation) Python work
        # per call, ~0.3 s per request at 600 messages.
        started = time.monotonic()  # the model call as the client sees it, serialisation included
        req = self.request(messages, tools)
        try:
            payload = json.dumps(req, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate somewhere: escape rather than send bad UTF-8
            payload = json.dumps(req).encode("ascii")
        headers["Content-Type"] = "application/json"
        try:
            resp = await self._client.post(
                "/chat/completions", cast_to=httpx.Response, content=payload,
                options={"headers": headers, "timeout": timeout},
            )
            body = await resp.aread()
        except Exception as exc:  # noqa: BLE001 - classified below, as Leaf does
            text = f"{type(exc).__name__}: {exc}"
            if is_context_length_error(text):
                raise ContextLengthExceeded(text) from exc
            raise LLMQueryError(f"{text} (endpoint {self.cfg.base_url})") from exc
        latency = time.monotonic() - started
        try:
            data = json.loads(body)
        except ValueError:
            raise MalformedResponse(f"response body is not JSON: {body[:200]!r}") from None
        reply = parse_completion(data, keep_reasoning=keep_reasoning, latency_s=latency)
        if reply.model and reply.model not in self.served_models:
            self.served_models.append(reply.model)
        return reply

    async def close(self) -> None:
        if self._shared is None:  # the loop's shared pool outlives this trial
            await self._client.close()
