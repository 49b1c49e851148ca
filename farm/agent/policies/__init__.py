"""Local policies (oracle, nop, scripted) served as OpenAI-compatible endpoints."""

from farm.agent.policies.server import POLICIES, PolicyServer, start_policy_server  # noqa: F401

__all__ = ["POLICIES", "PolicyServer", "start_policy_server"]
