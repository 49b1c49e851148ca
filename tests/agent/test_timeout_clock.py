"""agent.timeout_clock: the wall clock (the vendor's) against the agent clock, which credits the
model server's reported queue time back to the budget, so a busier cluster does not cut a
trial shorter."""

from __future__ import annotations

from agent_helpers import agent_cfg

from farm.agent import run_agent

# every call waits 0.6 s at the server, 0.55 s of it reported as queueing (vLLM's metrics)
QUEUED = {"delay_s": 0.6, "metrics": {"queue_time_ms": 550}}
TURNS = [dict(QUEUED, tool_calls=[{"name": "Bash", "arguments": {"command": "true"}}]) for _ in range(3)]
TURNS.append(dict(QUEUED, content="done"))


async def test_the_agent_clock_does_not_count_the_servers_queue(sandbox, policy, llm_for):
    sb, task = sandbox
    wall = await run_agent(task, sb, llm_for(policy(TURNS)), agent_cfg(max_total_time_s=1.5), session_id="s")
    assert wall.exit_reason == "max_time" and wall.counters.steps < 4
    agent = await run_agent(task, sb, llm_for(policy(TURNS)), agent_cfg(max_total_time_s=1.5, timeout_clock="agent"),
                            session_id="s")
    assert (agent.exit_reason, agent.counters.steps) == ("agent", 4), agent.error
    assert agent.elapsed_s > 1.5 * 1.4  # it ran past the wall budget, by the queue it was credited
    assert abs(agent.counters.queue_s - 4 * 0.55) < 1e-9


async def test_the_agent_clock_credits_nothing_a_server_does_not_report(sandbox, policy, llm_for):
    sb, task = sandbox
    silent = [{k: v for k, v in t.items() if k != "metrics"} for t in TURNS]
    traj = await run_agent(task, sb, llm_for(policy(silent)), agent_cfg(max_total_time_s=1.5, timeout_clock="agent"),
                           session_id="s")
    assert traj.exit_reason == "max_time" and traj.counters.queue_s is None
