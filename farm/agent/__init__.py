"""The Leaf-compatible agent: loop, five tools, LLM client, token accounting, local policies."""

from farm.agent.llm import LLMClient
from farm.agent.loop import run_agent
from farm.agent.trajectory import Counters, StepRecord, ToolCallRecord, Trajectory

__all__ = ["Counters", "LLMClient", "StepRecord", "ToolCallRecord", "Trajectory", "run_agent"]
