"""What the agent loop adds up over a run (farm/agent/loop.py): tokens from every turn's usage,
time spent waiting for the model, and tool calls the server's parser left in the text."""

from __future__ import annotations

import pytest
from agent_helpers import agent_cfg

from farm.agent import run_agent


async def test_counters_are_the_sums_over_every_turn(sandbox, policy, llm_for):
    sb, task = sandbox
    srv = policy([
        {"tool_calls": [{"name": "Bash", "arguments": "{\"command\": \"echo hi"}], "delay_s": 0.4,
         "usage": {"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 40},
                   "completion_tokens_details": {"reasoning_tokens": 3}}},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}],
         "usage": {"prompt_tokens": None, "completion_tokens": None}},  # a server that reports nothing
        {"content": "<tool_call>{\"name\": \"Bash\"}</tool_call>",
         "usage": {"prompt_tokens": 300, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 70},
                   "completion_tokens_details": {"reasoning_tokens": 7}}},
    ])
    traj = await run_agent(task, sb, llm_for(srv), agent_cfg(), session_id="s")
    assert traj.exit_reason == "agent", traj.error
    assert traj.messages[1] == {"role": "user", "content": task.instruction}
    c = traj.counters
    assert (c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.reasoning_tokens) == (400, 40, 110, 10)
    assert [s.prompt_tokens for s in traj.steps] == [100, None, 300]
    assert c.llm_s >= 0.4 and c.llm_s == pytest.approx(sum(s.latency_s for s in traj.steps))
    # one malformed call, one call left as text in the final answer
    assert c.tool_parse_failures == 2
