"""agent.timeout_clock: the wall clock (the vendor's) against the agent clock, which credits the
model server's reported queue time back to the budget, so a busier cluster does not cut a
trial shorter."""

from __future__ import annotations

from agent_helpers import agent_cfg

from farm.agent import run_agent

# every call waits 1 s at the server, 0.95 s of it reported as queueing (vLLM's metrics)
QUEUED = {"delay_s": 1.0, "metrics": {"queue_time_ms": 950}}
BUDGET_S = 3.0  # four calls take 4 s of wall time; the agent's own time is well under 3 s
TURNS = [dict(QUEUED, tool_calls=[{"name": "Bash", "arguments": {"command": "true"}}]) for _ in range(3)]
TURNS.append(dict(QUEUED, content="done"))


async def test_the_agent_clock_does_not_count_the_servers_queue(sandbox, policy, llm_for):
    sb, task = sandbox
    wall = await run_agent(task, sb, llm_for(policy(TURNS)), agent_cfg(max_total_time_s=BUDGET_S), session_id="s")
    assert wall.exit_reason == "max_time" and wall.counters.steps < 4
    agent_clock = agent_cfg(max_total_time_s=BUDGET_S, timeout_clock="agent")
    agent = await run_agent(task, sb, llm_for(policy(TURNS)), agent_clock, session_id="s")
    assert (agent.exit_reason, agent.counters.steps) == ("agent", 4), agent.error
    assert agent.elapsed_s > BUDGET_S  # it ran past the wall budget, by the queue it was credited
    assert abs(agent.counters.queue_s - 4 * 0.95) < 1e-9


async def test_the_agent_clock_credits_nothing_a_server_does_not_report(sandbox, policy, llm_for):
    sb, task = sandbox
    silent = [{k: v for k, v in t.items() if k != "metrics"} for t in TURNS]
    agent_clock = agent_cfg(max_total_time_s=BUDGET_S, timeout_clock="agent")
    traj = await run_agent(task, sb, llm_for(policy(silent)), agent_clock, session_id="s")
    assert traj.exit_reason == "max_time" and traj.counters.queue_s is None
