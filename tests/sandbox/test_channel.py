"""The channel and the sandbox agent talking over real pipes (no bubblewrap in between)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

import pytest

from farm.errors import FarmError
from farm.sandbox.base import SandboxClosedError, SandboxLostError
from farm.sandbox.channel import LINE_LIMIT, Channel, RemoteOpError, _encode_request
from tests.procs import alive

SERVER = Path(__file__).resolve().parents[2] / "farm" / "sandbox" / "inside" / "server.py"

# the agent must run on any Python >= 3.8 a task image may bring
INTERPRETERS = [p for p in ("/usr/bin/python3", os.path.expanduser("~/.pyenv/versions/3.8.18/bin/python3"))
                if os.access(p, os.X_OK)]
INTERPRETERS = INTERPRETERS or [sys.executable]


class Agent:
    def __init__(self, proc: asyncio.subprocess.Process, channel: Channel, workdir: Path) -> None:
        self.proc, self.channel, self.workdir = proc, channel, workdir


async def start_agent(python: str, server: Path, workdir: Path) -> Agent:
    proc = await asyncio.create_subprocess_exec(
        python, str(server), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT,
        cwd=workdir
    )
    ch = Channel(proc.stdout, proc.stdin, name="test-agent", describe_loss=lambda: f"agent exit {proc.returncode}")  # type: ignore[arg-type]
    ch.start()
    return Agent(proc, ch, workdir)


@pytest.fixture(params=INTERPRETERS)
async def agent(request: pytest.FixtureRequest, tmp_path: Path):
    a = await start_agent(request.param, SERVER, tmp_path)
    yield a
    await a.channel.close()
    if a.proc.returncode is None:
        a.proc.kill()
    await a.proc.wait()




async def _gone(pid: int) -> None:
    # SIGKILL is asynchronous: on a busy machine the exit can take a moment to complete
    deadline = time.monotonic() + 20
    while alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not alive(pid), f"process {pid} survived"


async def test_ping_reports_the_interpreter(agent: Agent) -> None:
    pong = await agent.channel.request("ping")
    assert pong["pid"] == agent.proc.pid
    assert pong["python"].startswith("3.")


async def test_responses_are_matched_by_id_in_completion_order(agent: Agent) -> None:
    ch = agent.channel
    slow = asyncio.ensure_future(ch.exec("sleep 0.5; echo slow"))
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    fast = await ch.exec("echo fast")
    assert fast.stdout == "fast\n" and time.monotonic() - t0 < 0.4, "a slow exec blocked a fast one"
    assert not slow.done()
    assert (await slow).stdout == "slow\n"
    results = await asyncio.gather(*(ch.exec(f"echo {i}") for i in range(20)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]


async def test_remote_errors_map_to_builtin_types(agent: Agent) -> None:
    ch = agent.channel
    with pytest.raises(FileNotFoundError):
        await ch.read_file(str(agent.workdir / "missing"))
    with pytest.raises(IsADirectoryError):
        await ch.read_file(str(agent.workdir))
    with pytest.raises(RemoteOpError) as e:
        await ch.request("frobnicate")
    assert e.value.type == "UnknownOpError" and isinstance(e.value, FarmError)
    with pytest.raises(TypeError, match="exec"):
        await ch.request("exec", {"no_command": 1})
    assert (await ch.request("ping"))["pid"] == agent.proc.pid  # still serving


async def test_bad_request_line_is_answered_and_ignored(agent: Agent) -> None:
    agent.proc.stdin.write(b"this is not json\n{\"op\": \"ping\"}\n")  # type: ignore[union-attr]
    await agent.proc.stdin.drain()  # type: ignore[union-attr]
    assert (await agent.channel.request("ping"))["pid"] == agent.proc.pid


async def test_children_cannot_touch_the_protocol_stream(agent: Agent) -> None:
    r = await agent.channel.exec("ls /proc/$$/fd; echo direct > /proc/$PPID/fd/1 2>/dev/null; true")
    fds = set(r.stdout.split())
    assert fds <= {"0", "1", "2", "255"}, f"the command inherited extra descriptors: {fds}"
    # writing to the agent's fd 1 lands on its stderr, not in the channel
    assert (await agent.channel.request("ping"))["pid"] == agent.proc.pid


async def test_chunked_transfer_and_spliced_payloads(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    import farm.sandbox.channel as channel

    monkeypatch.setattr(channel, "CHUNK", 1000)
    data = os.urandom(10_500)
    path = str(agent.workdir / "chunked.bin")
    before = agent.channel.requests
    await agent.channel.write_file(path, data, mode=0o600)
    assert agent.channel.requests - before == 11
    assert Path(path).read_bytes() == data and (Path(path).stat().st_mode & 0o777) == 0o600
    assert await agent.channel.read_file(path) == data
    line = _encode_request("r1", "write", {"path": "/x", "data_b64": b"QUJD", "append": False})
    assert json.loads(line) == {"id": "r1", "op": "write", "args": {"path": "/x", "append": False, "data_b64": "QUJD"}}
    assert json.loads(_encode_request("r2", "write", {"data_b64": b"QQ=="}))["args"] == {"data_b64": "QQ=="}


async def test_untar_refuses_members_outside_dest(agent: Agent, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    dest = tmp_path / "dest"
    await agent.channel.write_file(str(tmp_path / "evil.tar"), buf.getvalue())
    with pytest.raises((FarmError, ValueError, OSError)):
        await agent.channel.request("untar", {"path": str(tmp_path / "evil.tar"), "dest": str(dest), "remove": True})
    assert not (tmp_path / "escaped.txt").exists()
    assert not (tmp_path / "evil.tar").exists()


async def test_stderr_is_capped_too(agent: Agent) -> None:
    r = await agent.channel.exec("head -c 50000 /dev/zero | tr '\\0' e >&2; echo ok", output_cap=1000)
    assert r.stdout == "ok\n" and r.truncated
    assert "[... 49000 bytes truncated ...]" in r.stderr and r.output_bytes == 50003


async def test_agent_death_fails_pending_and_later_requests(agent: Agent) -> None:
    pending = asyncio.ensure_future(agent.channel.exec("sleep 30"))
    await asyncio.sleep(0.2)
    agent.proc.kill()
    with pytest.raises(SandboxLostError, match="end of stream.*agent exit"):
        await asyncio.wait_for(pending, 10)
    with pytest.raises(SandboxLostError):
        await agent.channel.request("ping")


async def test_closing_stdin_stops_the_agent_and_its_processes(agent: Agent) -> None:
    r = await agent.channel.exec("nohup sleep 100 >/dev/null 2>&1 & echo $!")
    sleeper = int(r.stdout)
    assert alive(sleeper)
    agent.proc.stdin.close()  # type: ignore[union-attr]
    await asyncio.wait_for(agent.proc.wait(), 30)
    await _gone(sleeper)


async def test_shutdown_op_kills_background_processes(agent: Agent) -> None:
    r = await agent.channel.exec("setsid sleep 100 >/dev/null 2>&1 < /dev/null & echo $!")
    sleeper = int(r.stdout)
    assert await agent.channel.request("shutdown") == {}
    await asyncio.wait_for(agent.proc.wait(), 30)
    assert agent.proc.returncode == 0
    await _gone(sleeper)


async def test_tool_op_without_leaf_tools(tmp_path: Path) -> None:
    alone = tmp_path / "inside"
    alone.mkdir()
    tools = {"leaf_tools.py", "leaf_vendor.py", "leaf_bash.py"}  # the tools and the vendor's rules for them
    for part in SERVER.parent.glob("*.py"):  # the agent's own modules, without the tools
        if part.name not in tools:
            shutil.copy(part, alone / part.name)
    a = await start_agent(INTERPRETERS[0], alone / "server.py", tmp_path)
    try:
        with pytest.raises(ModuleNotFoundError, match="leaf_tools"):
            await a.channel.request("tool", {"name": "Bash", "args": {"command": "true"}, "workdir": "/", "limits": {}})
        # a leaf_tools next to the server is imported and given the exec function
        (alone / "leaf_tools.py").write_text(
            "def run_tool(name, args, workdir, limits, exec_fn):\n"
            "    r = exec_fn(args['command'], timeout_s=5, cwd=workdir, env=None, merge_stderr=True, output_cap=100)\n"
            "    return {'observation': name + ':' + r['stdout'], 'exit_code': r['exit_code']}\n"
        )
        (alone / "leaf_vendor.py").write_text("")  # registers no vendor rules
        res = await a.channel.request("tool", {"name": "Bash", "args": {"command": "pwd; exit 4"},
                                               "workdir": str(tmp_path), "limits": {}})
        assert res == {"observation": f"Bash:{tmp_path}\n", "exit_code": 4}
    finally:
        await a.channel.close()
        await a.proc.wait()


# --- channel failure modes, over an in-memory stream -------------------------------------------


class FakeWriter:
    """Records what the channel writes; nothing answers unless the test feeds the reader."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed:
            raise BrokenPipeError("closed")
        self.lines.append(data)

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


async def test_non_protocol_output_marks_the_channel_lost() -> None:
    reader = asyncio.StreamReader()
    ch = Channel(reader, FakeWriter(), name="garbage")
    task = asyncio.ensure_future(ch.request("ping"))
    await asyncio.sleep(0)
    reader.feed_data(b"bwrap: oops, not json\n")
    with pytest.raises(SandboxLostError, match="non-protocol output"):
        await task


async def test_oversized_line_marks_the_channel_lost() -> None:
    reader = asyncio.StreamReader(limit=100)
    ch = Channel(reader, FakeWriter(), name="big")
    task = asyncio.ensure_future(ch.request("ping"))
    await asyncio.sleep(0)
    reader.feed_data(b"{" + b"x" * 500 + b"}\n")
    with pytest.raises(SandboxLostError, match="oversized"):
        await task


async def test_silent_agent_times_out_as_lost() -> None:
    ch = Channel(asyncio.StreamReader(), FakeWriter(), name="silent")
    with pytest.raises(SandboxLostError, match="no answer to 'ping'"):
        await ch.request("ping", timeout=0.2)


async def test_answers_to_unknown_ids_are_ignored_and_close_fails_pending() -> None:
    reader = asyncio.StreamReader()
    writer = FakeWriter()
    ch = Channel(reader, writer, name="mux")
    task = asyncio.ensure_future(ch.request("ping", request_id="mine"))
    await asyncio.sleep(0)
    assert json.loads(writer.lines[0]) == {"id": "mine", "op": "ping", "args": {}}
    reader.feed_data(b'{"id": "other", "ok": true, "result": {}}\n')
    reader.feed_data(b'{"id": "mine", "ok": true, "result": {"pid": 7}}\n')
    assert await task == {"pid": 7}
    pending = asyncio.ensure_future(ch.request("ping"))
    await asyncio.sleep(0)
    await ch.close()
    with pytest.raises(SandboxClosedError):
        await pending
    with pytest.raises(SandboxClosedError):
        await ch.request("ping")
