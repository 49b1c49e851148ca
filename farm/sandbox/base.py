"""The Sandbox protocol every backend implements, and its typed errors.

A command that times out is an ``ExecResult`` with ``timed_out=True``; only infrastructure
failures (the sandbox could not start, was lost, its channel broke) raise, and they raise a
``SandboxError`` so the runner can classify them as ``infra_error`` and retry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable

from farm.errors import FarmError


class SandboxError(FarmError, RuntimeError):
    """Infrastructure failure of a sandbox: retryable, never the agent's fault."""


class SandboxStartError(SandboxError):
    """The sandbox could not be created or its environment could not be built."""


class SandboxLostError(SandboxError):
    """The sandbox (or its channel) died while in use."""


class SandboxClosedError(SandboxError):
    """An operation was attempted on a sandbox that was already closed."""


@dataclass
class ExecResult:
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    truncated: bool = False  # the captured output exceeded the cap and was cut
    output_bytes: int = 0  # total bytes the command produced, before any cap

    @property
    def output(self) -> str:
        """stdout followed by stderr (merged when the command ran with merge_stderr)."""
        return self.stdout + self.stderr


@dataclass
class SandboxStats:
    """Counters a trial row reports (what the sandbox cost, how many remote calls it made)."""

    start_s: float = 0.0
    requests: int = 0
    api_calls_start: int = 0  # Kubernetes API-server calls made to start the sandbox
    api_calls_after_start: int = 0  # ... and afterwards (the exec channel should need none)
    cpu_s: float | None = None  # CPU seconds consumed inside the sandbox, when measurable
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Sandbox(Protocol):
    """One isolated environment for one trial.

    Paths are absolute paths inside the sandbox. Every method except ``close`` raises
    ``SandboxClosedError`` after ``close``.
    """

    stats: SandboxStats

    async def start(self) -> None: ...

    async def exec(
        self,
        command: str,
        timeout_s: float = 120.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        merge_stderr: bool = False,
        output_cap: int | None = None,
    ) -> ExecResult:
        """Run ``bash -c command``; the timeout kills every process the command started."""
        ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    async def upload(self, local_dir: Path, dest: str) -> None:
        """Copy a host directory's contents into ``dest`` (created if needed)."""
        ...

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Send a raw request of the sandbox-agent protocol (tool operations use it)."""
        ...

    async def close(self) -> None:
        """Stop every process in the sandbox and release it; idempotent."""
        ...
