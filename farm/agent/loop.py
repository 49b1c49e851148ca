"""The Leaf-compatible agent loop: one model call per step, tool calls run in the sandbox.

Behaviour follows the vendor's loop step by step (docs/agent.md lists it with the places where
farm differs): system + user message; per step check cancel and the time budget, call the
model, stop on a final answer or a length-truncated turn (its tool calls are NOT executed),
otherwise run the calls, append one tool message per call, add their token count to the
context estimate and stop at max_context_tokens; max_steps exhausted ends in max_turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from farm.agent.execution import ToolCall, ToolExecutor
from farm.agent.llm import LLMClient, LLMError, Reply, Usage
from farm.agent.tokens import TokenCounter
from farm.agent.tools import load_system_prompt, load_tools
from farm.agent.trajectory import ExitReason, StepRecord, Trajectory
from farm.config import AgentConfig
from farm.sandbox.base import Sandbox
from farm.tasks.model import Task

# A tool batch may overrun the budget by this much before the loop gives up waiting: Bash
# timeouts are already capped at the budget, so only a stuck non-Bash call can hit it.
TOOL_GRACE_S = 10.0
RAW_TOOL_MARKUP = ("<tool_call>", "<function=")


def time_budget_s(cfg: AgentConfig, task: Task) -> float:
    """The agent's wall-clock budget: ``agent.max_total_time_s`` (else the task's own agent
    timeout) times ``agent.timeout_multiplier``."""
    return (cfg.max_total_time_s or task.agent_timeout_s) * cfg.timeout_multiplier


class _Stop(Exception):
    def __init__(self, reason: ExitReason) -> None:
        self.reason = reason


async def _race(coro: Awaitable[Any], cancel: asyncio.Event, timeout: float) -> Any:
    """Await ``coro`` unless ``cancel`` is set or ``timeout`` passes first (then _Stop)."""
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        done, _ = await asyncio.wait({task, waiter}, timeout=max(timeout, 0), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise _Stop("cancelled" if cancel.is_set() else "max_time")


def length_exit_reason(usage: Usage, max_context_tokens: int, cap: int | None) -> ExitReason:
    """Leaf's classification of a turn that ended with a length finish_reason."""
    cap = cap or 0
    if usage.prompt_tokens is not None and usage.completion_tokens is not None:
        if max_context_tokens > 0 and usage.prompt_tokens + usage.completion_tokens >= max_context_tokens:
            return "max_context_len"
        if cap and usage.completion_tokens >= cap:
            return "max_tokens_per_turn"
        return "max_context_len"
    return "max_tokens_per_turn" if cap else "max_context_len"


def _account(traj: Trajectory, rec: StepRecord, reply: Reply) -> None:
    u, c = reply.usage, traj.counters
    rec.latency_s, rec.finish_reason, rec.n_tool_calls = reply.latency_s, reply.finish_reason, len(reply.tool_calls)
    rec.prompt_tokens, rec.completion_tokens = u.prompt_tokens, u.completion_tokens
    rec.cached_tokens, rec.reasoning_tokens = u.cached_tokens, u.reasoning_tokens
    c.prompt_tokens += u.prompt_tokens or 0
    c.completion_tokens += u.completion_tokens or 0
    c.cached_tokens += u.cached_tokens or 0
    c.reasoning_tokens += u.reasoning_tokens or 0
    c.llm_s += reply.latency_s
    rec.ttft_s, rec.decode_s, rec.queue_s = reply.ttft_s, reply.decode_s, reply.queue_s
    rec.request_attempts, rec.request_wait_s = reply.attempts, reply.wait_s
    queued = min(reply.queue_s, reply.latency_s) if reply.queue_s is not None else 0.0
    if reply.queue_s is not None:
        c.queue_s = (c.queue_s or 0.0) + queued
    c.generation_s += reply.latency_s - queued
    traj.reasoning_field = traj.reasoning_field or reply.reasoning_field
    if not reply.tool_calls and any(m in reply.content for m in RAW_TOOL_MARKUP):
        c.tool_parse_failures += 1  # the server's tool parser left a call in the text


async def run_agent(
    task: Task,
    sandbox: Sandbox,
    llm: LLMClient,
    cfg: AgentConfig,
    *,
    session_id: str,
    on_step: Callable[[StepRecord], Awaitable[None]] | None = None,
    cancel: asyncio.Event | None = None,
) -> Trajectory:
    started = time.monotonic()
    deadline = started + time_budget_s(cfg, task)
    cancel = cancel or asyncio.Event()
    tools = load_tools(cfg.tools_file)
    # Leaf counts with the served model's own tokenizer: the checkpoint's id unless one is named
    tokenizer_model = cfg.tokenizer_model
    if cfg.tokenizer == "chat_template" and not tokenizer_model:
        tokenizer_model = llm.cfg.serving.source or llm.cfg.name
    counter = TokenCounter(cfg.tokenizer, tokenizer_model)
    executor = ToolExecutor(sandbox, task.workdir, cfg)
    traj = Trajectory(messages=[
        {"role": "system", "content": load_system_prompt(cfg.system_prompt_file)},
        {"role": "user", "content": task.instruction},
    ])
    unrecorded = list(traj.messages)  # the first step record carries system + user

    async def record(rec: StepRecord, appended: list[dict[str, Any]]) -> None:
        rec.messages = unrecorded + appended
        unrecorded.clear()
        traj.steps.append(rec)
        if on_step is not None:
            await on_step(rec)

    def stop(reason: ExitReason, error: str | None = None) -> None:
        traj.exit_reason, traj.error = reason, error

    for step in range(cfg.max_steps):
        time_left = deadline - time.monotonic()
        if cancel.is_set() or time_left <= 0:
            stop("cancelled" if cancel.is_set() else "max_time")
            break
        traj.counters.steps += 1
        rec = StepRecord(step=step)
        try:
            reply: Reply = await _race(
                llm.complete(traj.messages, tools, time_left_s=time_left, keep_reasoning=cfg.keep_reasoning),
                cancel, time_left,
            )
        except _Stop as s:
            await record(rec, [])
            stop(s.reason)
            break
        except LLMError as exc:
            rec.error = str(exc)
            rec.request_attempts, rec.request_wait_s = exc.attempts, exc.wait_s
            await record(rec, [])
            stop(exc.exit_reason, None if exc.exit_reason == "max_context_len" else str(exc))
            break
        _account(traj, rec, reply)
        if cfg.timeout_clock == "agent" and rec.queue_s is not None:
            # the model server's queue is the cluster's load, not the agent's time: credited back
            # (only what the server reports, and only after the call: a call still queued when
            # the budget runs out is cut as under the wall clock)
            deadline += min(rec.queue_s, reply.latency_s)
        traj.messages.append(reply.message)
        usage_ctx = reply.usage.context_tokens()
        traj.context_tokens = usage_ctx if usage_ctx is not None else counter.count_messages(traj.messages)
        rec.context_tokens = traj.context_tokens

        if not reply.tool_calls or reply.truncated:
            traj.final_message = reply.content
            await record(rec, [reply.message])
            if reply.truncated:
                stop(length_exit_reason(reply.usage, cfg.max_context_tokens, llm.cfg.max_tokens_per_turn))
            else:
                stop("agent")
            break

        calls = [ToolCall.from_openai(tc) for tc in reply.tool_calls]
        traj.counters.tool_parse_failures += sum(not c.args_ok for c in calls)
        time_left = deadline - time.monotonic()
        tool_started = time.monotonic()
        try:
            outcomes = await _race(executor.run_turn(calls, time_left_s=time_left), cancel, time_left + TOOL_GRACE_S)
        except _Stop as s:
            await record(rec, [reply.message])
            stop(s.reason)
            break
        rec.tool_s = time.monotonic() - tool_started
        rec.tool_calls = [o.record for o in outcomes]
        tool_msgs = [
            {"role": "tool", "tool_call_id": o.call.call_id, "content": o.observation}
            for o in outcomes if o.failure is None
        ]
        traj.messages.extend(tool_msgs)
        c = traj.counters
        c.tool_s += rec.tool_s
        c.tool_calls += len(tool_msgs)
        c.tool_calling_turns += 1
        c.parallel_call_turns += len(calls) >= 2
        failed = next((o for o in outcomes if o.failure), None)
        if failed is not None:
            await record(rec, [reply.message, *tool_msgs])
            stop("tool_error", failed.failure)
            traj.tool_error_type = failed.failure_type
            break
        traj.context_tokens += counter.count_messages(tool_msgs)
        rec.context_tokens = traj.context_tokens
        await record(rec, [reply.message, *tool_msgs])
        if cfg.max_context_tokens > 0 and traj.context_tokens >= cfg.max_context_tokens:
            stop("max_context_len")
            break
    else:
        stop("max_turns")
    traj.elapsed_s = time.monotonic() - started
    return traj
