"""The reconnecting channel to a relay-backed sandbox: requests that survive a lost exec stream.

A Kubernetes pod and a Docker/Podman container are reached through an exec stream
(``relay.py attach``) that a cluster or an engine may cut. :class:`ReconnectingChannel`
re-opens it (within a :class:`ReconnectBudget`) and sends the same request id again, keeps it
from idling out with pings, and tells a sandbox agent the relay restarted after a kill from a
lost transport. The start sequence that opens it is in :mod:`farm.sandbox.relayed.sandbox`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from farm.sandbox.base import ExecResult, SandboxClosedError, SandboxError, SandboxLostError
from farm.sandbox.channel import Channel, RemoteOpError
from farm.sandbox.inside import relay as r
from farm.sandbox.relayed.stream_budget import ReconnectBudget, ReconnectBudgetError

log = logging.getLogger(__name__)

# ops that can be sent again under a new id when the agent was killed under them (relay.py)
IDEMPOTENT_OPS = frozenset({"ping", "read", "stat", "list", "glob"})
KILL_RETRIES = 3

OOM_KILLED = "OOMKilled"  # a container status's reason when its memory limit killed it


class SandboxOutOfMemoryError(SandboxLostError):
    """The whole container was killed at its memory limit (cgroup v2 kills the group, relay
    included, since Kubernetes 1.28): the trial's own processes used more than the task allows.
    Nothing is left to grade in place. The run layer counts it as a lost sandbox by its type
    (run/trial.py); the message names the container's terminated state."""


def agent_killed(exc: BaseException) -> bool:
    """The relay answered: the sandbox agent was killed by a signal while this request ran."""
    return isinstance(exc, RemoteOpError) and exc.type == r.KILLED


def killed_signal(exc: BaseException) -> int:
    found = re.search(r"killed by signal (\d+)", str(exc))
    return int(found.group(1)) if found else 9


class StreamPair(Protocol):
    reader: asyncio.StreamReader

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    def describe(self) -> str: ...


class ProcStream:
    """A subprocess's stdin/stdout as the stream pair a ReconnectingChannel reads and writes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.reader = proc.stdout  # type: ignore[assignment]

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    async def drain(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.drain()

    def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()

    def describe(self) -> str:
        return f"exec stream exit status {self.proc.returncode}"


class _NoStream:
    async def readline(self) -> bytes:
        return b""

    def write(self, data: bytes) -> None:
        raise RuntimeError("no stream")

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


class ReconnectingChannel(Channel):
    """A Channel whose requests survive the loss of the underlying stream.

    On ``SandboxLostError`` a new stream is opened (as often as ``budget`` allows) and the same
    request id is sent again; the agent de-duplicates by id, so a lost reply is re-read and a
    running command is re-attached, never re-run. With ``keepalive_s`` a ``ping`` goes down the
    stream whenever nothing was written for that long (also while a long command runs), so a
    cluster that cuts idle streams never sees one idle.
    """

    def __init__(self, open_stream: Callable[[], Awaitable[StreamPair]], *, name: str,
                 budget: ReconnectBudget, alive: Callable[[], Awaitable[str | None]],
                 keepalive_s: float | None = None) -> None:
        self._open_stream = open_stream
        self._budget = budget
        self._alive = alive  # None if the sandbox can still serve, else why not
        self._inner: Channel | None = None
        self._stream: StreamPair | None = None
        self._reopen_lock = asyncio.Lock()
        self._keepalive_s = keepalive_s
        self._keepalive: asyncio.Task[None] | None = None
        self._last_write = time.monotonic()
        self.keepalives = 0
        self.reconnects = 0
        self.agent_restarts = 0  # how often the relay restarted a killed agent (last seen)
        self.agent_kills: list[dict[str, Any]] = []
        super().__init__(_NoStream(), _NoStream(), name=name)

    async def connect(self) -> None:
        stream = await self._open_stream()
        inner = Channel(stream.reader, stream, name=self._name, describe_loss=stream.describe)
        inner.start()
        self._stream, self._inner = stream, inner
        self._last_write = time.monotonic()
        if self._keepalive_s and (self._keepalive is None or self._keepalive.done()):
            self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive(self._keepalive_s))

    async def _keep_alive(self, every_s: float) -> None:
        """Ping down the stream when nothing was written for ``every_s``; a stream found lost
        is re-opened here (within the budget), so the next tool call does not wait for it."""
        while not self._closed:
            await asyncio.sleep(max(0.0, self._last_write + every_s - time.monotonic()))
            inner = self._inner
            if self._closed or inner is None or time.monotonic() - self._last_write < every_s:
                continue
            self._last_write = time.monotonic()
            try:
                if inner.lost is None:
                    await inner.request("ping", {}, timeout=max(60.0, every_s))
                    self.keepalives += 1
                    continue
            except SandboxLostError:
                pass
            except Exception as e:  # noqa: BLE001 - a ping must never end the sandbox by itself
                log.warning("%s: keepalive ping failed: %r", self._name, e)
                continue
            if self._closed:
                return
            try:
                await self._reopen(inner)
            except SandboxError as e:  # the next request raises it again, to its caller
                log.warning("%s: keepalive could not re-open the stream: %s", self._name, e)
                return

    async def _reopen(self, broken: Channel) -> None:
        async with self._reopen_lock:
            if self._inner is not broken:
                return  # another request already re-opened the stream
            if not self._budget.take():
                raise ReconnectBudgetError(
                    f"{self._name}: sandbox lost: the exec stream was lost more often than "
                    f"{self._budget.describe()} allows (re-opened {self.reconnects} times in all); "
                    f"last loss: {broken.lost}")
            why = await self._alive()
            if why:
                self._budget.give_back()
                lost = SandboxOutOfMemoryError if OOM_KILLED in why else SandboxLostError
                raise lost(f"{self._name}: channel lost and the sandbox cannot serve: {why}")
            self.reconnects += 1
            log.warning("%s: exec stream lost (%s); re-opening (%d so far; %s)", self._name, broken.lost,
                        self.reconnects, self._budget.describe())
            await broken.close()
            try:
                await self.connect()
            except Exception as e:  # the API server refused the exec (a 500, the kubelet unreachable)
                raise SandboxLostError(f"{self._name}: exec stream not re-opened: {type(e).__name__}: {e}") from e
            if await self.relay_status():
                # the agent's own command killed the exec session with the agent (kill -9 -1):
                # not a transport failure, so it does not use up the sandbox's reconnects
                self.reconnects -= 1
                self._budget.give_back()

    async def relay_status(self, timeout: float = 30.0) -> bool:
        """Read what the relay recorded; True when it restarted a killed agent since last asked."""
        inner = self._inner
        if inner is None or inner.lost is not None:
            return False
        try:
            status = await inner.request(r.STATUS_OP, {}, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - a diagnostic; the next request tells the truth
            log.warning("%s: relay status unavailable: %r", self._name, e)
            return False
        restarts = int(status.get("restarts") or 0)
        kills = status.get("kills")
        if isinstance(kills, list):
            self.agent_kills = kills
        if restarts > self.agent_restarts:
            log.warning("%s: the sandbox agent was killed and restarted (%d so far): %s", self._name, restarts,
                        self.agent_kills[-1:] or "")
            self.agent_restarts = restarts
            return True
        return False

    async def request(self, op: str, args: Mapping[str, Any] | None = None, *,
                      timeout: float | None = 300.0, request_id: str | None = None) -> dict[str, Any]:
        if self._closed:
            raise SandboxClosedError(f"{self._name}: channel is closed")
        rid = request_id or uuid.uuid4().hex
        kills = 0
        while True:
            inner = self._inner
            if inner is None:
                raise SandboxClosedError(f"{self._name}: channel is not connected")
            self._last_write = time.monotonic()
            try:
                result = await inner.request(op, args, timeout=timeout, request_id=rid)
                self.requests += 1
                return result
            except SandboxLostError:
                if self._closed:
                    raise SandboxClosedError(f"{self._name}: closed while a request was pending") from None
                await self._reopen(inner)
            except RemoteOpError as e:
                if not agent_killed(e) or op in ("exec", "tool"):
                    raise  # the sandbox's exec and tool turn a kill into the command's result
                if op not in IDEMPOTENT_OPS or kills >= KILL_RETRIES:
                    # a write cut short: whether it landed is unknown, so the sandbox is not sound
                    raise SandboxLostError(f"{self._name}: {op!r} interrupted: {e}") from e
                # a read that ran while something killed the agent changed nothing: ask again
                kills += 1
                rid = uuid.uuid4().hex

    async def exec(self, command: str, timeout_s: float = 120.0, *args: Any, **kwargs: Any) -> ExecResult:
        """As ``Channel.exec``; a command under which the agent was killed ends as killed by
        that signal (it is what killed the agent, or died with it), not as a lost sandbox."""
        try:
            return await super().exec(command, timeout_s, *args, **kwargs)
        except RemoteOpError as e:
            if not agent_killed(e):
                raise
            return ExecResult(exit_code=128 + killed_signal(e), stderr=f"farm: {e}\n")

    async def shutdown(self) -> None:
        """Ask the agent to stop (best effort: the sandbox is removed next anyway), then close."""
        inner = self._inner
        if inner is not None and inner.lost is None:
            try:
                await asyncio.wait_for(inner.request("shutdown", {}, timeout=10), 15)
            except Exception:  # noqa: BLE001 - removal below is what guarantees the outcome
                pass
        await self.close()
        if self._stream is not None:
            self._stream.close()

    async def close(self) -> None:
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)  # it only ever logs
            self._keepalive = None
        if self._inner is not None:
            await self._inner.close()
