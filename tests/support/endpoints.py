"""Fake endpoints for tests: a free loopback port, and a small OpenAI-compatible server started on
127.0.0.1 in a background thread (``EndpointServer``).

Not farm's policy server: it plays an *external* endpoint whose listed ids and answered id are
set by the test (``listed``, ``answers_as``), so provenance and the preflight's id checks can
be exercised against a real HTTP server and the real openai client.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from typing import Any

import uvicorn
from fastapi import FastAPI, Request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a server the test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServedApp(threading.Thread):
    """An ASGI app served by uvicorn on a free loopback port, in a daemon thread of this process."""

    def __init__(self, app: Any, what: str) -> None:
        super().__init__(daemon=True)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    lifespan="off", access_log=False))
        self.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.is_alive() and time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}/v1"

    def run(self) -> None:
        self.server.run()

    def stop(self) -> None:
        self.server.should_exit = True
        self.join(timeout=10)


class EndpointServer:
    def __init__(self, listed: list[str], answers_as: str, command: str = "echo fixed > /app/answer.txt",
                 tool_call: bool = True, raw_arguments: str | None = None) -> None:
        """``tool_call=False``: answers in text only; ``raw_arguments``: sent verbatim as the
        tool call's arguments (e.g. text that is not JSON)."""
        self.listed, self.answers_as, self.command = listed, answers_as, command
        self.chat_calls = 0
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"} for m in self.listed]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> dict[str, Any]:
            body = await request.json()
            self.chat_calls += 1
            answered = any(m.get("role") == "assistant" for m in body["messages"])
            message: dict[str, Any] = {"role": "assistant", "content": "done" if answered else None}
            if not answered and not tool_call:
                message["content"] = "I would rather describe the command: ls"
            elif not answered:
                message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function", "function": {
                    "name": "Bash", "arguments": raw_arguments if raw_arguments is not None
                    else json.dumps({"command": self.command})}}]
            return {
                "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.answers_as,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "stop" if answered else "tool_calls"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }

        self._thread = ServedApp(app, "test endpoint")
        self.base_url = self._thread.base_url

    def close(self) -> None:
        self._thread.stop()

    def __enter__(self) -> EndpointServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
