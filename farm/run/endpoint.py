"""Endpoint preflight: the model endpoint answers, serves the named model and can call a tool.

Run once per distinct endpoint before the first trial, so that a dead URL or a wrong model id
costs seconds and one line naming the URL, not minutes of retried trials that all end in
``infra_error``. The check goes through the real ``openai`` client, exactly like the agent:

1. ``GET /models`` answers and lists ``model.name``;
2. one tiny chat completion with one tool answers -- ``tool_choice="auto"``, the agent's own
   request shape, so the server's tool-call parser is what is checked (``"required"`` would
   let vLLM bypass it with guided decoding) -- its
   ``response.model`` is one of the listed ids, and (unless ``model.preflight_tool_call`` is
   false) its first tool call names the offered tool with JSON-object arguments;
3. the per-turn cap is honoured (farm/run/turn_cap.py): a server that drops
   ``max_completion_tokens`` is refused with the override that fixes it.

farm's own policy endpoints (oracle / nop / scripted) are real HTTP servers and get the same
check; they answer the probe (``X-Farm-Task: farm-preflight``) with one call of the offered tool.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import openai

from farm.config import ModelConfig
from farm.errors import FarmError
from farm.run.turn_cap import turn_cap_problem

PROBE_PROMPT = "This is a connectivity check. Call the {tool} tool once, with the arguments it requires."


class PreflightError(FarmError):
    """A check before the first trial failed: nothing was run. ``farm run`` exits with 3."""

    exit_code = 3


@dataclass(frozen=True)
class EndpointInfo:
    base_url: str
    served_model: str  # response.model of the probe
    listed: tuple[str, ...]  # ids /models lists


def host_port(base_url: str | None) -> str | None:
    """``host:port`` of a base URL (the port the scheme implies when none is written)."""
    if not base_url:
        return None
    parts = urlsplit(base_url)
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    return f"{parts.hostname}:{port}" if port else parts.hostname


def _cause(exc: BaseException) -> str:
    """The innermost cause's text: 'Connection refused', not the SDK's 'Connection error.'"""
    inner: BaseException = exc
    while inner.__cause__ is not None or inner.__context__ is not None:
        inner = inner.__cause__ or inner.__context__  # type: ignore[assignment]
    text = str(inner).strip() or type(inner).__name__
    outer = str(exc).strip()
    return text if inner is exc or not outer else f"{outer} ({text})"


def _status_text(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error") if isinstance(body.get("error"), dict) else body
    message = (err or {}).get("message") or exc.message
    return f"HTTP {exc.status_code}: {str(message)[:300]}"


async def check_endpoint(model: ModelConfig, tool: dict[str, Any], *, timeout_s: float,
                         session_header: str | None = None, check_cap: bool = True) -> EndpointInfo:
    """Check one endpoint as the agent will use it.

    Raises:
        PreflightError: one line naming the URL and what failed (no answer, HTTP error, model
            not served, answer from another model id, no parseable tool call).
    """
    url = str(model.base_url)
    from farm.agent.policies.server import PREFLIGHT_TASK

    headers = {model.session_header: PREFLIGHT_TASK, "X-Farm-Task": PREFLIGHT_TASK}
    client = openai.AsyncOpenAI(base_url=url, api_key=os.environ.get(model.api_key_env) or "EMPTY",
                                max_retries=0, timeout=timeout_s, default_headers=headers)
    try:
        try:
            page = await client.models.list()
            listed = tuple(m.id for m in page.data)
        except openai.APIStatusError as exc:
            raise PreflightError(f"endpoint {url}: GET /models answered {_status_text(exc)}") from None
        except openai.APIError as exc:
            raise PreflightError(f"endpoint {url} does not answer: {_cause(exc)}") from None
        if model.name not in listed:
            raise PreflightError(
                f"endpoint {url} does not serve model.name={model.name!r}: it serves {list(listed)} "
                "(set model.name=<one of them>, or point model.base_url at the right server)"
            )
        name = str(tool.get("function", {}).get("name"))
        request: dict[str, Any] = {
            "model": model.name,
            "messages": [{"role": "user", "content": PROBE_PROMPT.format(tool=name)}],
            "tools": [tool],
            "tool_choice": "auto",
            "temperature": model.temperature,
        }
        if model.max_tokens_per_turn:
            request["max_completion_tokens"] = model.max_tokens_per_turn
        try:
            # a cold model may need a while for its first answer; the agent's own timeout bounds it
            resp = await client.with_options(timeout=max(timeout_s, min(model.timeout_s, 300.0))) \
                .chat.completions.create(**request, extra_body=model.extra_body or None)
        except openai.APIStatusError as exc:
            raise PreflightError(f"endpoint {url}: a chat completion with a tool answered {_status_text(exc)}") \
                from None
        except openai.APIError as exc:
            raise PreflightError(f"endpoint {url}: a chat completion with a tool failed: {_cause(exc)}") from None
        served = resp.model
        if served not in listed and served != model.name:
            raise PreflightError(
                f"endpoint {url} answered model.name={model.name!r} as model {served!r}, "
                f"which /models does not list ({list(listed)}): the rows would name a model that did not answer"
            )
        if model.preflight_tool_call:
            _check_tool_call(url, resp, name)
        if check_cap:
            try:
                problem = await turn_cap_problem(client, model, timeout_s=max(timeout_s, min(model.timeout_s, 300.0)))
            except openai.APIError as exc:
                raise PreflightError(f"endpoint {url}: the per-turn cap check failed: {_cause(exc)}") from None
            if problem:
                raise PreflightError(f"endpoint {url}: {problem}")
        return EndpointInfo(url, served, listed)
    finally:
        await client.close()


def _check_tool_call(url: str, resp: Any, name: str) -> None:
    choice = resp.choices[0] if resp.choices else None
    calls = (choice.message.tool_calls or []) if choice is not None and choice.message is not None else []
    if not calls:
        text = (choice.message.content or "")[:120] if choice is not None and choice.message else ""
        raise PreflightError(
            f"endpoint {url}: asked to call the {name} tool, the model answered without a tool call "
            f"({text!r}); check the server's tool-call parser (e.g. vLLM --enable-auto-tool-choice "
            "--tool-call-parser), or set model.preflight_tool_call=false"
        )
    fn = calls[0].function
    try:
        args = json.loads(fn.arguments or "")
    except ValueError:
        args = None
    if fn.name != name or not isinstance(args, dict):
        raise PreflightError(
            f"endpoint {url}: the probe's tool call does not parse: name {fn.name!r} (offered {name!r}), "
            f"arguments {str(fn.arguments)[:120]!r} (a JSON object expected)"
        )
