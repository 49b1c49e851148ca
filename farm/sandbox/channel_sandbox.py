"""The Sandbox operations every backend implements the same way: through its protocol channel.

Backends differ in how they start, reach and stop the sandbox agent (a bwrap process, a pod's
exec stream, a container); once there is a channel, exec / read / write / upload / tool calls
are identical, so they live here once. A backend provides ``_ch()`` (its channel, or raise if
closed/not started), ``_env`` (the image's environment after the build steps), ``_workdir``,
``stats`` and, if it can do more than the common core, ``capabilities``.
"""

from __future__ import annotations

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
)
from farm.sandbox.channel import Channel


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
