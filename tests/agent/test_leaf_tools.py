"""The five tools behaviour by behaviour (leaf-harness.md §3.2), through the sandbox agent's real
``tool`` op in-process: Bash runs on the agent's own command runner."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest
from agent_helpers import QUIET_HOME, tool_agent

from farm.sandbox.inside import leaf_tools

AGENT = tool_agent()


def run(name, args, ws, **limits):
    limits.setdefault("env", {"HOME": QUIET_HOME})
    return AGENT.op_tool(name, args, str(ws), limits)


def obs(name, args, ws, **limits) -> str:
    return run(name, args, ws, **limits)["observation"]


def test_runs_on_python_38_syntax():
    src = Path(leaf_tools.__file__).read_text()
    if "# mutmut generated" in src:
        pytest.skip("a mutation-testing copy of the tools: it imports mutmut by design")
    ast.parse(src, feature_version=(3, 8))
    tree = ast.parse(src)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"glob", "os", "select", "shlex", "stat", "subprocess", "sys", "time", "re"}, imported


# --- Read -----------------------------------------------------------------------------------


def test_read_numbers_lines_with_display_path(workspace):
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("one\ntwo\r\nthree\n")
    assert obs("Read", {"file_path": "src/a.py"}, workspace) == "src/a.py\n1. one\n2. two\n3. three"
    # absolute inside the workdir is shown relative; the `path` key is a fallback
    assert obs("Read", {"path": str(workspace / "src/a.py")}, workspace).startswith("src/a.py\n")


def test_read_offset_and_limit(workspace):
    (workspace / "f").write_text("".join(f"l{i}\n" for i in range(1, 11)))
    assert obs("Read", {"file_path": "f", "offset": 3, "limit": 2}, workspace) == "f\n3. l3\n4. l4"
    assert obs("Read", {"file_path": "f", "offset": 0, "limit": 1}, workspace) == "f\n1. l1"
    assert obs("Read", {"file_path": "f", "offset": 9, "limit": 0}, workspace) == "f\n9. l9\n10. l10"
    assert obs("Read", {"file_path": "f", "offset": 50}, workspace) == "f"
    assert obs("Read", {"file_path": "f", "offset": "x"}, workspace) == "ValueError: offset must be an integer, got 'x'"


def test_read_errors_are_observations(workspace):
    assert obs("Read", {}, workspace) == "ValueError: file_path is required"
    out = obs("Read", {"file_path": "missing.txt"}, workspace)
    assert out.startswith("FileNotFoundError: ") and "missing.txt" in out
    assert obs("Read", {"file_path": "."}, workspace).startswith("IsADirectoryError: ")


def test_read_replaces_undecodable_bytes(workspace):
    (workspace / "b.bin").write_bytes(b"ok\xff\xfeend\n")
    assert obs("Read", {"file_path": "b.bin"}, workspace) == "b.bin\n1. ok\ufffd\ufffdend"


def test_read_truncates_at_20000_chars_with_marker(workspace):
    (workspace / "big").write_text("x" * 30000 + "\n")
    res = run("Read", {"file_path": "big"}, workspace)
    full = "big\n1. " + "x" * 30000
    assert res["truncated"] is True
    assert res["observation"] == full[:20000] + f"\n[truncated {len(full) - 20000} chars]"
    tail = run("Read", {"file_path": "big"}, workspace, read_output_chars=100, truncation="head_tail")["observation"]
    assert tail.startswith(full[:50]) and tail.endswith("\n" + full[-50:])
    assert f"\n[truncated {len(full) - 100} chars]\n" in tail


def test_read_stops_at_the_scan_bound_and_says_how_much_was_left(workspace, monkeypatch):
    monkeypatch.setattr(leaf_tools, "READ_SCAN_BYTES", 20)
    note = "[farm: Read stops after the first 20 bytes; %d more bytes were not read]"
    (workspace / "f").write_text("aaaa\nbbbb\ncccc\ndddd\neeee\n")  # 25 bytes: the bound falls after line 4
    assert obs("Read", {"file_path": "f"}, workspace) == "f\n1. aaaa\n2. bbbb\n3. cccc\n4. dddd\n" + note % 5
    (workspace / "h").write_text("aaaa\nbbbb\ncccc\nddddddd\n")  # the bound cuts line 4: not shown half
    assert obs("Read", {"file_path": "h"}, workspace) == "h\n1. aaaa\n2. bbbb\n3. cccc\n" + note % 3
    (workspace / "g").write_text("aaaa\nbbbb\n")  # under the bound: no note
    assert obs("Read", {"file_path": "g"}, workspace) == "g\n1. aaaa\n2. bbbb"


def test_read_refuses_devices_and_its_own_channel(workspace):
    # the in-process agent's stdin is pytest's; a file with the same inode is refused the same way
    own = os.fstat(0)
    if stat.S_ISCHR(own.st_mode):
        assert obs("Read", {"file_path": "/proc/self/fd/0"}, workspace).startswith("ValueError: /proc/self/fd/0 is ")
    r, w = os.pipe()
    try:
        os.write(w, b"from the pipe\n")
        os.close(w)
        w = -1
        # the pipe's inode is not the agent's stdio: it is read like a file
        assert obs("Read", {"file_path": f"/proc/self/fd/{r}"}, workspace) == f"/proc/self/fd/{r}\n1. from the pipe"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert obs("Read", {"file_path": "/dev/zero"}, workspace) == (
        "ValueError: /dev/zero is a character device, not a regular file")
    assert obs("Read", {"file_path": "/proc/self/status"}, workspace).startswith("/proc/self/status\n1. Name:")


def test_edit_refuses_a_file_beyond_the_bound_and_leaves_it_alone(workspace, monkeypatch):
    monkeypatch.setattr(leaf_tools, "READ_SCAN_BYTES", 8)
    (workspace / "f").write_text("x = 1\ny = 2\n")
    out = obs("Edit", {"file_path": "f", "old_string": "x", "new_string": "z"}, workspace)
    assert out == "ValueError: f is larger than 8 bytes; edit it with Bash"
    assert (workspace / "f").read_text() == "x = 1\ny = 2\n"
    assert obs("Edit", {"file_path": "/dev/null", "old_string": "x", "new_string": "z"}, workspace) == (
        "ValueError: /dev/null is a character device, not a regular file")


# --- Write ----------------------------------------------------------------------------------


def test_write_creates_parents_and_reports_chars(workspace, tmp_path):
    assert obs("Write", {"file_path": "a/b/c.txt", "content": "héllo"}, workspace) == "Wrote a/b/c.txt (5 bytes)."
    assert (workspace / "a/b/c.txt").read_text(encoding="utf-8") == "héllo"
    outside = tmp_path / "elsewhere.txt"
    assert obs("Write", {"file_path": str(outside), "content": 12}, workspace) == f"Wrote {outside} (2 bytes)."
    assert outside.read_text() == "12"
    assert obs("Write", {"file_path": "x"}, workspace) == "ValueError: content is required"
    assert obs("Write", {"content": "x"}, workspace) == "ValueError: file_path is required"


# --- Edit -----------------------------------------------------------------------------------


def test_edit_exact_match_and_its_three_errors(workspace):
    f = workspace / "m.py"
    f.write_text("a = 1\nb = 1\n")
    assert obs("Edit", {"file_path": "m.py", "old_string": "", "new_string": "x"}, workspace) == (
        "ValueError: old_string must be non-empty"
    )
    assert obs("Edit", {"file_path": "m.py", "old_string": "zzz", "new_string": "x"}, workspace) == (
        "ValueError: old_string was not found"
    )
    assert obs("Edit", {"file_path": "m.py", "old_string": " = 1", "new_string": " = 2"}, workspace) == (
        "ValueError: old_string matched 2 times; set replace_all=true or use a more specific old_string"
    )
    assert f.read_text() == "a = 1\nb = 1\n"  # failed edits leave the file alone
    assert obs("Edit", {"file_path": "m.py", "old_string": "a = 1", "new_string": "a = 3"}, workspace) == (
        "Edited m.py (1 replacement)."
    )
    assert obs("Edit", {"file_path": "m.py", "old_string": " = ", "new_string": "=", "replace_all": "yes"},
               workspace) == "Edited m.py (2 replacements)."
    assert f.read_text() == "a=3\nb=1\n"
    assert obs("Edit", {"file_path": "m.py", "old_string": "a", "new_string": "q", "replace_all": "false"},
               workspace) == "Edited m.py (1 replacement)."


@pytest.mark.parametrize("flag", ["false", "False", " no ", "0", "off", "", False, 0, None])
def test_edit_replace_all_false_values_keep_the_uniqueness_check(workspace, flag):
    f = workspace / "m.py"
    f.write_text("x = 1\nx = 1\n")
    assert obs("Edit", {"file_path": "m.py", "old_string": "x = 1", "new_string": "y", "replace_all": flag},
               workspace) == ("ValueError: old_string matched 2 times; "
                              "set replace_all=true or use a more specific old_string")
    assert f.read_text() == "x = 1\nx = 1\n"


@pytest.mark.parametrize("flag", ["true", "TRUE", " yes", "1", "on", True, 1])
def test_edit_replace_all_true_values_replace_every_occurrence(workspace, flag):
    f = workspace / "m.py"
    f.write_text("x = 1\nx = 1\nx = 1\n")
    assert obs("Edit", {"file_path": "m.py", "old_string": "x = 1", "new_string": "y", "replace_all": flag},
               workspace) == "Edited m.py (3 replacements)."
    assert f.read_text() == "y\ny\ny\n"


def test_edit_without_replace_all_replaces_the_single_match_only(workspace):
    f = workspace / "m.py"
    f.write_text("ab\nb\n")
    assert obs("Edit", {"file_path": "m.py", "old_string": "ab", "new_string": "b"}, workspace) == (
        "Edited m.py (1 replacement).")
    assert f.read_text() == "b\nb\n"
    missing_old = obs("Edit", {"file_path": "m.py", "new_string": "x"}, workspace)
    assert missing_old == "ValueError: old_string must be non-empty"
    assert obs("Edit", {"file_path": "m.py", "old_string": "b"}, workspace) == "ValueError: new_string is required"
    assert obs("Edit", {"file_path": "m.py", "old_string": 5, "new_string": 6}, workspace) == (
        "ValueError: old_string was not found")


def test_edit_keeps_undecodable_bytes(workspace):
    f = workspace / "latin.txt"
    f.write_bytes(b"caf\xe9 = 1\nname = 'x'\n")
    edited = obs("Edit", {"file_path": "latin.txt", "old_string": "'x'", "new_string": "'y'"}, workspace)
    assert edited.startswith("Edited")
    assert f.read_bytes() == b"caf\xe9 = 1\nname = 'y'\n"


# --- Glob -----------------------------------------------------------------------------------


def test_glob_recursive_files_only_sorted(workspace):
    for p in ["b.py", "a/x.py", "a/b/y.py", "a/z.txt", ".hidden.py"]:
        (workspace / p).parent.mkdir(parents=True, exist_ok=True)
        (workspace / p).write_text("")
    (workspace / "dir.py").mkdir()
    assert obs("Glob", {"pattern": "**/*.py"}, workspace) == "a/b/y.py\na/x.py\nb.py"
    assert obs("Glob", {"pattern": "*.py", "path": "a"}, workspace) == "a/x.py"
    assert obs("Glob", {"pattern": "*.rs"}, workspace) == "No files matched."
    assert obs("Glob", {}, workspace) == "ValueError: pattern is required"


def test_glob_caps_at_limit(workspace):
    for i in range(1005):
        (workspace / f"f{i:04d}.txt").write_text("")
    out = obs("Glob", {"pattern": "*.txt"}, workspace).split("\n")
    assert len(out) == 1001 and out[0] == "f0000.txt" and out[-1] == "... 5 more files"
    assert obs("Glob", {"pattern": "*.txt"}, workspace, glob_limit=2).split("\n") == [
        "f0000.txt", "f0001.txt", "... 1003 more files"]


def test_glob_through_symlink_loops_returns_within_its_timeout(workspace):
    # two self-loops make Python's recursive glob exponential: it never ends on its own
    (workspace / "loop").mkdir()
    (workspace / "loop" / "a").symlink_to(".")
    (workspace / "loop" / "b").symlink_to(".")
    (workspace / "loop" / "real.txt").write_text("")
    out = obs("Glob", {"pattern": "**/*.txt", "path": "loop"}, workspace, glob_timeout_s=0.5)
    lines = out.split("\n")
    assert lines[-1] == "[farm: Glob stopped after 0.5 s; the list is incomplete, narrow the pattern or the path]"
    paths = lines[:-2] if lines[-2].startswith("... ") else lines[:-1]  # the glob_limit line, when capped
    assert paths and all(ln.startswith("loop/") and ln.endswith("/real.txt") for ln in paths)
    none = obs("Glob", {"pattern": "**/none.txt", "path": "loop"}, workspace, glob_timeout_s=0.5)
    assert none == "No files matched.\n" + lines[-1]


def test_glob_stops_at_the_output_bound_with_whole_paths_only(workspace, monkeypatch):
    monkeypatch.setattr(leaf_tools, "GLOB_MAX_BYTES", 200)
    for i in range(100):
        (workspace / f"file{i:03d}.txt").write_text("")
    lines = obs("Glob", {"pattern": "*.txt"}, workspace).split("\n")
    assert lines[-1] == ("[farm: Glob stopped after 200 bytes of paths; "
                         "the list is incomplete, narrow the pattern or the path]")
    names = lines[:-1]
    assert 0 < len(names) < 100 and all(n.startswith("file") and n.endswith(".txt") and len(n) == 11 for n in names)


# --- Bash -----------------------------------------------------------------------------------


def test_bash_observation_format(workspace):
    assert obs("Bash", {"command": "echo out; echo err >&2; exit 3"}, workspace) == (
        "Exit code: 3\nSTDOUT:\nout\n\nSTDERR:\nerr\n"
    )
    assert obs("Bash", {"command": "pwd"}, workspace) == f"Exit code: 0\nSTDOUT:\n{workspace}\n\nSTDERR:\n"
    assert obs("Bash", {"command": "if then"}, workspace).startswith("Exit code: 2\nSTDOUT:\n\nSTDERR:\n")
    assert obs("Bash", {}, workspace) == "ValueError: command is required"


def test_bash_is_a_login_shell_without_persistent_state(workspace):
    assert "login" in obs("Bash", {"command": "shopt -q login_shell && echo login"}, workspace)
    obs("Bash", {"command": "cd /tmp; export FOO=1"}, workspace)
    assert obs("Bash", {"command": "pwd; echo ${FOO:-unset}"}, workspace) == (
        f"Exit code: 0\nSTDOUT:\n{workspace}\nunset\n\nSTDERR:\n"
    )


def test_bash_passes_the_sandbox_env(workspace):
    import os

    env = dict(os.environ, HOME=str(workspace), FARM_TASK_VAR="from-image")
    assert obs("Bash", {"command": "echo $FARM_TASK_VAR"}, workspace, env=env).startswith(
        "Exit code: 0\nSTDOUT:\nfrom-image\n")


def test_bash_timeout_rules():
    t = leaf_tools.bash_timeout
    assert t({}, 120) == 120
    assert t({"timeout": 30}, 120) == 30
    assert t({"timeout": 1000}, 120) == 1000  # not above 1000: seconds
    assert t({"timeout": 1500}, 120) == 1.5  # above 1000: milliseconds
    assert t({"timeout": 5, "timeout_ms": 2500}, 120) == 2.5  # timeout_ms wins
    assert t({"timeout": 0}, 120) == 0.1 and t({"timeout": -3}, 120) == 0.1  # minimum 0.1 s
    assert t({"timeout": "7"}, 120) == 7
    assert t({"timeout": 600}, 120, max_s=42) == 42  # farm: capped by the remaining budget
    with pytest.raises(ValueError):
        t({"timeout": "soon"}, 120)


def test_bash_timeout_kills_and_reports(workspace):
    res = run("Bash", {"command": "echo started; sleep 5; echo never", "timeout": 1300}, workspace)
    assert res["timed_out"] is True
    assert res["observation"] == "Timed out after 1.3s\nSTDOUT:\nstarted\n\nSTDERR:\n"
    assert res["command_s"] < 4


def test_bash_timeout_kills_children_that_left_the_session_and_the_environment(workspace):
    marker = workspace / "escaped"
    cmd = f"( env -i setsid /bin/bash -c 'sleep 1.5; touch {marker}' >/dev/null 2>&1 </dev/null & ); sleep 30"
    res = run("Bash", {"command": cmd, "timeout": 0.5}, workspace)
    assert res["timed_out"] is True and res["exit_code"] == 124
    import time

    time.sleep(2.0)
    assert not marker.exists()


def test_bash_output_truncated_at_30000_chars(workspace):
    res = run("Bash", {"command": "head -c 50000 /dev/zero | tr '\\0' a"}, workspace)
    text = res["observation"]
    full_len = len("Exit code: 0\nSTDOUT:\n") + 50000 + len("\nSTDERR:\n")
    assert text == ("Exit code: 0\nSTDOUT:\n" + "a" * 50000)[:30000] + f"\n[truncated {full_len - 30000} chars]"
    assert res["truncated"] is True and res["output_chars"] == len(text)


def test_bash_truncation_counts_bytes_the_capture_dropped(workspace):
    res = run("Bash", {"command": "head -c 3000000 /dev/zero | tr '\\0' a"}, workspace, bash_output_chars=1000)
    marker = res["observation"].rsplit("\n", 1)[1]
    dropped = int(marker.split()[1])
    assert 2_999_000 <= dropped <= 3_001_000, marker


def test_unknown_tool_and_non_object_args(workspace):
    assert obs("Frobnicate", {"x": 1}, workspace) == "Unknown tool: Frobnicate"
    assert obs("Read", ["not", "a", "dict"], workspace) == "ValueError: file_path is required"
