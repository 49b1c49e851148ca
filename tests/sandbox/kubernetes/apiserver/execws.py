"""``pods/exec`` over WebSocket, as the API server and kubelet serve it to client-python.

Subprotocols ``v5.channel.k8s.io`` and ``v4.channel.k8s.io``: every binary message starts with
a channel byte (0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize; in v5, ``255 N`` closes
channel N). The command runs in the pod's PID, mount and (if it has one) network namespace,
like a container runtime's exec; it ends with a v1 Status on channel 3 (``Success``, or
``Failure``/``NonZeroExitCode`` with the exit code as a cause), then the socket closes.

Cuts (``ExecKnobs``): a stream with no message either way for ``idle_cut_s`` is cut, as
clusters and load balancers cut idle exec streams; ``cut_after_s`` gives every stream a random
lifetime from a seeded generator; ``Emulator.cut_exec_streams()`` cuts them all now. A cut drops
the TCP connection without a close frame and kills the exec'd process, as a broken stream
does on a kubelet. Every cut is recorded in ``cuts``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


@dataclass
class ExecKnobs:
    idle_cut_s: float | None = None  # cut a stream silent in both directions for this long
    pings_count_as_traffic: bool = True  # whether a WebSocket ping resets the idle clock
    cut_after_s: tuple[float, float] | None = None  # random lifetime (uniform) of every stream
    seed: int = 0
    protocols: tuple[str, ...] = PROTOCOLS  # what the server accepts, in its order of preference
    _rng: random.Random | None = field(default=None, repr=False)

    def lifetime(self) -> float | None:
        if self.cut_after_s is None:
            return None
        if self._rng is None:
            self._rng = random.Random(self.seed)
        return self._rng.uniform(*self.cut_after_s)


@dataclass
class ExecSession:
    pod: str
    command: list[str]
    protocol: str
    opened: float = field(default_factory=time.monotonic)
    last_traffic: float = field(default_factory=time.monotonic)
    closed_by: str | None = None  # client | exit | cut:idle | cut:lifetime | cut:test
    exit_code: int | None = None
    ws: web.WebSocketResponse | None = None
    request: web.Request | None = None

    def cut(self, why: str) -> None:
        if self.closed_by is None:
            self.closed_by = f"cut:{why}"
        if self.request is not None and self.request.transport is not None:
            self.request.transport.abort()  # no close frame: what a dropped connection looks like


def status_frame(code: int | None, command: list[str]) -> bytes:
    if code == 0:
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
    else:
        status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                  "message": f"command terminated with non-zero exit code: error executing command {command}, "
                             f"exit code {code}",
                  "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
    return bytes([ERROR]) + json.dumps(status).encode()


async def serve_exec(request: web.Request, pod: str, target: tuple[int, bool], command: list[str],
                     knobs: ExecKnobs, sessions: list[ExecSession], use_stdin: bool) -> web.StreamResponse:
    pid, own_netns = target
    ws = web.WebSocketResponse(protocols=knobs.protocols, autoping=False, max_msg_size=0)
    await ws.prepare(request)
    protocol = ws.ws_protocol or ""
    if protocol not in PROTOCOLS:
        await ws.close(code=1002, message=b"no supported channel subprotocol")
        return ws
    session = ExecSession(pod, command, protocol, ws=ws, request=request)
    sessions.append(session)
    argv = ["nsenter", "-t", str(pid), "-p", "-m", "-r", "-w", *(["-n"] if own_netns else []), "--", *command]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if use_stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)

    async def pump(stream: asyncio.StreamReader, channel: int) -> None:
        while chunk := await stream.read(1 << 16):
            session.last_traffic = time.monotonic()
            await ws.send_bytes(bytes([channel]) + chunk)

    async def from_client() -> None:
        async for msg in ws:
            if knobs.pings_count_as_traffic or msg.type not in (WSMsgType.PING, WSMsgType.PONG):
                session.last_traffic = time.monotonic()
            if msg.type == WSMsgType.PING:
                await ws.pong(msg.data)
            elif msg.type in (WSMsgType.BINARY, WSMsgType.TEXT):
                data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                if not data:
                    continue
                if data[0] == STDIN and proc.stdin is not None:
                    proc.stdin.write(data[1:])
                    await proc.stdin.drain()
                elif data[0] == CLOSE and protocol == PROTOCOLS[0] and data[1:2] == bytes([STDIN]) and proc.stdin:
                    proc.stdin.close()
        if session.closed_by is None:
            session.closed_by = "client"

    async def cutter() -> None:
        lifetime = knobs.lifetime()
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            if lifetime is not None and now - session.opened >= lifetime:
                return session.cut("lifetime")
            if knobs.idle_cut_s is not None and now - session.last_traffic >= knobs.idle_cut_s:
                return session.cut("idle")

    outputs = asyncio.gather(pump(proc.stdout, STDOUT), pump(proc.stderr, STDERR))  # type: ignore[arg-type]
    client = asyncio.ensure_future(from_client())
    cut = asyncio.ensure_future(cutter())
    ended = asyncio.ensure_future(proc.wait())
    try:
        await asyncio.wait({ended, client, cut}, return_when=asyncio.FIRST_COMPLETED)
        if ended.done() and session.closed_by is None:
            await outputs
            session.exit_code = proc.returncode
            session.closed_by = "exit"
            await ws.send_bytes(status_frame(proc.returncode, command))
            await ws.close()
    except (ConnectionError, RuntimeError):  # the client went away mid-send
        session.closed_by = session.closed_by or "client"
    finally:
        for t in (client, cut):
            t.cancel()
        if proc.returncode is None:  # the stream ended first: the exec session dies with it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
        outputs.cancel()
    return ws
