"""The LLM client: AsyncOpenAI against model.base_url, plus Leaf's error classification.

Every request streams by default (``model.stream``): the chunks are folded back into one
completion body (farm/agent/stream.py) so both paths parse the same way, and the stream shows
what a whole-body answer hides: time to first token and decode time. A request that fails
transiently (refused or reset connection, timeout, 5xx, 429) is sent again, same messages, with
backoff and jitter for up to ``model.request_retry_budget_s`` before the trial gives up: a model
server that restarts costs the trial a wait, not its earlier turns.

The response body is read as plain JSON rather than through the SDK's typed models: servers
disagree on extra fields (vLLM's ``reasoning`` vs SGLang's ``reasoning_content``), and a
malformed answer must end in a defined exit reason instead of a validation traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from farm.agent.stream import REASONING_FIELDS, StreamAssembler
from farm.agent.trajectory import ExitReason
from farm.config import ModelConfig
from farm.errors import FarmError

LENGTH_REASONS = frozenset({"length", "max_tokens", "max_new_tokens"})
# in-trial retries of a failed request: the first wait, its doubling cap (full jitter below it)
RETRY_FIRST_WAIT_S = 0.5
RETRY_MAX_WAIT_S = 10.0
TRANSIENT_STATUS = frozenset({408, 409, 429})  # and every 5xx


class LLMError(FarmError):
    """A model call that ends the trajectory; ``exit_reason`` says how."""

    exit_reason: ExitReason = "llm_query_error"
    # requests sent for this model call and seconds lost to the failed ones (set by complete)
    attempts: int = 1
    wait_s: float = 0.0


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
    ttft_s: float | None = None  # streamed: request sent -> first generated piece (None unstreamed)
    decode_s: float | None = None  # streamed: first generated piece -> end of the stream
    queue_s: float | None = None  # the server's own queue time, when it sends one (metrics)
    attempts: int = 1  # requests sent for this model call (farm's in-trial retries + 1)
    wait_s: float = 0.0  # seconds from the first request to the one that answered

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


def _queue_s(data: Any) -> float | None:
    """The server's queue time in seconds: vLLM's per-request ``metrics.queue_time_ms``."""
    metrics = data.get("metrics") if isinstance(data, dict) else None
    v = metrics.get("queue_time_ms") if isinstance(metrics, dict) else None
    return float(v) / 1000.0 if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


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
        queue_s=_queue_s(data),
    )


def is_transient(exc: BaseException) -> bool:
    """A failure worth sending the same request again: no answer, a timeout, 5xx, 408/409/429."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in TRANSIENT_STATUS
    # APIConnectionError covers refused/reset connections, timeouts and a stream cut short
    return isinstance(exc, (openai.APIConnectionError, httpx.TransportError))


def retry_wait_s(failures: int, rng: random.Random | None = None) -> float:
    """Jittered exponential backoff: uniform in [c/10, c], c = min(cap, first * 2**(failures-1)).

    Jitter spreads the retries of trials that failed together (a replica died under all of
    them) so that the restarted server is not hit by every one of them at the same instant.
    """
    ceiling = min(RETRY_MAX_WAIT_S, RETRY_FIRST_WAIT_S * 2 ** max(0, failures - 1))
    return (rng or random).uniform(0.1 * ceiling, ceiling)


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
        """One model call, retried in place while it fails transiently and budget remains.

        Raises:
            ContextLengthExceeded: the server named its context limit.
            LLMQueryError: a non-transient failure, or transient ones past the retry budget.
            MalformedResponse: an answer that is not a chat completion.
        """
        first = time.monotonic()
        deadline = None if time_left_s is None else first + time_left_s
        budget = max(0.0, float(self.cfg.request_retry_budget_s))
        attempts = 0
        while True:
            attempts += 1
            sent = time.monotonic()
            left = None if deadline is None else max(0.1, deadline - sent)
            try:
                reply = await self._attempt(messages, tools, time_left_s=left, keep_reasoning=keep_reasoning)
            except _Transient as failure:
                now = time.monotonic()
                waited = now - first
                # the last wait is shortened so that the final attempt falls at the budget's end
                pause = min(retry_wait_s(attempts), budget - waited)
                out_of_time = deadline is not None and now + max(pause, 0.0) >= deadline
                if pause <= 0 or out_of_time:
                    if budget == 0:
                        why = "no retry budget (model.request_retry_budget_s=0)"
                    else:
                        why = (f"gave up after {attempts} attempts over {waited:.1f}s "
                               f"(model.request_retry_budget_s={budget:g}"
                               f"{'; the trial time budget ends first' if out_of_time else ''})")
                    err = LLMQueryError(f"{failure.text} (endpoint {self.cfg.base_url}; {why})")
                    err.attempts, err.wait_s = attempts, waited
                    raise err from failure.__cause__
                await asyncio.sleep(pause)
                continue
            except LLMError as exc:
                exc.attempts, exc.wait_s = attempts, sent - first
                raise
            reply.attempts, reply.wait_s = attempts, sent - first
            return reply

    async def _attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
        time_left_s: float | None, keep_reasoning: bool,
    ) -> Reply:
        """One request. Raises _Transient, ContextLengthExceeded, LLMQueryError or MalformedResponse."""
        timeout = self.cfg.timeout_s if time_left_s is None else max(0.1, min(self.cfg.timeout_s, time_left_s))
        headers = dict(self.headers)
        if time_left_s is not None:
            headers["X-Farm-Time-Left"] = f"{time_left_s:.1f}"
        # Serialised here and posted through the client's request machinery (retries, backoff,
        # timeouts): the SDK's typed transform of `messages` costs O(conversation) Python work
        # per call, ~0.3 s per request at 600 messages.
        started = time.monotonic()  # the model call as the client sees it, serialisation included
        req = self.request(messages, tools)
        streaming = self.cfg.stream
        if streaming:
            req["stream"] = True
            req["stream_options"] = {"include_usage": True}  # usage (cached tokens) in a last chunk
        try:
            payload = json.dumps(req, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate somewhere: escape rather than send bad UTF-8
            payload = json.dumps(req).encode("ascii")
        headers["Content-Type"] = "application/json"
        options = {"headers": headers, "timeout": timeout}
        first_token: float | None = None
        try:
            if streaming:
                stream = await self._client.post(
                    "/chat/completions", cast_to=object, content=payload, options=options,
                    stream=True, stream_cls=openai.AsyncStream[object],
                )
                assembler = StreamAssembler()
                try:
                    if "json" in stream.response.headers.get("content-type", ""):
                        # a server that ignores stream=true answers whole: read it as such
                        streaming, body = False, await stream.response.aread()
                    else:
                        async for chunk in stream:
                            if assembler.feed(chunk) and first_token is None:
                                first_token = time.monotonic()
                finally:
                    await stream.close()
                data: Any = assembler.completion()
            else:
                resp = await self._client.post(
                    "/chat/completions", cast_to=httpx.Response, content=payload, options=options,
                )
                body = await resp.aread()
        except ValueError as exc:  # an SSE event whose data is not JSON
            raise MalformedResponse(f"stream event is not JSON: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - classified below, as Leaf does
            text = f"{type(exc).__name__}: {exc}"
            if is_context_length_error(text):
                raise ContextLengthExceeded(text) from exc
            if is_transient(exc):
                raise _Transient(text) from exc
            raise LLMQueryError(f"{text} (endpoint {self.cfg.base_url})") from exc
        ended = time.monotonic()
        if not streaming:
            try:
                data = json.loads(body)
            except ValueError:
                raise MalformedResponse(f"response body is not JSON: {body[:200]!r}") from None
        reply = parse_completion(data, keep_reasoning=keep_reasoning, latency_s=ended - started)
        if streaming:
            # no generated piece at all (an empty answer): the whole call was waiting for it
            reply.ttft_s = (first_token if first_token is not None else ended) - started
            reply.decode_s = ended - first_token if first_token is not None else 0.0
        if reply.model and reply.model not in self.served_models:
            self.served_models.append(reply.model)
        return reply

    async def close(self) -> None:
        if self._shared is None:  # the loop's shared pool outlives this trial
            await self._client.close()


class _Transient(Exception):
    """A request that failed in a way worth repeating (inside LLMClient only)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
