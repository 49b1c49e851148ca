"""Backend-agnostic conformance suite for the Sandbox protocol (farm/sandbox/base.py).

A backend's test module subclasses ``SandboxConformance`` and provides a ``backend`` fixture
returning a ``ConformanceBackend``; every test then runs against real sandboxes of that
backend. The suite talks to sandboxes only through the protocol, plus ``sandbox.channel``
(a farm.sandbox.channel.Channel) for the request-id tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from farm.errors import FarmError
from farm.sandbox.base import (
    Sandbox,
    SandboxClosedError,
    SandboxLostError,
    SandboxStartError,
    ToolRequest,
)
from farm.tasks.model import BuildStep, Task
from tests.support.tasks import make_task


class ConformanceBackend(Protocol):
    # whether a "public" sandbox shares the host's loopback (local backend yes, pods no)
    shares_host_loopback: bool

    def make(self, task: Task, network: str) -> Sandbox:
        """A sandbox for the task, not yet started."""

    async def kill_from_outside(self, sandbox: Sandbox) -> None:
        """Destroy the sandbox the way a crash would (kill the process, delete the pod)."""

    def processes(self, sandbox: Sandbox) -> list[Any]:
        """Identities of everything the sandbox runs right now (host pids, a pod, ...)."""

    def still_running(self, identities: list[Any]) -> list[Any]:
        """The subset of ``identities`` that still exist."""


MakeSandbox = Callable[..., Awaitable[Sandbox]]


class LoopbackServer:
    """A real TCP server on the host's 127.0.0.1 that greets every client with a token."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.sendall(self.token.encode() + b"\n")

    def close(self) -> None:
        self.sock.close()


def connect_script(port: int) -> str:
    return (
        "python3 -c \"import socket,sys\n"
        "try:\n"
        f"    s=socket.create_connection(('127.0.0.1',{port}),timeout=3); print('GOT', s.recv(100).decode().strip())\n"
        "except OSError as e:\n"
        "    print('FAILED', type(e).__name__); sys.exit(1)\""
    )


class SandboxConformance:
    """Subclass and provide a ``backend`` fixture (a ConformanceBackend); a backend that needs
    another kind of task (an image to run) overrides ``build_task``."""

    def build_task(self, **task_kw: Any) -> Task:
        return make_task(**task_kw)

    @pytest.fixture
    async def make_sandbox(self, backend: ConformanceBackend):
        made: list[Sandbox] = []

        async def make(task: Task | None = None, *, network: str = "no-network", **task_kw: Any) -> Sandbox:
            task = task or self.build_task(network=network, **task_kw)
            sb = backend.make(task, network)
            made.append(sb)
            await sb.start()
            return sb

        yield make
        for sb in made:
            await sb.close()

    # --- exec -------------------------------------------------------------------------------

    async def test_echo_and_exit_codes(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        r = await sb.exec("echo hello")
        assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (0, "hello\n", "", False)
        assert (await sb.exec("exit 3")).exit_code == 3
        assert (await sb.exec("kill -9 $$")).exit_code == 137
        assert (await sb.exec("false")).exit_code == 1

    async def test_stderr_separate_and_merged(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        cmd = "echo out1; echo err1 >&2; sleep 0.05; echo out2"
        r = await sb.exec(cmd)
        assert r.stdout == "out1\nout2\n" and r.stderr == "err1\n"
        m = await sb.exec(cmd, merge_stderr=True)
        assert m.stdout == "out1\nerr1\nout2\n" and m.stderr == ""
        assert m.output == m.stdout

    async def test_cwd_env_and_default_workdir(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox(workdir="/testbed")
        assert (await sb.exec("pwd")).stdout == "/testbed\n"
        r = await sb.exec('pwd; echo "$X"', cwd="/tmp", env={"X": "a b"})
        assert r.stdout == "/tmp\na b\n"
        missing = await sb.exec("true", cwd="/does/not/exist")
        assert missing.exit_code != 0 and "/does/not/exist" in missing.stderr

    async def test_timeout_kills_every_child(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        await sb.exec("mkdir -p /tmp/m")
        # each escapee would leave a marker 2 s later; all of them redirect their output so
        # only the kill (not a closed pipe) can stop them
        escape = (
            "echo started; "
            "setsid bash -c 'sleep 2; touch /tmp/m/setsid' >/dev/null 2>&1 < /dev/null & "
            "nohup bash -c 'sleep 2; touch /tmp/m/nohup' >/dev/null 2>&1 & "
            "( ( sleep 2; touch /tmp/m/doublefork ) >/dev/null 2>&1 & ) ; "
            "( sleep 2; touch /tmp/m/child ) & "
            "sleep 30"
        )
        t0 = time.monotonic()
        r = await sb.exec(escape, timeout_s=1.0)
        assert r.timed_out and r.exit_code == 124
        assert "started" in r.stdout
        assert time.monotonic() - t0 < 10
        # a control escapee from a command that finishes normally does survive: proves the
        # markers work and the kill is what stops the others
        ok = await sb.exec("nohup bash -c 'sleep 2; touch /tmp/m/control' >/dev/null 2>&1 &")
        assert ok.exit_code == 0 and not ok.timed_out
        await asyncio.sleep(3.0)
        left = (await sb.exec("ls /tmp/m")).stdout.split()
        assert left == ["control"]
        procs = await sb.exec("ps -eo args= 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert "sleep 30" not in procs.stdout and "sleep 2" not in procs.stdout

    async def test_background_holding_the_pipe_runs_into_the_timeout(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        r = await sb.exec("sleep 20 & echo bg", timeout_s=1.0)
        assert r.timed_out and r.stdout == "bg\n"
        assert "sleep 20" not in (await sb.exec("ps -eo args=")).stdout

    async def test_output_over_cap_is_truncated_with_marker(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        r = await sb.exec("head -c 300000 /dev/zero | tr '\\0' a; echo; echo END", output_cap=10_000)
        assert r.truncated and r.exit_code == 0
        assert r.output_bytes == 300_000 + 1 + 4
        assert r.stdout.startswith("a" * 4000)
        assert r.stdout.endswith("\nEND\n")
        dropped = r.output_bytes - 10_000
        assert f"[... {dropped} bytes truncated ...]" in r.stdout
        assert len(r.stdout) < 10_000 + 100
        small = await sb.exec("echo fits", output_cap=10_000)
        assert not small.truncated and small.stdout == "fits\n" and small.output_bytes == 5

    async def test_concurrent_execs_overlap(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        cmd = "date +%s.%N; sleep 1; date +%s.%N"
        a, b = await asyncio.gather(sb.exec(cmd), sb.exec(cmd))
        (a0, a1), (b0, b1) = (map(float, a.stdout.split()), map(float, b.stdout.split()))
        assert a1 - a0 >= 0.9 and b1 - b0 >= 0.9
        assert a0 < b1 and b0 < a1, "the two sleeps ran one after the other"

    # --- files ------------------------------------------------------------------------------

    async def test_binary_roundtrip(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        data = bytes(range(256)) * 16
        await sb.write_file("/tmp/bin.dat", data)
        assert await sb.read_file("/tmp/bin.dat") == data
        r = await sb.exec("sha256sum /tmp/bin.dat")
        assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
        await sb.write_file("/tmp/empty", b"")
        assert await sb.read_file("/tmp/empty") == b""

    async def test_unicode_names_and_contents(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        path = "/app/ünï cødé/файл 文件 🚀.txt"
        text = "héllo wörld ✓ 🚀 日本語\n"
        await sb.write_file(path, text.encode())
        assert (await sb.read_file(path)).decode() == text
        r = await sb.exec("ls '/app/ünï cødé'; cat /app/ünï*/*.txt")
        assert r.stdout == "файл 文件 🚀.txt\n" + text
        # invalid UTF-8 in output is replaced, not an error
        bad = await sb.exec("printf 'a\\xffb'")
        assert bad.stdout == "a\ufffdb"

    async def test_paths_with_spaces_and_upload(self, make_sandbox: MakeSandbox, tmp_path: Path) -> None:
        sb = await make_sandbox()
        await sb.write_file("/app/dir with spaces/a file.txt", b"spaced\n", mode=0o755)
        r = await sb.exec('cat "/app/dir with spaces/a file.txt"; stat -c %a "/app/dir with spaces/a file.txt"')
        assert r.stdout == "spaced\n755\n"
        src = tmp_path / "up src"
        (src / "sub dir").mkdir(parents=True)
        (src / "sub dir" / "file name.txt").write_text("inner\n")
        (src / "top.sh").write_text("#!/bin/sh\necho run\n")
        (src / "top.sh").chmod(0o755)
        await sb.upload(src, "/app/up load")
        r = await sb.exec('cat "/app/up load/sub dir/file name.txt"; "/app/up load/top.sh"; ls -A /tmp')
        assert r.stdout.splitlines()[:2] == ["inner", "run"]
        assert ".tar" not in r.stdout, "the upload's tar file was left in /tmp"

    async def test_large_file_roundtrip(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        data = os.urandom(50 * 1024 * 1024)
        digest = hashlib.sha256(data).hexdigest()
        await sb.write_file("/tmp/big.bin", data)
        r = await sb.exec("sha256sum /tmp/big.bin; stat -c %s /tmp/big.bin")
        assert r.stdout.split()[0] == digest and r.stdout.split()[2] == str(len(data))
        back = await sb.read_file("/tmp/big.bin")
        assert len(back) == len(data) and hashlib.sha256(back).hexdigest() == digest

    async def test_read_missing_file_raises(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        with pytest.raises(FileNotFoundError, match="/tmp/nope"):
            await sb.read_file("/tmp/nope")

    # --- isolation --------------------------------------------------------------------------

    async def test_no_network_blocks_host_loopback(self, make_sandbox: MakeSandbox,
                                                   backend: ConformanceBackend) -> None:
        server = LoopbackServer()
        try:
            sb = await make_sandbox(network="no-network")
            r = await sb.exec(connect_script(server.port), timeout_s=20)
            assert r.exit_code == 1 and "FAILED" in r.stdout, r.output
            assert server.accepted == 0
            if backend.shares_host_loopback:
                pub = await make_sandbox(network="public")
                ok = await pub.exec(connect_script(server.port), timeout_s=20)
                assert ok.exit_code == 0 and f"GOT {server.token}" in ok.stdout, ok.output
                assert server.accepted == 1
        finally:
            server.close()

    async def test_system_dirs_are_read_only(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        tag = uuid.uuid4().hex
        for target in (f"/usr/{tag}", f"/etc/{tag}", f"/{tag}", f"/usr/bin/{tag}"):
            r = await sb.exec(f"touch {target}")
            assert r.exit_code != 0, f"{target} was writable"
            with pytest.raises(OSError):
                await sb.write_file(target, b"x")
        assert (await sb.exec("mount -o remount,rw /usr")).exit_code != 0
        # the writable places are writable
        for d in ("/app", "/tmp", "/tests", "/logs/verifier", "/logs/agent", "/solution", "/root"):
            assert (await sb.exec(f"touch {d}/{tag}")).exit_code == 0, d

    async def test_closed_sandbox_refuses_and_close_is_idempotent(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        await sb.close()
        await sb.close()
        with pytest.raises(SandboxClosedError):
            await sb.exec("true")
        with pytest.raises(SandboxClosedError):
            await sb.read_file("/tmp/x")

    async def test_close_leaves_no_process(self, make_sandbox: MakeSandbox, backend: ConformanceBackend) -> None:
        sb = await make_sandbox()
        r = await sb.exec("nohup sleep 1000 >/dev/null 2>&1 & setsid sleep 1001 >/dev/null 2>&1 < /dev/null & echo ok")
        assert r.stdout == "ok\n"
        before = backend.processes(sb)
        assert len(before) >= 3, before  # the sandbox itself, its agent and the sleeps
        await sb.close()
        assert backend.still_running(before) == []

    async def test_a_timed_out_vendor_bash_call_leaves_its_job_until_close(
            self, make_sandbox: MakeSandbox, backend: ConformanceBackend) -> None:
        """Under agent.compat=leaf-2609 a timed-out Bash call kills its shell alone, as the vendor's
        runner does: its background job runs on for later calls, and is still gone after close."""
        import json

        from farm.agent.execution import ToolCall, ToolExecutor
        from farm.config import AgentConfig

        sb = await make_sandbox()
        executor = ToolExecutor(sb, "/tmp", AgentConfig(compat="leaf-2609", tokenizer="bytes"))
        args = {"command": "sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/bg.pid; sleep 30", "timeout": 1}
        call = ToolCall.from_openai({"id": "c0", "function": {"name": "Bash", "arguments": json.dumps(args)}})
        (outcome,) = await executor.run_turn([call])
        assert outcome.failure is None and outcome.observation.startswith("Timed out after 1.0s")
        r = await sb.exec("kill -0 $(cat /tmp/bg.pid) && echo alive")
        assert r.stdout == "alive\n", r.output
        before = backend.processes(sb)
        await sb.close()
        assert backend.still_running(before) == []

    async def test_killed_sandbox_raises_lost(self, make_sandbox: MakeSandbox, backend: ConformanceBackend) -> None:
        sb = await make_sandbox()
        assert (await sb.exec("true")).exit_code == 0
        pending = asyncio.ensure_future(sb.exec("sleep 30"))
        await asyncio.sleep(0.2)
        await backend.kill_from_outside(sb)
        with pytest.raises(SandboxLostError):
            await asyncio.wait_for(pending, 20)
        with pytest.raises(SandboxLostError):
            await sb.exec("true")
        await sb.close()

    # --- protocol ---------------------------------------------------------------------------

    async def test_resent_request_id_is_not_rerun(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        ch = sb.channel  # type: ignore[attr-defined]
        args = {"command": "echo x >> /tmp/once; wc -l < /tmp/once", "timeout_s": 10, "cwd": None, "env": None,
                "merge_stderr": False, "output_cap": 1000}
        first = await ch.request("exec", args, request_id="fixed-id-1")
        again = await ch.request("exec", args, request_id="fixed-id-1")
        assert first == again and first["stdout"] == "1\n"
        # a duplicate of a request that is still running attaches to it
        slow = dict(args, command="sleep 0.5; echo y >> /tmp/twice; wc -l < /tmp/twice")
        a, b = await asyncio.gather(
            ch.request("exec", slow, request_id="fixed-id-2"), ch.request("exec", slow, request_id="fixed-id-2")
        )
        assert a == b and a["stdout"] == "1\n"
        assert (await sb.read_file("/tmp/once")) == b"x\n"
        assert (await sb.read_file("/tmp/twice")) == b"y\n"
        fresh = await ch.request("exec", args)
        assert fresh["stdout"] == "2\n"

    async def test_call_sends_raw_requests(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        pong = await sb.call("ping")
        assert isinstance(pong["pid"], int) and pong["python"].startswith("3.")
        await sb.write_file("/tmp/s", b"12345")
        assert await sb.call("stat", path="/tmp/s") == {"exists": True, "is_dir": False, "size": 5}
        assert (await sb.call("stat", path="/tmp/none"))["exists"] is False
        with pytest.raises(FarmError, match="unknown op"):
            await sb.call("no-such-op")

    async def test_list_and_glob(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        await sb.exec("mkdir -p 'g/a b/c' && touch g/x.py 'g/a b/y.py' 'g/a b/c/z.py' g/n.txt && ln -s x.py g/l")
        listing = await sb.call("list", path="/app/g")
        assert [(e["name"], e["type"]) for e in listing["entries"]] == [
            ("a b", "dir"), ("l", "link"), ("n.txt", "file"), ("x.py", "file")
        ]
        found = await sb.call("glob", pattern="g/**/*.py", cwd="/app")
        assert found == {"paths": ["/app/g/a b/c/z.py", "/app/g/a b/y.py", "/app/g/x.py"], "truncated": False}
        capped = await sb.call("glob", pattern="/app/g/**/*.py", limit=2)
        assert len(capped["paths"]) == 2 and capped["truncated"]
        with pytest.raises(FileNotFoundError):
            await sb.call("list", path="/app/none")

    async def test_model_tools_cannot_take_the_sandbox_agent_down(self, make_sandbox: MakeSandbox) -> None:
        # a model's Read of a device or Glob through a symlink loop is an observation, never a
        # dead sandbox agent (which the trial would count as an infrastructure error)
        sb = await make_sandbox()
        await sb.exec("mkdir -p /tmp/loop && ln -s . /tmp/loop/a && ln -s . /tmp/loop/b")
        zero = await sb.tool(ToolRequest("Read", {"file_path": "/dev/zero"}, "/app"))
        assert zero.observation == "ValueError: /dev/zero is a character device, not a regular file"
        # the sandbox agent's stdin is its request channel: a Read of it must not steal requests
        stdin = await sb.tool(ToolRequest("Read", {"file_path": "/proc/self/fd/0"}, "/app"))
        assert stdin.observation.startswith("ValueError: /proc/self/fd/0 is "), stdin.observation
        proc = await sb.tool(ToolRequest("Read", {"file_path": "/proc/self/status"}, "/app"))
        assert "\n1. Name:" in proc.observation and "farm:" not in proc.observation
        looped = await sb.tool(ToolRequest("Glob", {"pattern": "**/none.txt", "path": "/tmp/loop"}, "/app",
                                           limits={"glob_timeout_s": 1.0}))
        assert looped.observation.startswith("No files matched.\n[farm: Glob stopped after 1 s;")
        assert (await sb.exec("echo alive")).stdout == "alive\n"

    async def test_a_command_that_kills_every_process_it_sees_leaves_the_sandbox_working(
            self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        if not sb.capabilities.isolated_commands:
            assert sb.stats.isolation is not None and sb.stats.isolation.startswith("none"), sb.stats.isolation
            return  # such a command would kill the sandbox agent here: the row says so
        assert sb.stats.isolation in ("pid-namespace+proc", "pid-namespace+proc+cgroup")
        caps = await sb.exec("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status")
        assert len(caps.stdout.splitlines()) == 5, caps.output
        for line in caps.stdout.splitlines():  # what the agent holds for the jail, no command does
            assert int(line.split()[1], 16) & (1 << 21) == 0, line  # CAP_SYS_ADMIN
        killed = await sb.exec("(sleep 300 >/dev/null 2>&1 &); sleep 0.3; kill -9 -1; echo $?; kill -9 1; echo $?")
        assert killed.stdout == "0\n0\n", killed.output
        assert (await sb.exec("echo alive")).stdout == "alive\n"
        # the commands' /proc is their namespace's: the killed sleep is gone, PID 1 is the jail's init
        listed = await sb.exec("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")
        assert "sleep 300" not in listed.stdout and "server.py" not in listed.stdout, listed.stdout

    async def test_kill_leftovers_ends_daemons_and_keeps_the_sandbox(self, make_sandbox: MakeSandbox) -> None:
        sb = await make_sandbox()
        started = await sb.exec("setsid nohup sleep 601 >/dev/null 2>&1 < /dev/null & "
                                "nohup sh -c 'sleep 602' >/dev/null 2>&1 < /dev/null & echo ok")
        assert started.stdout == "ok\n"
        count = ("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done "
                 "| grep -cE '^sleep 60[12] $' || true")
        for _ in range(50):  # `sh -c 'sleep 602'` shows as sleep only once sh has exec'd it
            if (seen := (await sb.exec(count)).stdout) == "2\n":
                break
            await asyncio.sleep(0.1)
        assert seen == "2\n"
        assert await sb.kill_leftovers() >= 2
        left = await sb.exec(count)
        assert left.stdout == "0\n", left.output
        assert await sb.kill_leftovers() == 0
        assert (await sb.exec("echo alive")).stdout == "alive\n"

    # --- environment build ------------------------------------------------------------------

    async def test_build_steps_are_applied(self, make_sandbox: MakeSandbox, tmp_path: Path) -> None:
        ctx = tmp_path / "environment"
        (ctx / "resources" / "deep dir").mkdir(parents=True)
        (ctx / "resources" / "deep dir" / "data.txt").write_text("payload\n")
        (ctx / "setup.sh").write_text('echo "$GREETING from $(pwd)" > out.txt\n')
        (ctx / "setup.sh").chmod(0o750)
        steps = (
            BuildStep("workdir", "/app"),
            BuildStep("env", "GREETING", "hello"),
            BuildStep("env", "COMBINED", "${GREETING}-world:$HOME"),
            BuildStep("copy", "setup.sh", "./"),
            BuildStep("copy", "resources", "/app/resources"),
            BuildStep("copy", "setup.sh", "/app/renamed.sh"),
            BuildStep("run", "bash setup.sh && mkdir -p sub"),
            BuildStep("workdir", "sub"),
            BuildStep("run", "pwd > here.txt"),
        )
        sb = await make_sandbox(build_steps=steps, build_context=ctx)
        r = await sb.exec('pwd; echo "$GREETING|$COMBINED"; cat /app/out.txt here.txt; '
                          'cat "/app/resources/deep dir/data.txt"; stat -c %a /app/setup.sh /app/renamed.sh')
        assert r.stdout.splitlines() == [
            "/app/sub",
            "hello|hello-world:/root",
            "hello from /app",
            "/app/sub",
            "payload",
            "750",
            "750",
        ]

    async def test_failing_run_step_raises_start_error(self, make_sandbox: MakeSandbox) -> None:
        steps = (BuildStep("run", "echo fine"), BuildStep("run", "echo building-things; exit 7"))
        with pytest.raises(SandboxStartError) as e:
            await make_sandbox(build_steps=steps)
        msg = str(e.value)
        assert "build step 2" in msg and "RUN echo building-things; exit 7" in msg
        assert "exited with code 7" in msg and "building-things" in msg
