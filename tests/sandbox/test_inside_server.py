"""The sandbox agent's protocol and file operations, driven in-process (farm/sandbox/inside/server.py).

The agent is the real code the sandboxes run; here it answers into a buffer instead of a pipe,
and without the background reaper (which would reap other children of the test process).
Process handling lives in test_inside_procs.py; the same program over real pipes and inside
bubblewrap is tested in test_channel.py and test_local.py.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from farm.sandbox.inside import server


class Buffer(io.BytesIO):
    def lines(self) -> list[dict]:
        return [json.loads(line) for line in self.getvalue().splitlines()]


@pytest.fixture
def agent() -> server.Agent:
    return server.Agent(Buffer(), reap=False)


def call(agent: server.Agent, op: str, rid: str = "r1", **args) -> dict:
    """Run one request synchronously; the response line it wrote."""
    before = len(agent.out.lines())
    agent.run_request(rid, op, args)
    (resp,) = agent.out.lines()[before:]
    assert resp["id"] == rid
    return resp


def ok(agent: server.Agent, op: str, **args) -> dict:
    resp = call(agent, op, **args)
    assert resp["ok"] is True, resp
    assert set(resp) == {"id", "ok", "result"}
    return resp["result"]


def error(agent: server.Agent, op: str, **args) -> dict:
    resp = call(agent, op, **args)
    assert resp["ok"] is False and set(resp) == {"id", "ok", "error"}
    return resp["error"]


# --- the wire format ---------------------------------------------------------------------------


def test_encode_response_is_one_compact_json_line():
    line = server.encode_response({"id": "a", "ok": True, "result": {"x": [1, 2]}})
    assert line == b'{"id":"a","ok":true,"result":{"x":[1,2]}}\n'


def test_encode_response_splices_bytes_payloads_unescaped():
    data = base64.b64encode(b"\x00\xffpayload")
    line = server.encode_response({"id": "a", "ok": True, "result": {"size": 9, "data_b64": data}})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line == b'{"id":"a","ok":true,"result":{"size":9,"data_b64":"' + data + b'"}}\n'
    assert json.loads(line) == {"id": "a", "ok": True, "result": {"size": 9, "data_b64": data.decode()}}
    alone = server.encode_response({"id": "b", "ok": True, "result": {"data_b64": b"QQ=="}})
    assert alone == b'{"id":"b","ok":true,"result":{"data_b64":"QQ=="}}\n'
    # a text data_b64 (not bytes) goes through json as is
    assert json.loads(server.encode_response({"id": "c", "ok": True, "result": {"data_b64": "QQ=="}}))["result"] == {
        "data_b64": "QQ=="}


def test_a_bad_request_line_is_answered_with_a_protocol_error(agent):
    for line in (b"not json\n", b'{"op": "ping"}\n', b'{"id": 1, "op": "ping"}\n', b'{"id": "x", "op": 2}\n',
                 b'{"id": "x", "op": "ping", "args": [1]}\n', b"[1, 2]\n"):
        agent.out.seek(0)
        agent.out.truncate()
        agent.handle_line(line)
        (resp,) = agent.out.lines()
        assert resp["id"] is None and resp["ok"] is False
        assert resp["error"]["type"] == "ProtocolError" and resp["error"]["message"].startswith("bad request line: ")


def _wait_lines(agent, n: int, timeout: float = 10.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(agent.out.lines()) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return agent.out.lines()


def test_handle_line_runs_requests_and_answers_a_resent_id_from_memory(agent, tmp_path):
    marker = tmp_path / "runs"
    req = {"id": "once", "op": "exec", "args": {"command": f"echo x >> {marker}; echo done"}}
    agent.handle_line(json.dumps(req).encode())
    (first,) = _wait_lines(agent, 1)
    assert first["ok"] and first["result"]["stdout"] == "done\n"
    agent.handle_line(json.dumps(req).encode())  # a lost reply re-read, never re-run
    assert agent.out.lines()[1] == first
    assert marker.read_text() == "x\n"
    agent.handle_line(b'{"id": "p", "op": "ping"}')  # args may be omitted
    assert _wait_lines(agent, 3)[2]["result"]["pid"] == os.getpid()


def test_a_resent_id_while_running_is_answered_once(agent, tmp_path):
    cmd = f"sleep 0.3; echo once >> {tmp_path / 'm'}; echo ok"
    req = json.dumps({"id": "slow", "op": "exec", "args": {"command": cmd}})
    agent.handle_line(req.encode())
    time.sleep(0.05)
    agent.handle_line(req.encode())  # attaches to the running request
    lines = _wait_lines(agent, 1)
    time.sleep(0.3)
    assert len(agent.out.lines()) == 1 and lines[0]["result"]["stdout"] == "ok\n"
    assert (tmp_path / "m").read_text() == "once\n"


def test_only_the_latest_responses_are_remembered(agent, monkeypatch):
    monkeypatch.setattr(server, "REMEMBERED_RESPONSES", 2)
    for rid in ("a", "b", "c"):
        call(agent, "ping", rid=rid)
    assert list(agent.done) == ["b", "c"]
    agent.handle_line(b'{"id": "b", "op": "ping"}')  # answered from memory, moved to the end
    assert list(agent.done) == ["c", "b"] and agent.out.lines()[-1]["id"] == "b"
    assert not agent.running


def test_errors_carry_the_exception_type_and_message(agent, tmp_path):
    assert error(agent, "frobnicate") == {"type": "UnknownOpError", "message": "unknown op 'frobnicate'"}
    err = error(agent, "exec", bogus=1)
    assert err["type"] == "TypeError" and err["message"].startswith("exec: ")
    err = error(agent, "read", path=str(tmp_path / "missing"))
    assert err["type"] == "FileNotFoundError" and "missing" in err["message"]
    assert error(agent, "read", path=str(tmp_path))["type"] == "IsADirectoryError"


def test_unexpected_errors_are_logged_with_a_traceback(agent, monkeypatch, capsys):
    def boom():
        raise KeyError("surprise")

    monkeypatch.setattr(agent, "op_boom", boom, raising=False)
    assert error(agent, "boom") == {"type": "KeyError", "message": "'surprise'"}
    assert capsys.readouterr().err.startswith("farm-sandbox-agent: op boom failed:\nTraceback")
    error(agent, "read", path="/nonexistent/x")  # an expected error: no traceback
    assert "Traceback" not in capsys.readouterr().err


def test_send_after_the_client_left_shuts_the_agent_down(agent, monkeypatch):
    codes = []
    monkeypatch.setattr(agent, "shutdown_now", codes.append)
    agent.out.close()
    agent.send({"id": "x", "ok": True, "result": {}})
    assert codes == [1]


def test_shutdown_answers_then_stops(agent, monkeypatch):
    codes = []
    monkeypatch.setattr(agent, "shutdown_now", codes.append)
    assert ok(agent, "shutdown") == {}
    assert codes == [0]
    ok(agent, "ping")
    assert codes == [0]  # only the shutdown op stops the agent


def test_ping(agent):
    pong = ok(agent, "ping")
    assert pong == {"pid": os.getpid(), "python": ".".join(map(str, sys.version_info[:3])),
                    "agent_isolation": "none"}  # an agent inside a test makes no namespace


# --- files -------------------------------------------------------------------------------------


def test_write_read_roundtrip_with_offsets(agent, tmp_path):
    path = tmp_path / "sub" / "f.bin"
    data = bytes(range(256)) * 4
    assert ok(agent, "write", path=str(path), data_b64=base64.b64encode(data[:600]).decode()) == {"size": 600}
    assert ok(agent, "write", path=str(path), data_b64=base64.b64encode(data[600:]).decode(), append=True) == {
        "size": 1024}
    assert path.read_bytes() == data
    whole = ok(agent, "read", path=str(path))
    assert base64.b64decode(whole["data_b64"]) == data and whole["size"] == 1024 and whole["eof"] is True
    part = ok(agent, "read", path=str(path), offset=1000, length=10)
    assert base64.b64decode(part["data_b64"]) == data[1000:1010] and part["eof"] is False
    end = ok(agent, "read", path=str(path), offset=1014, length=10)
    assert base64.b64decode(end["data_b64"]) == data[1014:] and end["eof"] is True
    assert base64.b64decode(ok(agent, "read", path=str(path), length=-5)["data_b64"]) == b""


def test_read_is_capped_at_the_chunk_size(agent, tmp_path, monkeypatch):
    monkeypatch.setattr(server, "MAX_READ_CHUNK", 4)
    (tmp_path / "f").write_bytes(b"0123456789")
    got = ok(agent, "read", path=str(tmp_path / "f"), length=100)
    assert base64.b64decode(got["data_b64"]) == b"0123" and got["eof"] is False


def test_write_mode_and_mkdirs(agent, tmp_path):
    path = tmp_path / "a" / "b" / "x.sh"
    ok(agent, "write", path=str(path), data_b64=base64.b64encode(b"#!/bin/sh\n").decode(), mode=0o750)
    assert path.stat().st_mode & 0o777 == 0o750
    ok(agent, "write", path=str(path), data_b64=base64.b64encode(b"new").decode())
    assert path.read_bytes() == b"new"  # overwritten, not appended
    err = error(agent, "write", path=str(tmp_path / "no" / "dir" / "f"), data_b64="", mkdirs=False)
    assert err["type"] == "FileNotFoundError"


def test_stat(agent, tmp_path):
    (tmp_path / "f").write_bytes(b"12345")
    assert ok(agent, "stat", path=str(tmp_path / "f")) == {"exists": True, "is_dir": False, "size": 5}
    assert ok(agent, "stat", path=str(tmp_path))["is_dir"] is True
    assert ok(agent, "stat", path=str(tmp_path / "nope")) == {"exists": False, "is_dir": False, "size": 0}


def test_list_sorted_with_kinds(agent, tmp_path):
    (tmp_path / "b.txt").write_bytes(b"xy")
    (tmp_path / "a").mkdir()
    (tmp_path / "c").symlink_to("b.txt")
    entries = ok(agent, "list", path=str(tmp_path))["entries"]
    assert [(e["name"], e["type"]) for e in entries] == [("a", "dir"), ("b.txt", "file"), ("c", "link")]
    assert entries[1]["size"] == 2


def test_glob_relative_absolute_recursive_and_limited(agent, tmp_path):
    for p in ("x/1.py", "x/y/2.py", "3.py"):
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text("")
    got = ok(agent, "glob", pattern="**/*.py", cwd=str(tmp_path))
    assert got == {"paths": sorted(str(tmp_path / p) for p in ("x/1.py", "x/y/2.py", "3.py")), "truncated": False}
    assert ok(agent, "glob", pattern=str(tmp_path / "x" / "*.py"))["paths"] == [str(tmp_path / "x" / "1.py")]
    limited = ok(agent, "glob", pattern="**/*.py", cwd=str(tmp_path), limit=2)
    assert len(limited["paths"]) == 2 and limited["truncated"] is True
    exact = ok(agent, "glob", pattern="**/*.py", cwd=str(tmp_path), limit=3)
    assert len(exact["paths"]) == 3 and exact["truncated"] is False


def test_glob_without_cwd_uses_the_agents_directory(agent, tmp_path, monkeypatch):
    (tmp_path / "here.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    assert ok(agent, "glob", pattern="*.txt")["paths"] == [str(tmp_path / "here.txt")]


def _tar(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)


def test_untar_extracts_counts_files_and_removes_the_archive(agent, tmp_path):
    archive = tmp_path / "up.tar"
    _tar(archive, {"a.txt": b"A", "d/b.txt": b"B"}, {"d/link": "b.txt"})
    dest = tmp_path / "dest" / "deep"
    assert ok(agent, "untar", path=str(archive), dest=str(dest)) == {"files": 2}
    assert (dest / "a.txt").read_bytes() == b"A" and (dest / "d" / "link").read_bytes() == b"B"
    assert not archive.exists()
    _tar(archive, {"c.txt": b"C"})
    ok(agent, "untar", path=str(archive), dest=str(dest), remove=False)
    assert archive.exists() and (dest / "c.txt").read_bytes() == b"C"


UNSAFE = [({"../out.txt": b"x"}, None), ({}, {"evil": "/etc/passwd"}), ({}, {"up": "../../out.txt"})]


@pytest.fixture(params=["data_filter", "legacy"])
def tar_python(request, monkeypatch):
    """The agent runs on Pythons with tarfile's data filter and on older ones without it."""
    if request.param == "legacy":
        monkeypatch.delattr(tarfile, "data_filter")
    return request.param


@pytest.mark.parametrize("members,links", UNSAFE)
def test_untar_refuses_members_outside_dest_and_still_removes_the_archive(agent, tmp_path, members, links,
                                                                          tar_python):
    archive = tmp_path / "evil.tar"
    _tar(archive, members, links)
    dest = tmp_path / "dest"
    err = error(agent, "untar", path=str(archive), dest=str(dest))
    assert err["type"].endswith("Error")
    assert not (tmp_path / "out.txt").exists() and not archive.exists()


def test_untar_of_safe_members_works_on_both_pythons(agent, tmp_path, tar_python):
    archive = tmp_path / "ok.tar"
    _tar(archive, {"d/x.txt": b"X", "d/../y.txt": b"Y"}, {"d/l": "x.txt"})
    dest = tmp_path / "dest"
    assert ok(agent, "untar", path=str(archive), dest=str(dest)) == {"files": 2}
    assert (dest / "d" / "l").read_bytes() == b"X" and (dest / "y.txt").read_bytes() == b"Y"


def test_legacy_untar_refuses_device_members(agent, tmp_path, monkeypatch):
    monkeypatch.delattr(tarfile, "data_filter")
    archive = tmp_path / "dev.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("null")
        info.type = tarfile.CHRTYPE
        tar.addfile(info)
    assert "unsafe tar member" in error(agent, "untar", path=str(archive), dest=str(tmp_path / "d"))["message"]


# --- commands and tools through the agent -------------------------------------------------------


def test_exec_op_runs_the_command_runner(agent, tmp_path):
    res = ok(agent, "exec", command="echo $FOO; pwd; echo e >&2; exit 3", cwd=str(tmp_path), env={"FOO": 7})
    assert res["exit_code"] == 3 and res["stdout"] == f"7\n{tmp_path}\n" and res["stderr"] == "e\n"
    merged = ok(agent, "exec", command="echo a; echo b >&2", merge_stderr=True, output_cap=None)
    assert merged["stdout"] == "a\nb\n" and merged["stderr"] == ""
    capped = ok(agent, "exec", command="head -c 100 /dev/zero | tr '\\0' x", output_cap=10)
    assert capped["truncated"] is True and capped["output_bytes"] == 100


def test_tool_op_runs_leaf_tools_with_the_agents_command_runner(agent, tmp_path):
    (tmp_path / "f.txt").write_text("one\n")
    res = ok(agent, "tool", name="Read", args={"file_path": "f.txt"}, workdir=str(tmp_path))
    assert res["observation"] == "f.txt\n1. one" and res["error"] is None
    res = ok(agent, "tool", name="Bash", args={"command": "echo $TOOL_VAR; pwd"}, workdir=str(tmp_path),
             limits={"env": {"TOOL_VAR": "v", "HOME": str(tmp_path)}})
    assert res["observation"] == f"Exit code: 0\nSTDOUT:\nv\n{tmp_path}\n\nSTDERR:\n" and res["exit_code"] == 0
    assert ok(agent, "tool", name="Nope")["observation"] == "Unknown tool: Nope"


def test_requests_run_concurrently(agent):
    results = []

    def run(rid: str, cmd: str) -> None:
        agent.run_request(rid, "exec", {"command": cmd})
        results.append(rid)

    slow = threading.Thread(target=run, args=("slow", "sleep 0.6"))
    slow.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    run("fast", "true")
    assert time.monotonic() - t0 < 0.5 and results == ["fast"]
    slow.join()
    assert results == ["fast", "slow"]


def _parse_in_a_fresh_thread(src: str, **kw):
    """ast.parse in a thread of its own: CPython 3.11 (< 3.11.9) can raise "AST constructor
    recursion depth mismatch" for a thread whose recursion counter an earlier test left off."""
    import ast
    import threading

    out: dict = {}

    def run() -> None:
        try:
            out["tree"] = ast.parse(src, **kw)
        except BaseException as e:  # re-raised in the test's thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["tree"]


def test_the_agent_is_stdlib_only_python_38():
    import ast

    inside = Path(server.__file__).parent
    local = {p.stem for p in inside.glob("*.py")}
    for path in sorted(inside.glob("*.py")):
        src = path.read_text()
        if "# mutmut generated" in src:
            pytest.skip("a mutation-testing copy of the agent: it imports mutmut by design")
        _parse_in_a_fresh_thread(src, feature_version=(3, 8))
        tree = _parse_in_a_fresh_thread(src)
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert names - local <= set(sys.stdlib_module_names), (path.name, names - local - set(sys.stdlib_module_names))
