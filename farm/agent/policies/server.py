"""Local policies served as an OpenAI-compatible endpoint, so they drive the real agent loop.

* ``oracle``: one Bash call ``bash /solution/solve.sh`` (timeout = the trial's remaining time,
  sent as ``timeout_ms`` so Leaf's "above 1000 means milliseconds" rule cannot bite), then a
  final answer.
* ``nop``: a final answer at once.
* ``predictions``: one Bash call applying the patch the trial staged from a SWE-bench predictions
  file, the way the official harness applies it (farm/agent/predictions.py ``apply_command``),
  then a final answer. The patch itself never travels through the conversation: it is staged
  like the oracle's solution, so a megabyte of patch costs no context and arrives byte for byte.
* ``scripted``: assistant turns from a YAML/JSON file, for tests. The file holds a list of
  turns, or a mapping task_id -> list of turns (``"*"`` is the default). Turn i answers the
  request that already contains i assistant messages. A turn may set: content, reasoning,
  reasoning_field (``reasoning`` like vLLM, default, or ``reasoning_content`` like SGLang),
  tool_calls [{name, arguments (object, or a raw string to test malformed JSON), id}],
  finish_reason, usage (overrides), metrics (sent as the response's ``metrics`` object, as vLLM's
  ``--enable-per-request-metrics`` does, e.g. ``{queue_time_ms: 250}``), delay_s, raw_body (sent
  verbatim instead of JSON) and error {status, times, message} (the first ``times`` requests
  for that turn fail).

``stream: true`` requests are answered as server-sent events in OpenAI's chunk format (vLLM's
shape: a role chunk with empty content, then reasoning, content and tool-call argument pieces,
a finish chunk, the usage chunk when ``stream_options.include_usage`` asks for it, ``[DONE]``),
cut from the same completion a whole-body answer would carry.

Every policy answers under its own model id (``oracle``, ``nop``, ``scripted``, ``predictions``: what
``/v1/models`` lists), never the id the request asked for, so a trial row cannot claim that a
model answered when a policy did. A request with ``X-Farm-Task: farm-preflight`` is the run's
preflight probe: every policy answers it with one call of the first tool offered.

Run in a background thread with uvicorn on 127.0.0.1 and an OS-chosen port (or ``--port``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from farm.agent.predictions import apply_command
from farm.errors import ConfigError

POLICIES = ("oracle", "nop", "scripted", "predictions")
DEFAULT_TIME_LEFT_S = 3600.0
ORACLE_COMMAND = "bash /solution/solve.sh"
PREFLIGHT_TASK = "farm-preflight"  # X-Farm-Task of the run's preflight probe (farm/run/endpoint.py)


def load_script(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Read a script file into {task_id or "*": [turn, ...]} with a clear error on bad input."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError(f"agent.script={str(p)!r}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"agent.script={str(p)!r}: not valid JSON/YAML: {exc}") from None
    scripts = {"*": data} if isinstance(data, list) else data
    if not isinstance(scripts, dict):
        raise ConfigError(f"agent.script={str(p)!r}: expected a list of turns or a mapping task_id -> turns")
    for key, turns in scripts.items():
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise ConfigError(f"agent.script={str(p)!r}: turns for {key!r} must be a list of mappings")
        for i, turn in enumerate(turns):
            for tc in turn.get("tool_calls") or []:
                if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
                    raise ConfigError(
                        f"agent.script={str(p)!r}: {key!r} turn {i}: each tool call needs a string 'name'"
                    )
    return {str(k): v for k, v in scripts.items()}


def _estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


class Policy:
    def __init__(self, name: str, script: str | None = None) -> None:
        if name not in POLICIES:
            raise ConfigError(f"agent.name={name!r}: policy must be one of {list(POLICIES)}")
        if name == "scripted" and not script:
            raise ConfigError("agent.name='scripted' needs agent.script=<file of assistant turns>")
        self.name = name
        self.scripts = load_script(script) if name == "scripted" else {}
        self.failures: collections.Counter[tuple[str, int]] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        # The last requests (selected headers, body), for tests that inspect what was sent.
        self.requests: collections.deque[tuple[dict[str, str], dict[str, Any]]] = collections.deque(maxlen=32)
        self.lock = threading.Lock()

    def turn(self, task: str, messages: list[Any], time_left: float,
             tools: list[Any] | None = None) -> dict[str, Any]:
        """The scripted description of the next assistant turn for this conversation."""
        if task == PREFLIGHT_TASK:
            return _probe_answer(tools)
        n = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        if self.name == "nop":
            return {"content": "Nothing to do."}
        if self.name in ("oracle", "predictions"):
            if n == 0:
                command = ORACLE_COMMAND if self.name == "oracle" else apply_command()
                return {"tool_calls": [{"name": "Bash", "arguments": {
                    "command": command, "timeout_ms": int(time_left * 1000)}}]}
            last = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "tool"), {})
            status = str(last.get("content") or "").split("\n", 1)[0]
            what = "the reference solution" if self.name == "oracle" else "the prediction's patch"
            return {"content": f"Ran {what} ({status or 'no output'})."}
        turns = self.scripts.get(task) or self.scripts.get("*") or []
        if n >= len(turns):
            return {"content": "(end of script)"}
        return dict(turns[n], _index=n)


def _probe_answer(tools: list[Any] | None) -> dict[str, Any]:
    """One call of the first offered tool, its required string arguments filled with "true"."""
    fn = (tools or [{}])[0].get("function", {}) if isinstance((tools or [{}])[0], dict) else {}
    if not fn.get("name"):
        return {"content": "preflight: no tool offered"}
    required = (fn.get("parameters") or {}).get("required") or []
    return {"tool_calls": [{"name": fn["name"], "arguments": {str(k): "true" for k in required}}]}


def _completion(turn: dict[str, Any], model: str, body_len: int) -> dict[str, Any]:
    calls = []
    for tc in turn.get("tool_calls") or []:
        args = tc.get("arguments", {})
        calls.append({
            "id": tc.get("id") or f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": tc["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
        })
    message: dict[str, Any] = {"role": "assistant", "content": turn.get("content")}
    if calls:
        message["tool_calls"] = calls
    if turn.get("reasoning"):
        message[turn.get("reasoning_field", "reasoning")] = turn["reasoning"]
    out_text = (turn.get("content") or "") + "".join(c["function"]["arguments"] for c in calls)
    usage = {"prompt_tokens": _estimate_tokens("x" * body_len), "completion_tokens": _estimate_tokens(out_text)}
    usage.update(turn.get("usage") or {})
    if "total_tokens" not in (turn.get("usage") or {}):
        usage["total_tokens"] = (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)
    usage = {k: v for k, v in usage.items() if v is not None}
    body = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": turn.get("finish_reason") or ("tool_calls" if calls else "stop"),
        }],
        "usage": usage,
    }
    if turn.get("metrics") is not None:
        body["metrics"] = turn["metrics"]
    return body


def _pieces(text: str, n: int = 3) -> list[str]:
    """``text`` cut into up to ``n`` non-empty pieces (a stream sends text in pieces)."""
    size = max(1, -(-len(text) // n))
    return [text[i:i + size] for i in range(0, len(text), size)]


def stream_chunks(completion: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` events that add up to ``completion`` (OpenAI's format)."""
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    msg = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    for name in ("reasoning_content", "reasoning"):
        out += [chunk({name: p}) for p in _pieces(str(msg.get(name) or ""))]
    out += [chunk({"content": p}) for p in _pieces(msg.get("content") or "")]
    for i, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc["function"]
        out.append(chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                          "function": {"name": fn["name"], "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in _pieces(fn["arguments"])]
    out.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        out.append({**head, "choices": [], "usage": completion["usage"]})
    if "metrics" in completion:
        out[-1]["metrics"] = completion["metrics"]
    return out


async def _sse(chunks: list[dict[str, Any]]) -> Any:
    for c in chunks:
        yield f"data: {json.dumps(c)}\n\n"
        await asyncio.sleep(0)  # one event per write, as a generating server sends them
    yield "data: [DONE]\n\n"


def build_app(policy: Policy) -> FastAPI:
    app = FastAPI(title=f"farm {policy.name} policy")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": policy.name, "object": "model", "owned_by": "farm"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
            messages = body["messages"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "request body must be JSON with a 'messages' list")
        task = request.headers.get("x-farm-task", "")
        try:
            time_left = float(request.headers.get("x-farm-time-left", DEFAULT_TIME_LEFT_S))
        except ValueError:
            time_left = DEFAULT_TIME_LEFT_S
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        turn = policy.turn(task, messages, time_left, tools)
        with policy.lock:
            policy.calls[task] += 1
            policy.requests.append(({k: v for k, v in request.headers.items() if k.startswith("x-")}, body))
            err = turn.get("error")
            if err:
                key = (task, int(turn.get("_index", 0)))
                policy.failures[key] += 1
                if policy.failures[key] <= int(err.get("times", 1)):
                    return _error(int(err.get("status", 500)), str(err.get("message", "injected failure")))
        if turn.get("delay_s"):
            await asyncio.sleep(float(turn["delay_s"]))
        if "raw_body" in turn:
            return Response(str(turn["raw_body"]), media_type="application/json")
        # the prompt estimate is the same whichever way the answer travels
        sent = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        size = len(raw) if len(sent) == len(body) else len(json.dumps(sent, ensure_ascii=False).encode())
        completion = _completion(turn, policy.name, size)
        if body.get("stream"):
            opts = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
            chunks = stream_chunks(completion, include_usage=bool(opts.get("include_usage")))
            return StreamingResponse(_sse(chunks), media_type="text/event-stream")
        return JSONResponse(completion)

    return app


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}}, status)


class PolicyServer:
    """A policy endpoint running in a background thread; ``base_url`` ends in /v1."""

    def __init__(self, policy: Policy, *, port: int = 0) -> None:
        self.policy = policy
        config = uvicorn.Config(
            build_app(policy), host="127.0.0.1", port=port, log_level="warning",
            lifespan="off", access_log=False, timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"farm-policy-{policy.name}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"policy server {policy.name!r} did not start on 127.0.0.1")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def requests(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        """The last requests received: (x-* headers, JSON body), oldest first."""
        with self.policy.lock:
            return list(self.policy.requests)

    def stats(self) -> dict[str, Any]:
        with self.policy.lock:
            return {"calls": sum(self.policy.calls.values()), "per_task": dict(self.policy.calls)}

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> PolicyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_policy_server(policy: str, *, script: str | None = None, port: int = 0) -> PolicyServer:
    return PolicyServer(Policy(policy, script), port=port)


def main(argv: list[str] | None = None) -> None:
    """Serve a policy until interrupted: ``python -m farm.agent.policies.server oracle``."""
    import argparse
    import signal

    ap = argparse.ArgumentParser(description="Serve a farm policy as an OpenAI-compatible endpoint")
    ap.add_argument("policy", choices=POLICIES)
    ap.add_argument("--script", help="turns file for the scripted policy")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: one the OS picks)")
    args = ap.parse_args(argv)
    server = start_policy_server(args.policy, script=args.script, port=args.port)
    print(server.base_url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


if __name__ == "__main__":
    main()
