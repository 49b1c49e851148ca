"""The row vocabulary, in process (no sandbox, no server): how an agent's infrastructure exit
becomes an error class, decided on the exception type the loop carries, not on its text."""

from __future__ import annotations

from typing import Any

import pytest

from farm.agent.execution import ToolCall, ToolExecutor
from farm.agent.llm import LLMError
from farm.agent.trajectory import EXIT_REASONS, Trajectory
from farm.config import load_config
from farm.run.rows import (
    INFRA_EXIT_REASONS,
    NOT_RETRYABLE,
    SANDBOX_LOST,
    agent_error_class,
    is_unsupported,
    unsupported_class,
)
from farm.sandbox.base import SandboxClosedError, SandboxLostError
from farm.sandbox.relayed.stream_budget import ReconnectBudgetError


class _OutOfMemory(SandboxLostError):
    """Any kind of lost sandbox (the relayed backend's out-of-memory kill is one)."""


def _ended(reason: str, error: str | None, error_type: type[BaseException] | None) -> Trajectory:
    traj = Trajectory(messages=[])
    traj.exit_reason, traj.error, traj.tool_error_type = reason, error, error_type  # type: ignore[assignment]
    return traj


@pytest.mark.parametrize("lost", [SandboxLostError, ReconnectBudgetError, _OutOfMemory])
def test_a_sandbox_lost_under_a_tool_call_is_named_so(lost: type[BaseException]) -> None:
    assert agent_error_class(_ended("tool_error", f"{lost.__name__}: gone", lost)) == SANDBOX_LOST


def test_other_tool_failures_stay_tool_errors_whatever_their_text_says() -> None:
    assert agent_error_class(_ended("tool_error", "SandboxClosedError: closed", SandboxClosedError)) == "tool_error"
    # the text looks like a lost sandbox, the exception was not one: the type decides
    assert agent_error_class(_ended("tool_error", "SandboxLostError: spoofed", RuntimeError)) == "tool_error"
    # a call the vendor's harness refuses carries no exception
    assert agent_error_class(_ended("tool_error", "ValueError: could not convert", None)) == "tool_error"
    assert agent_error_class(_ended("llm_query_error", "APIConnectionError: refused", None)) == "llm_query_error"


def test_exit_reasons_are_one_closed_set() -> None:
    assert set(INFRA_EXIT_REASONS) <= set(EXIT_REASONS)
    reasons = {cls.exit_reason for cls in (LLMError, *LLMError.__subclasses__())}
    assert reasons <= set(EXIT_REASONS)


def test_refusals_and_deterministic_failures_are_not_retried() -> None:
    assert is_unsupported(unsupported_class("history_strip")) and not is_unsupported(None)
    assert not is_unsupported("sandbox_start:image_build") and "sandbox_start:image_build" in NOT_RETRYABLE


class _LosingSandbox:
    async def tool(self, request: Any) -> Any:
        raise ReconnectBudgetError("the stream could not be re-established")


async def test_the_executor_keeps_the_failures_exception_type() -> None:
    cfg = load_config([]).agent
    ex = ToolExecutor(_LosingSandbox(), "/app", cfg)  # type: ignore[arg-type]
    (out,) = await ex.run_turn([ToolCall("c", "Bash", {"command": "true"}, True)])
    assert out.failure == "ReconnectBudgetError: the stream could not be re-established"
    assert out.failure_type is ReconnectBudgetError
