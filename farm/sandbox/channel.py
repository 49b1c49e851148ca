"""Asyncio client of the sandbox-agent protocol (farm/sandbox/inside/server.py).

One reader task dispatches response lines to futures by request id; requests are written
under a lock. The channel knows nothing about how the byte stream reaches the agent: it takes
anything with ``await reader.readline()`` and ``writer.write()`` / ``await writer.drain()`` /
``writer.close()`` (an asyncio StreamReader/StreamWriter pair, a subprocess's pipes, or an
adapter around a Kubernetes exec WebSocket). When the stream dies every pending request fails
with ``SandboxLostError`` and so does every later one.

Large files move in chunks of at most ``CHUNK`` bytes per request so that no single protocol
line grows without bound.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import tarfile
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from farm.errors import FarmError
from farm.sandbox.base import ExecResult, SandboxClosedError, SandboxLostError

log = logging.getLogger(__name__)

CHUNK = 4 << 20
DEFAULT_OUTPUT_CAP = 1 << 20
# how long past an exec's own timeout the agent may take to answer before the channel is
# declared dead (the agent kills the command at its timeout, so this covers only transport)
EXEC_GRACE_S = 60.0
DEFAULT_REQUEST_TIMEOUT_S = 300.0
READ_PARALLELISM = 4
# a protocol line holds at most one base64 chunk plus JSON framing
LINE_LIMIT = 2 * CHUNK + (1 << 20)


class LineReader(Protocol):
    async def readline(self) -> bytes: ...


class LineWriter(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


class RemoteOpError(FarmError, RuntimeError):
    """The agent answered ``ok=false`` with an error type that has no builtin equivalent."""

    def __init__(self, op: str, type_: str, message: str) -> None:
        self.op = op
        self.type = type_
        super().__init__(f"sandbox op {op!r} failed: {type_}: {message}")


# remote errors re-raised as their builtin type, so callers can catch FileNotFoundError etc.
_BUILTIN_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (
        FileNotFoundError,
        FileExistsError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
        OSError,
        ValueError,
        TypeError,
        TimeoutError,
        ModuleNotFoundError,
    )
}


def _encode_request(rid: str, op: str, args: Mapping[str, Any]) -> bytes:
    """One protocol line. A ``data_b64`` given as bytes is spliced in unescaped: base64 is
    JSON-safe, and json.dumps of a multi-megabyte string costs as much as the base64 itself."""
    payload = args.get("data_b64")
    if not isinstance(payload, (bytes, bytearray)):
        return json.dumps({"id": rid, "op": op, "args": dict(args)}, separators=(",", ":")).encode() + b"\n"
    rest = {k: v for k, v in args.items() if k != "data_b64"}
    head = json.dumps({"id": rid, "op": op, "args": rest}, separators=(",", ":")).encode()[:-2]
    sep = b"" if head.endswith(b"{") else b","
    return b"".join((head, sep, b'"data_b64":"', bytes(payload), b'"}}\n'))


def _remote_error(op: str, error: Mapping[str, Any]) -> Exception:
    type_ = str(error.get("type", "Error"))
    message = str(error.get("message", ""))
    cls = _BUILTIN_ERRORS.get(type_)
    if cls is not None:
        return cls(f"{op}: {message}")
    return RemoteOpError(op, type_, message)


class Channel:
    """Request/response multiplexer over one agent stream."""

    def __init__(
        self,
        reader: LineReader,
        writer: LineWriter,
        *,
        name: str = "sandbox",
        describe_loss: Callable[[], str] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._name = name
        self._describe_loss = describe_loss
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._write_lock = asyncio.Lock()
        self._lost: SandboxLostError | None = None
        self._closed = False
        self._reader_task: asyncio.Task[None] | None = None
        self.requests = 0

    def start(self) -> None:
        if self._reader_task is None:
            self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    @property
    def lost(self) -> SandboxLostError | None:
        return self._lost

    # --- plumbing ---------------------------------------------------------------------------

    def _mark_lost(self, reason: str) -> None:
        if self._lost is not None or self._closed:
            return
        detail = ""
        if self._describe_loss is not None:
            try:
                detail = self._describe_loss()
            except Exception as e:  # a diagnostic must never mask the loss itself
                detail = f"(no detail: {e!r})"
        self._lost = SandboxLostError(f"{self._name}: channel lost: {reason}" + (f"; {detail}" if detail else ""))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self._lost)
                fut.exception()  # mark retrieved: callers that gave up must not warn
        self._pending.clear()

    async def _read_loop(self) -> None:
        try:
            while True:
                try:
                    line = await self._reader.readline()
                except (ValueError, asyncio.LimitOverrunError) as e:
                    self._mark_lost(f"oversized response line ({e})")
                    return
                if not line:
                    self._mark_lost("end of stream (the sandbox agent exited)")
                    return
                try:
                    msg = json.loads(line)
                except ValueError:
                    self._mark_lost(f"non-protocol output {line[:200]!r}")
                    return
                rid = msg.get("id") if isinstance(msg, dict) else None
                fut = self._pending.pop(rid, None) if isinstance(rid, str) else None
                if fut is None:
                    if rid is None and isinstance(msg, dict) and not msg.get("ok", True):
                        log.warning("%s: agent rejected a request: %s", self._name, msg.get("error"))
                    continue
                if not fut.done():
                    fut.set_result(msg)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._mark_lost(f"transport error {e!r}")

    async def request(
        self,
        op: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = DEFAULT_REQUEST_TIMEOUT_S,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its ``result``; raise the remote error on ``ok=false``.

        Re-sending an id is safe: the agent answers from memory (or attaches to the running
        request), and here the callers of one id share one future.
        """
        if self._closed:
            raise SandboxClosedError(f"{self._name}: channel is closed")
        if self._lost is not None:
            raise self._lost
        if self._reader_task is None:
            self.start()
        rid = request_id or uuid.uuid4().hex
        fut = self._pending.get(rid)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
        line = _encode_request(rid, op, args or {})
        self.requests += 1
        try:
            async with self._write_lock:
                self._writer.write(line)
                await self._writer.drain()
        except (ConnectionError, OSError, RuntimeError) as e:
            self._mark_lost(f"write failed: {e!r}")
            raise self._lost or SandboxClosedError(f"{self._name}: channel is closed") from e
        try:
            msg = await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            self._pending.pop(rid, None)
            self._mark_lost(f"no answer to {op!r} within {timeout:.0f} s")
            raise self._lost or SandboxClosedError(f"{self._name}: channel is closed") from None
        if msg.get("ok"):
            return msg.get("result") or {}
        raise _remote_error(op, msg.get("error") or {})

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(SandboxClosedError(f"{self._name}: closed while a request was pending"))
                fut.exception()
        self._pending.clear()
        try:
            self._writer.close()
        except Exception:
            pass
        if self._reader_task is not None:
            self._reader_task.cancel()
            try:
                await self._reader_task
            except (asyncio.CancelledError, Exception):
                pass

    # --- operations -------------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        timeout_s: float = 120.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        merge_stderr: bool = False,
        output_cap: int | None = None,
    ) -> ExecResult:
        res = await self.request(
            "exec",
            {
                "command": command,
                "timeout_s": float(timeout_s),
                "cwd": cwd,
                "env": dict(env) if env else None,
                "merge_stderr": merge_stderr,
                "output_cap": DEFAULT_OUTPUT_CAP if output_cap is None else int(output_cap),
            },
            timeout=float(timeout_s) + EXEC_GRACE_S,
        )
        return ExecResult(
            exit_code=int(res["exit_code"]),
            stdout=res.get("stdout", ""),
            stderr=res.get("stderr", ""),
            timed_out=bool(res.get("timed_out", False)),
            duration_s=float(res.get("duration_s", 0.0)),
            truncated=bool(res.get("truncated", False)),
            output_bytes=int(res.get("output_bytes", 0)),
        )

    async def _read_chunk(self, path: str, offset: int) -> dict[str, Any]:
        return await self.request("read", {"path": path, "offset": offset, "length": CHUNK})

    async def read_file(self, path: str) -> bytes:
        first = await self._read_chunk(path, 0)
        data = base64.b64decode(first["data_b64"])
        if first["eof"]:
            return data
        size = int(first["size"])
        offsets = list(range(len(data), size, CHUNK))
        sem = asyncio.Semaphore(READ_PARALLELISM)

        async def one(off: int) -> bytes:
            async with sem:
                return base64.b64decode((await self._read_chunk(path, off))["data_b64"])

        parts = await asyncio.gather(*(one(o) for o in offsets))
        out = bytearray(data)
        for p in parts:
            out += p
        # the file may have grown while we read it: keep reading until the agent says eof
        while True:
            nxt = await self._read_chunk(path, len(out))
            chunk = base64.b64decode(nxt["data_b64"])
            out += chunk
            if nxt["eof"] or not chunk:
                return bytes(out)

    async def write_file(self, path: str, data: bytes, mode: int | None = 0o644) -> None:
        await self._write_stream(path, io.BytesIO(data), mode)

    async def _write_stream(self, path: str, src: BinaryIO, mode: int | None) -> None:
        # chunks are appended in order (the first one truncates); the mode is set with the last
        chunk = src.read(CHUNK)
        first = True
        while True:
            nxt = src.read(CHUNK)
            await self.request(
                "write",
                {
                    "path": path,
                    "data_b64": base64.b64encode(chunk),
                    "append": not first,
                    "mode": None if nxt else mode,
                    "mkdirs": True,
                },
            )
            if not nxt:
                return
            chunk, first = nxt, False

    async def stat(self, path: str) -> dict[str, Any]:
        return await self.request("stat", {"path": path})

    async def upload(self, local_dir: Path, dest: str) -> int:
        """Copy a host directory's contents into ``dest``; returns the number of files."""
        local_dir = Path(local_dir)
        if not local_dir.is_dir():
            raise NotADirectoryError(f"upload source {str(local_dir)!r} is not a directory")
        remote = f"/tmp/.farm-upload-{uuid.uuid4().hex}.tar"
        with tempfile.TemporaryFile() as spool:
            await asyncio.to_thread(_tar_directory, local_dir, spool)
            spool.seek(0)
            await self._write_stream(remote, spool, 0o600)
        res = await self.request("untar", {"path": remote, "dest": dest, "remove": True})
        return int(res.get("files", 0))


def _tar_directory(local_dir: Path, out: BinaryIO) -> None:
    with tarfile.open(fileobj=out, mode="w") as tar:
        for child in sorted(local_dir.iterdir()):
            tar.add(child, arcname=child.name)
