"""The Sandbox operations every backend implements the same way: through its protocol channel.

Backends differ in how they start, reach and stop the sandbox agent (a bwrap process, a pod's
exec stream, a container); once there is a channel, exec / read / write / upload / tool calls
are identical, so they live here once. A backend provides ``_ch()`` (its channel, or raise if
closed/not started), ``_env`` (the image's environment after the build steps), ``_workdir``,
``stats`` and, if it can do more than the common core, ``capabilities``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from farm.sandbox.base import (
    Capabilities,
    CapabilityError,
    ExecResult,
    SandboxError,
    SandboxStats,
    StatResult,
    ToolRequest,
    ToolResponse,
    VerifierRun,
)
from farm.sandbox.channel import DEFAULT_OUTPUT_CAP, EXEC_GRACE_S, Channel


class ChannelSandboxMixin:
    _env: dict[str, str]
    _workdir: str
    stats: SandboxStats
    capabilities: Capabilities = Capabilities()

    def _ch(self) -> Channel:  # pragma: no cover - provided by the backend
        raise NotImplementedError

    @property
    def workdir(self) -> str:
        """The working directory commands run in (the last WORKDIR of the build)."""
        return self._workdir

    def _count(self, ch: Channel) -> None:
        self.stats.requests = ch.requests

    async def exec(
        self,
        command: str,
        timeout_s: float = 120.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        merge_stderr: bool = False,
        output_cap: int | None = None,
    ) -> ExecResult:
        ch = self._ch()
        merged = {**self._env, **(env or {})}
        try:
            return await ch.exec(command, timeout_s, cwd or self._workdir, merged or None, merge_stderr, output_cap)
        finally:
            self._count(ch)

    async def run_verifier(self, command: str, timeout_s: float, cwd: str | None = None,
                           env: Mapping[str, str] | None = None, output_cap: int | None = None) -> VerifierRun:
        """Run the in-place verifier in a mount namespace of its own, outside the agent's PID
        namespace, with a private tmpfs over /tests (a copy of what was uploaded) and over
        /logs/verifier (inside/verifier_ns.py); stderr is merged into stdout.

        Raises:
            CapabilityError: the backend cannot (``capabilities.private_verifier`` is False).
            SandboxError: the channel broke.
        """
        if not self.capabilities.private_verifier:
            raise CapabilityError(f"{type(self).__name__} cannot run a private verifier")
        merged = {**self._env, **(env or {})}
        res = await self._request("exec", {
            "command": command, "timeout_s": float(timeout_s), "cwd": cwd or self._workdir,
            "env": merged or None, "merge_stderr": False,
            "output_cap": DEFAULT_OUTPUT_CAP if output_cap is None else int(output_cap),
            "private_verifier": True}, timeout=float(timeout_s) + EXEC_GRACE_S)
        result = ExecResult(exit_code=int(res["exit_code"]), stdout=res.get("stdout", ""),
                            stderr=res.get("stderr", ""), timed_out=bool(res.get("timed_out", False)),
                            duration_s=float(res.get("duration_s", 0.0)), truncated=bool(res.get("truncated")),
                            output_bytes=int(res.get("output_bytes", 0)))
        report = res.get("verifier")
        if not isinstance(report, dict):
            # it may have run privately and died before reporting: nothing outside is to be trusted
            return VerifierRun(result, {}, "timed out" if result.timed_out else "verifier_ns.py reported nothing")
        if report.get("failed"):  # it did not run: nothing in /logs/verifier is the verifier's
            return VerifierRun(result, {}, str(report.get("why")), bool(report.get("redirected")))
        if not report.get("private"):
            return VerifierRun(result, None, str(report.get("why") or "no private namespace"))
        files = {str(k): base64.b64decode(v) for k, v in (report.get("files") or {}).items()}
        return VerifierRun(result, files)

    async def read_file(self, path: str) -> bytes:
        ch = self._ch()
        try:
            return await ch.read_file(path)
        finally:
            self._count(ch)

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        ch = self._ch()
        try:
            await ch.write_file(path, data, mode)
        finally:
            self._count(ch)

    async def upload(self, local_dir: Path, dest: str) -> None:
        ch = self._ch()
        try:
            await ch.upload(Path(local_dir), dest)
        finally:
            self._count(ch)

    async def stat(self, path: str) -> StatResult:
        return StatResult.from_wire(await self.call("stat", path=path))

    async def tool(self, request: ToolRequest) -> ToolResponse:
        limits = dict(request.limits)
        if self._env:
            # the agent's Bash runs server-side: it gets the image's ENV as exec() does
            limits["env"] = {**self._env, **(limits.get("env") or {})}
        wire = {**request.to_wire(), "limits": limits}
        # a tool call (e.g. a long Bash) is bounded by the agent loop's time budget, not by
        # the channel's transport timeout
        return ToolResponse.from_wire(await self._request("tool", wire, timeout=None))

    async def set_network(self, network: str) -> None:
        raise CapabilityError(f"{type(self).__name__} cannot switch its network after start")

    async def kill_leftovers(self) -> int:
        res = await self._request("kill_leftovers", {}, timeout=60)
        if not res.get("clean", False):
            raise SandboxError(f"{type(self).__name__}: processes the agent left survived "
                               f"{res.get('killed')} kills")
        return int(res.get("killed", 0))

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """A raw request of the sandbox-agent protocol (ping, list, glob, ...): for tests and
        benchmarks; farm's own callers use the typed operations above. Sent as given: the image's
        environment is not merged into a raw ``tool`` request."""
        return await self._request(op, args)

    async def _request(self, op: str, args: Mapping[str, Any], **kw: Any) -> dict[str, Any]:
        ch = self._ch()
        try:
            return await ch.request(op, args, **kw)
        finally:
            self._count(ch)
