"""The preflight refuses an endpoint that drops the per-turn cap, against a real HTTP server.

The server is an emulator of llama-cpp-python's OpenAI server in one respect: which of
``max_completion_tokens`` / ``max_tokens`` it reads (llama-cpp-python reads only
``max_tokens``). It writes one token per word until the cap it read, or 60 without one.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import replace
from typing import Any

import pytest
from fastapi import FastAPI, Request

from farm.config import ModelConfig
from farm.run.endpoint import PreflightError, check_endpoint
from tests.support.endpoints import ServedApp

UNCAPPED_TOKENS = 60
BASH = {"type": "function", "function": {"name": "Bash", "description": "run", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


class CapEmulator:
    """An OpenAI-compatible server (emulator) that honours only the cap fields in ``reads``."""

    def __init__(self, reads: tuple[str, ...]) -> None:
        self.reads, self.requests = reads, []
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "test"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> dict[str, Any]:
            body = await request.json()
            self.requests.append(body)
            caps = [body[f] for f in self.reads if isinstance(body.get(f), int)]
            n = min(caps) if caps else UNCAPPED_TOKENS
            message: dict[str, Any] = {"role": "assistant", "content": " ".join(str(i) for i in range(1, n + 1))}
            if body.get("tools"):
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                    "function": {"name": "Bash", "arguments": json.dumps({"command": "ls"})}}]}
                n = min(n, 9)
            return {"id": "x", "object": "chat.completion", "created": int(time.time()), "model": "m",
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "length" if caps and n == min(caps) else "stop"}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": n, "total_tokens": 20 + n}}

        self._served = ServedApp(app, "emulator")
        self.base_url = self._served.base_url

    def __enter__(self) -> CapEmulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self._served.stop()


def _check(model: ModelConfig):
    return asyncio.run(check_endpoint(model, BASH, timeout_s=10))


def _model(url: str, **kw: Any) -> ModelConfig:
    return replace(ModelConfig(name="m", base_url=url, max_tokens_per_turn=1024), **kw)


def test_a_server_that_drops_max_completion_tokens_is_refused_naming_the_override() -> None:
    with CapEmulator(reads=("max_tokens",)) as ep:
        with pytest.raises(PreflightError) as info:
            _check(_model(ep.base_url))
    message = str(info.value)
    assert ep.base_url in message and "ignores max_completion_tokens" in message
    assert "model.extra_body.max_tokens=1024" in message
    # the override it names is accepted by the same server: the agent's request then carries both
    with CapEmulator(reads=("max_tokens",)) as ep:
        info = _check(_model(ep.base_url, extra_body={"max_tokens": 1024}))
        probe = ep.requests[-1]
    assert info.served_model == "m"
    assert probe["max_tokens"] == probe["max_completion_tokens"] < UNCAPPED_TOKENS


def test_a_server_that_honours_max_completion_tokens_passes_with_one_cap_probe() -> None:
    with CapEmulator(reads=("max_completion_tokens",)) as ep:
        _check(_model(ep.base_url))
        cap_probes = [r for r in ep.requests if not r.get("tools")]
    assert len(cap_probes) == 1 and "max_tokens" not in cap_probes[0]


def test_a_server_that_ignores_every_cap_field_is_refused() -> None:
    with CapEmulator(reads=()) as ep:
        with pytest.raises(PreflightError, match=r"ignores the per-turn cap .*wrote 60 tokens"):
            _check(_model(ep.base_url, extra_body={"max_tokens": 1024}))


def test_no_cap_configured_means_no_cap_probe() -> None:
    with CapEmulator(reads=()) as ep:
        _check(_model(ep.base_url, max_tokens_per_turn=None))
        assert [r for r in ep.requests if not r.get("tools")] == []
