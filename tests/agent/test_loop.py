"""The agent loop against a real HTTP policy endpoint and a sandbox (leaf-harness.md §2.2-2.5)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from agent_helpers import agent_cfg, sandbox_file

from farm.agent import run_agent
from farm.agent.llm import LLMClient
from farm.config import ModelConfig
from farm.store.schema import STEPS_SCHEMA, to_table


def bash(cmd: str, **extra) -> dict:
    return {"name": "Bash", "arguments": {"command": cmd, **extra}}


async def go(sandbox, llm, cfg=None, **kw):
    sb, task = sandbox
    return await run_agent(task, sb, llm, cfg or agent_cfg(), session_id="sess-1", **kw)


# --- stop reasons -----------------------------------------------------------------------------


async def test_tool_turn_then_final_answer(sandbox, policy, llm_for):
    srv = policy([{"tool_calls": [bash("echo hi > f.txt; cat f.txt")]}, {"content": "Done."}])
    steps = []

    async def on_step(rec):
        steps.append(rec)

    traj = await go(sandbox, llm_for(srv), on_step=on_step)
    assert traj.exit_reason == "agent" and traj.error is None
    assert traj.final_message == "Done."
    roles = [m["role"] for m in traj.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    call = traj.messages[2]["tool_calls"][0]
    assert traj.messages[3] == {
        "role": "tool", "tool_call_id": call["id"], "content": "Exit code: 0\nSTDOUT:\nhi\n\nSTDERR:\n"}
    assert await sandbox_file(sandbox[0], "/app/f.txt") == b"hi\n"
    # steps carry the messages they appended; together they are the whole conversation
    assert [s.step for s in steps] == [0, 1] and steps == traj.steps
    assert sum((s.messages for s in steps), []) == traj.messages
    row = steps[0].to_row("run", "key", 1)
    assert json.loads(row.messages_json) == traj.messages[:4]
    table = to_table([s.to_row("run", "key", 1) for s in steps], STEPS_SCHEMA)
    assert table.column("step").to_pylist() == [0, 1] and table.column("trial_key").to_pylist() == ["key", "key"]
    assert row.n_tool_calls == 1 and row.tool_names == ["Bash"]
    assert row.tool_output_chars == [len("Exit code: 0\nSTDOUT:\nhi\n\nSTDERR:\n")]
    c = traj.counters
    assert (c.steps, c.tool_calls, c.tool_calling_turns, c.parallel_call_turns) == (2, 1, 1, 0)
    assert c.prompt_tokens > 0 and c.llm_s > 0 and c.tool_s > 0


async def test_empty_final_answer_is_a_clean_finish(sandbox, policy, llm_for):
    traj = await go(sandbox, llm_for(policy([{"content": None}])))
    assert (traj.exit_reason, traj.final_message, traj.counters.steps) == ("agent", "", 1)


async def test_max_turns(sandbox, policy, llm_for):
    srv = policy([{"tool_calls": [bash("true")]}] * 5)
    traj = await go(sandbox, llm_for(srv), agent_cfg(max_steps=3))
    assert traj.exit_reason == "max_turns" and traj.counters.steps == 3 and traj.counters.tool_calls == 3


async def test_max_time_at_step_boundary(sandbox, policy, llm_for):
    srv = policy([{"tool_calls": [bash("sleep 0.6")]}] * 5)
    traj = await go(sandbox, llm_for(srv), agent_cfg(max_total_time_s=0.5))
    assert traj.exit_reason == "max_time" and traj.counters.steps == 1


async def test_max_time_interrupts_a_slow_model_call(sandbox, policy, llm_for):
    srv = policy([{"content": "late", "delay_s": 5}])
    t0 = time.monotonic()
    traj = await go(sandbox, llm_for(srv), agent_cfg(max_total_time_s=0.5))
    assert traj.exit_reason == "max_time" and time.monotonic() - t0 < 3


async def test_bash_timeout_is_capped_by_the_time_budget(sandbox, policy, llm_for):
    srv = policy([{"tool_calls": [bash("sleep 30", timeout=60)]}, {"content": "x"}])
    t0 = time.monotonic()
    traj = await go(sandbox, llm_for(srv), agent_cfg(max_total_time_s=1.5))
    assert time.monotonic() - t0 < 6
    assert traj.exit_reason == "max_time"
    assert traj.messages[-1]["content"].startswith("Timed out after 1.")


async def test_cancel_before_and_during_a_model_call(sandbox, policy, llm_for):
    srv = policy([{"content": "slow", "delay_s": 5}])
    cancel = asyncio.Event()
    cancel.set()
    traj = await go(sandbox, llm_for(srv), cancel=cancel)
    assert traj.exit_reason == "cancelled" and traj.counters.steps == 0
    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, cancel.set)
    t0 = time.monotonic()
    traj = await go(sandbox, llm_for(srv), cancel=cancel)
    assert traj.exit_reason == "cancelled" and time.monotonic() - t0 < 3


async def test_cancel_during_a_tool_call(sandbox, policy, llm_for):
    srv = policy([{"tool_calls": [bash("sleep 3")]}, {"content": "x"}])
    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.5, cancel.set)
    t0 = time.monotonic()
    traj = await go(sandbox, llm_for(srv), cancel=cancel)
    assert traj.exit_reason == "cancelled" and time.monotonic() - t0 < 2.5


# --- length classification (§2.4) ------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt, completion, max_ctx, cap, expected",
    [
        (1900, 100, 2000, 100, "max_context_len"),  # at the context limit, even at the cap
        (1899, 100, 2000, 100, "max_tokens_per_turn"),  # below the limit, at the cap
        (1000, 150, 2000, 100, "max_tokens_per_turn"),  # above the cap
        (1000, 99, 2000, 100, "max_context_len"),  # below both: the server's context
        (5000, 100, 0, 100, "max_tokens_per_turn"),  # no context limit known
        (5000, 100, 0, None, "max_context_len"),
        (None, 100, 2000, 100, "max_tokens_per_turn"),  # no usage: only the cap can say
        (1000, None, 2000, None, "max_context_len"),
        (0, 1, 1, 1, "max_context_len"),  # a context of one token is still a limit
    ],
)
def test_length_exit_reason(prompt, completion, max_ctx, cap, expected):
    from farm.agent.llm import Usage
    from farm.agent.loop import length_exit_reason

    assert length_exit_reason(Usage(prompt_tokens=prompt, completion_tokens=completion), max_ctx, cap) == expected



@pytest.mark.parametrize(
    "usage, cap, expected",
    [
        ({"prompt_tokens": 1000, "completion_tokens": 100}, 100, "max_tokens_per_turn"),
        ({"prompt_tokens": 1950, "completion_tokens": 100}, 100, "max_context_len"),  # >= context
        ({"prompt_tokens": 1900, "completion_tokens": 100}, 100, "max_context_len"),  # exactly the context
        ({"prompt_tokens": 1000, "completion_tokens": 50}, 100, "max_context_len"),  # below the cap
        ({"prompt_tokens": None, "completion_tokens": None, "total_tokens": None}, 100, "max_tokens_per_turn"),
        ({"prompt_tokens": None, "completion_tokens": None, "total_tokens": None}, None, "max_context_len"),
    ],
)
async def test_length_truncated_turn_is_classified_and_not_executed(sandbox, policy, llm_for, usage, cap, expected):
    srv = policy([{"content": "partial", "finish_reason": "length", "usage": usage,
                   "tool_calls": [bash("touch should_not_exist")]}])
    traj = await go(sandbox, llm_for(srv, max_tokens_per_turn=cap), agent_cfg(max_context_tokens=2000))
    assert traj.exit_reason == expected
    assert traj.final_message == "partial"
    assert await sandbox_file(sandbox[0], "/app/should_not_exist") is None
    assert traj.counters.tool_calls == 0 and traj.messages[-1]["role"] == "assistant"


async def test_request_shape_and_headers(sandbox, policy, llm_for):
    srv = policy([{"content": "ok"}])
    llm = llm_for(srv, task_id="task-9", temperature=0.3, max_tokens_per_turn=77, parallel_tool_calls=False,
                  extra_body={"top_k": 20, "chat_template_kwargs": {"enable_thinking": True}})
    await go(sandbox, llm)
    headers, body = srv.requests()[-1]
    assert headers["x-farm-session"] == "sess-1" and headers["x-farm-task"] == "task-9"
    assert float(headers["x-farm-time-left"]) > 500
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is False
    assert body["temperature"] == 0.3 and body["max_completion_tokens"] == 77
    assert body["top_k"] == 20 and body["chat_template_kwargs"] == {"enable_thinking": True}
    assert [t["function"]["name"] for t in body["tools"]] == ["Read", "Write", "Edit", "Glob", "Bash"]
    assert srv.stats() == {"calls": 1, "per_task": {"task-9": 1}}


async def test_no_cap_omits_max_completion_tokens(sandbox, policy, llm_for):
    srv = policy([{"content": "ok"}])
    await go(sandbox, llm_for(srv, max_tokens_per_turn=None))
    assert "max_completion_tokens" not in srv.requests()[-1][1]


# --- context accounting (§2.5) ---------------------------------------------------------------


async def test_context_is_usage_plus_new_tool_messages(sandbox, policy, llm_for):
    srv = policy([{"tool_calls": [bash("head -c 4000 /dev/zero | tr '\\0' a")],
                   "usage": {"prompt_tokens": 900, "completion_tokens": 100}}, {"content": "never"}])
    traj = await go(sandbox, llm_for(srv), agent_cfg(max_context_tokens=1500, tokenizer="bytes"))
    tool_msg = traj.messages[-1]
    expected = 1000 + -(-len(json.dumps([tool_msg], separators=(",", ":")).encode()) // 4)
    assert traj.context_tokens == expected and expected >= 1500
    assert traj.exit_reason == "max_context_len" and traj.counters.steps == 1


async def test_context_limit_is_reached_at_equality(sandbox, policy, llm_for):
    turns = [{"tool_calls": [bash("echo hi")], "usage": {"prompt_tokens": 900, "completion_tokens": 100}},
             {"content": "done"}]
    # learn the context after the first tool turn, then put the limit exactly there and one above
    probe = await go(sandbox, llm_for(policy(turns)), agent_cfg(max_context_tokens=10**6, tokenizer="bytes"))
    assert probe.exit_reason == "agent"
    reached = probe.steps[0].context_tokens
    assert reached > 1000
    at = await go(sandbox, llm_for(policy(turns)), agent_cfg(max_context_tokens=reached, tokenizer="bytes"))
    assert (at.exit_reason, at.counters.steps, at.context_tokens) == ("max_context_len", 1, reached)
    above = await go(sandbox, llm_for(policy(turns)), agent_cfg(max_context_tokens=reached + 1, tokenizer="bytes"))
    assert (above.exit_reason, above.counters.steps) == ("agent", 2)
    unlimited = await go(sandbox, llm_for(policy(turns)), agent_cfg(max_context_tokens=0, tokenizer="bytes"))
    assert unlimited.exit_reason == "agent"


async def test_context_rejection_by_the_server_is_graded(sandbox, policy, llm_for):
    srv = policy([{"error": {"status": 400, "times": 99, "message":
                   "This model's maximum context length is 131072 tokens. Please reduce the length."}}])
    traj = await go(sandbox, llm_for(srv))
    assert traj.exit_reason == "max_context_len" and traj.error is None and traj.counters.steps == 1


# --- endpoint failures ------------------------------------------------------------------------


async def test_endpoint_failure_after_retries_is_llm_query_error(sandbox, policy, llm_for):
    srv = policy([{"error": {"status": 500, "times": 2}, "content": "finally"}])
    traj = await go(sandbox, llm_for(srv, max_retries=1))
    assert traj.exit_reason == "llm_query_error" and "500" in traj.error
    assert srv.stats()["calls"] == 2  # the SDK retried once
    traj = await go(sandbox, llm_for(srv, max_retries=1))  # third request succeeds
    assert traj.exit_reason == "agent" and traj.final_message == "finally"


async def test_unreachable_endpoint_is_llm_query_error(sandbox):
    llm = LLMClient(ModelConfig(base_url="http://127.0.0.1:9/v1", max_retries=0,
                                    request_retry_budget_s=0), session_id="s", task_id="t")
    traj = await go(sandbox, llm)
    assert traj.exit_reason == "llm_query_error" and "Connection" in traj.error


async def test_sandbox_failure_is_tool_error(sandbox, policy, llm_for):
    await sandbox[0].close()
    srv = policy([{"tool_calls": [bash("true"), bash("true")]}])
    traj = await go(sandbox, llm_for(srv))
    assert traj.exit_reason == "tool_error" and "SandboxClosedError" in traj.error
    assert traj.messages[-1]["role"] == "assistant"  # no tool message for a failed call


# --- model output, good and bad ----------------------------------------------------------------


async def test_malformed_arguments_become_empty_object(sandbox, policy, llm_for):
    srv = policy([{"tool_calls": [{"name": "Bash", "arguments": "{\"command\": \"echo hi"},
                                  {"name": "Read", "arguments": "[1, 2]"}]}, {"content": "ok"}])
    traj = await go(sandbox, llm_for(srv))
    assert [m["content"] for m in traj.messages if m["role"] == "tool"] == [
        "ValueError: command is required", "ValueError: file_path is required"]
    assert traj.counters.tool_parse_failures == 2 and traj.exit_reason == "agent"


async def test_unknown_tool_gives_an_observation(sandbox, policy, llm_for):
    srv = policy([{"tool_calls": [{"name": "Grep", "arguments": {"pattern": "x"}}]}, {"content": "ok"}])
    before = sandbox[0].stats.requests
    traj = await go(sandbox, llm_for(srv))
    assert traj.messages[3]["content"] == "Unknown tool: Grep" and traj.exit_reason == "agent"
    assert sandbox[0].stats.requests == before  # answered without a sandbox round trip


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
async def test_reasoning_is_recorded_and_resent(sandbox, policy, llm_for, field):
    srv = policy([{"reasoning": "think", "reasoning_field": field, "tool_calls": [bash("true")]},
                  {"content": "ok"}])
    traj = await go(sandbox, llm_for(srv))
    assert traj.reasoning_field == field
    assert traj.messages[2]["reasoning_content"] == "think"
    resent = srv.requests()[-1][1]["messages"][2]
    assert resent["reasoning_content"] == "think"
    assert set(resent) == {"role", "content", "tool_calls", "reasoning_content"}
    traj = await go(sandbox, llm_for(srv), agent_cfg(keep_reasoning=False))
    assert "reasoning_content" not in traj.messages[2] and traj.reasoning_field == field


async def test_garbage_answers_end_in_defined_exit_reasons(sandbox, policy, llm_for):
    cases = {
        "agent": [{"content": "x" * (1 << 20)}],  # 1 MB of text, no tool call
        "model_error": [{"raw_body": "this is not json"}],
    }
    for expected, turns in cases.items():
        traj = await go(sandbox, llm_for(policy(turns)))
        assert traj.exit_reason == expected, (expected, traj.error)
    traj = await go(sandbox, llm_for(policy([{"raw_body": json.dumps({"choices": []})}])))
    assert traj.exit_reason == "model_error" and "no choices" in traj.error
    srv = policy([{"content": "<tool_call>\n<function=Bash>\n<parameter=command>ls"}])
    traj = await go(sandbox, llm_for(srv))
    assert traj.exit_reason == "agent" and traj.counters.tool_parse_failures == 1


async def test_huge_tool_call_text_hits_the_context_limit(sandbox, policy, llm_for):
    big = "x" * (1 << 20)
    srv = policy([{"tool_calls": [{"name": "Write", "arguments": {"file_path": "big.txt", "content": big}}]}] * 3)
    traj = await go(sandbox, llm_for(srv))
    assert traj.exit_reason == "max_context_len" and traj.counters.steps == 1
