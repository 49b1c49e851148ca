"""Sandboxes: the protocol and typed errors (base), the agent channel, the backends.

Callers open sandboxes through the registry (``farm.sandbox.registry.open_sandbox``), which
imports a backend module only when its name is chosen, so importing this package stays cheap.
"""

from farm.sandbox.base import (
    Capabilities,
    CapabilityError,
    ExecResult,
    GcReport,
    Sandbox,
    SandboxClosedError,
    SandboxError,
    SandboxLostError,
    SandboxStartError,
    SandboxStats,
    StatResult,
    ToolRequest,
    ToolResponse,
)

__all__ = [
    "Capabilities",
    "CapabilityError",
    "ExecResult",
    "GcReport",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "SandboxLostError",
    "SandboxStartError",
    "SandboxStats",
    "StatResult",
    "ToolRequest",
    "ToolResponse",
]
