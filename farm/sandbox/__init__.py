"""Sandboxes: the protocol and typed errors (base), the agent channel, the backends.

Backends are imported from their modules (``farm.sandbox.local.LocalSandbox``) so that
importing this package stays cheap.
"""

from farm.sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxClosedError,
    SandboxError,
    SandboxLostError,
    SandboxStartError,
    SandboxStats,
)

__all__ = [
    "ExecResult",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "SandboxLostError",
    "SandboxStartError",
    "SandboxStats",
]
