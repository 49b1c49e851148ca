"""The local policy endpoint (oracle / nop / scripted) over real HTTP, and replacement prompts."""

from __future__ import annotations

import json

import httpx
import pytest
from agent_helpers import agent_cfg, sandbox_file

from farm.agent import run_agent
from farm.agent.policies.server import start_policy_server
from farm.agent.tokens import TokenCounter
from farm.agent.tools import DEFAULT_TOOLS, load_system_prompt, load_tools
from farm.errors import ConfigError


async def test_oracle_runs_the_solution_through_the_loop(sandbox, policy, llm_for, tmp_path):
    sb, task = sandbox
    sol = tmp_path / "solution"
    sol.mkdir()
    (sol / "solve.sh").write_text("#!/bin/bash\necho fixed > /app/fixed.txt\necho solved\n")
    await sb.upload(sol, "/solution")
    srv = policy(name="oracle")
    traj = await run_agent(task, sb, llm_for(srv), agent_cfg(max_total_time_s=1800), session_id="s")
    assert traj.exit_reason == "agent" and traj.counters.tool_calls == 1
    args = json.loads(traj.messages[2]["tool_calls"][0]["function"]["arguments"])
    assert args["command"] == "bash /solution/solve.sh"
    assert 1_700_000 <= args["timeout_ms"] <= 1_800_000  # the remaining budget, in ms
    assert traj.messages[3]["content"] == "Exit code: 0\nSTDOUT:\nsolved\n\nSTDERR:\n"
    assert traj.final_message == "Ran the reference solution (Exit code: 0)."
    assert await sandbox_file(sb, "/app/fixed.txt") == b"fixed\n"


async def test_nop_answers_at_once(sandbox, policy, llm_for):
    sb, task = sandbox
    traj = await run_agent(task, sb, llm_for(policy(name="nop")), agent_cfg(), session_id="s")
    assert traj.exit_reason == "agent" and traj.counters.steps == 1 and traj.counters.tool_calls == 0


async def test_scripted_turns_per_task_with_default(sandbox, policy, llm_for):
    sb, task = sandbox
    srv = policy({"t1": [{"content": "for t1"}], "*": [{"content": "default"}]})
    traj = await run_agent(task, sb, llm_for(srv, task_id="t1"), agent_cfg(), session_id="s")
    assert traj.final_message == "for t1"
    traj = await run_agent(task, sb, llm_for(srv, task_id="other"), agent_cfg(), session_id="s")
    assert traj.final_message == "default"
    assert srv.stats() == {"calls": 2, "per_task": {"t1": 1, "other": 1}}


async def test_exhausted_script_ends_with_a_final_answer(sandbox, policy, llm_for):
    sb, task = sandbox
    srv = policy([{"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]}])
    traj = await run_agent(task, sb, llm_for(srv), agent_cfg(), session_id="s")
    assert traj.exit_reason == "agent" and traj.final_message == "(end of script)"


def test_http_surface(policy):
    srv = policy([{"content": "x", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}])
    with httpx.Client(base_url=srv.base_url) as http:
        assert http.get("/models").json()["data"][0]["id"] == "scripted"
        r = http.post("/chat/completions", json={"model": "m", "messages": [], "stream": True,
                                                 "stream_options": {"include_usage": True}})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "x"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 7
        r = http.post("/chat/completions", content=b"not json")
        assert r.status_code == 400
        request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        body = http.post("/chat/completions", json=request).json()
    assert body["object"] == "chat.completion" and body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_bad_script_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- content: x\n- tool_calls: [{arguments: {}}]\n")
    with pytest.raises(ConfigError, match="bad.yaml.*turn 1.*name"):
        start_policy_server("scripted", script=str(bad))
    with pytest.raises(ConfigError, match="missing.json"):
        start_policy_server("scripted", script=str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match="policy must be one of"):
        start_policy_server("gpt")
    with pytest.raises(ConfigError, match="agent.script"):
        start_policy_server("scripted")


# --- replacement prompt and tools -------------------------------------------------------------


def test_default_tools_have_leafs_parameters():
    params = {t["function"]["name"]: t["function"]["parameters"] for t in DEFAULT_TOOLS}
    assert {k: (sorted(v["properties"]), v["required"]) for k, v in params.items()} == {
        "Read": (["file_path", "limit", "offset"], ["file_path"]),
        "Write": (["content", "file_path"], ["file_path", "content"]),
        "Edit": (["file_path", "new_string", "old_string", "replace_all"], ["file_path", "old_string", "new_string"]),
        "Glob": (["path", "pattern"], ["pattern"]),
        "Bash": (["command", "description", "timeout"], ["command"]),
    }
    types = {k: {p: d["type"] for p, d in v["properties"].items()} for k, v in params.items()}
    assert types["Read"]["offset"] == "integer" and types["Bash"]["timeout"] == "number"
    assert types["Edit"]["replace_all"] == "boolean"


async def test_prompt_and_tools_replaced_from_files(sandbox, policy, llm_for, tmp_path):
    sb, task = sandbox
    prompt = tmp_path / "vendor_prompt.txt"
    prompt.write_text("VENDOR PROMPT\n")
    tools = [dict(DEFAULT_TOOLS[4], function=dict(DEFAULT_TOOLS[4]["function"], description="VENDOR BASH"))]
    tools_file = tmp_path / "tools.yaml"
    tools_file.write_text(json.dumps({"tools": tools}))
    srv = policy([{"content": "ok"}])
    cfg = agent_cfg(system_prompt_file=str(prompt), tools_file=str(tools_file))
    traj = await run_agent(task, sb, llm_for(srv), cfg, session_id="s")
    body = srv.requests()[-1][1]
    assert traj.messages[0] == {"role": "system", "content": "VENDOR PROMPT"}
    assert body["messages"][0]["content"] == "VENDOR PROMPT"
    assert [t["function"]["description"] for t in body["tools"]] == ["VENDOR BASH"]


def test_bad_replacement_files_name_field_and_value(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps([{"type": "function", "function": {"name": "Grep"}}]))
    with pytest.raises(ConfigError, match=r"agent.tools_file=.*t.json.*'Grep'"):
        load_tools(str(f))
    f.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_tools(str(f))
    with pytest.raises(ConfigError, match="agent.system_prompt_file"):
        load_system_prompt(str(tmp_path / "nope.txt"))
    assert "coding agent" in load_system_prompt(None)


# --- tokens ------------------------------------------------------------------------------------


def test_token_counter_backends():
    msgs = [{"role": "tool", "tool_call_id": "c1", "content": "Exit code: 0\nSTDOUT:\nhello world\n\nSTDERR:\n"}]
    qwen = TokenCounter("qwen")
    assert qwen.backend == "qwen:qwen3.5-27b"
    n = qwen.count_messages(msgs)
    assert 10 < n < len(json.dumps(msgs))
    assert qwen.count_text("<|im_start|>") > 1  # special-token text counts as plain text
    assert TokenCounter("bytes").count_messages(msgs) == -(-len(json.dumps(msgs, separators=(",", ":")).encode()) // 4)
    # an unknown vocabulary falls back (tiktoken has no vocabulary offline either, then bytes/4)
    assert TokenCounter("qwen", model="no-such-model").backend in ("tiktoken:o200k_base", "bytes")
    assert qwen.count_messages([]) == 0
