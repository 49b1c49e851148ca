"""The Leaf-compatible agent: loop, five tools, LLM client, token accounting, local policies."""

from farm.agent.llm import LLMClient
from farm.agent.loop import run_agent
from farm.agent.trajectory import EXIT_REASONS, Counters, StepRecord, ToolCallRecord, Trajectory

__all__ = ["EXIT_REASONS", "Counters", "LLMClient", "StepRecord", "ToolCallRecord", "Trajectory", "run_agent"]
