"""The small rules behind the five tools: truncation, paths, integer and timeout arguments, limits.

The tools themselves run through the sandbox agent's real ``tool`` op (as in test_leaf_tools.py).
"""

from __future__ import annotations

import math
import os

import pytest
from agent_helpers import QUIET_HOME, tool_agent

from farm.sandbox.inside import leaf_tools as lt

AGENT = tool_agent()


def run(name, args, ws, **limits):
    limits.setdefault("env", {"HOME": QUIET_HOME})
    return AGENT.op_tool(name, args, str(ws), limits)


# --- truncate ----------------------------------------------------------------------------------


def test_truncate_head_and_head_tail():
    assert lt.truncate("abcdef", 10) == ("abcdef", False)
    assert lt.truncate("abcdef", 6) == ("abcdef", False)
    assert lt.truncate("abcdef", None) == ("abcdef", False) and lt.truncate("abcdef", 0) == ("abcdef", False)
    assert lt.truncate("abcdef", 4) == ("abcd\n[truncated 2 chars]", True)
    assert lt.truncate("abcdef", 4, "head_tail") == ("ab\n[truncated 2 chars]\nef", True)
    assert lt.truncate("abcdefg", 3, "head_tail") == ("a\n[truncated 4 chars]\nfg", True)
    # ``total``: characters already dropped upstream still count
    assert lt.truncate("abcdef", 4, total=100) == ("abcd\n[truncated 96 chars]", True)


# --- paths -------------------------------------------------------------------------------------


def test_resolve_and_display():
    assert lt.resolve("a/../b", "/w") == "/w/b"
    assert lt.resolve("/x/./y", "/w") == "/x/y"
    assert lt.resolve("~/f", "/w") == os.path.expanduser("~/f")
    assert lt.resolve(5, "/w") == "/w/5"
    assert lt.display("/w", "/w") == "."
    assert lt.display("/w/a/b", "/w") == "a/b" and lt.display("/w/a", "/w/") == "a"
    assert lt.display("/wx/a", "/w") == "/wx/a" and lt.display("/other", "/w") == "/other"


def test_file_path_falls_back_to_path_when_empty(workspace):
    (workspace / "p.txt").write_text("x\n")
    assert run("Read", {"file_path": "", "path": "p.txt"}, workspace)["observation"] == "p.txt\n1. x"
    assert run("Read", {"file_path": None, "path": ""}, workspace)["observation"] == "ValueError: file_path is required"


def test_integer_arguments(workspace):
    (workspace / "f").write_text("a\nb\nc\n")
    obs = lambda **a: run("Read", {"file_path": "f", **a}, workspace)["observation"]  # noqa: E731
    assert obs(offset="2", limit="1") == "f\n2. b"
    assert obs(offset="", limit="") == "f\n1. a\n2. b\n3. c"
    assert obs(offset=None, limit=-1) == "f\n1. a\n2. b\n3. c"
    assert obs(offset=True) == "ValueError: offset must be an integer, got True"
    assert obs(limit="1.5") == "ValueError: limit must be an integer, got '1.5'"
    assert obs(limit=[1]) == "ValueError: limit must be an integer, got [1]"
    assert obs(offset=-4, limit=2) == "f\n1. a\n2. b"


def test_write_stringifies_non_text_content_and_reports_its_length(workspace):
    res = run("Write", {"file_path": "n.json", "content": [1, 2]}, workspace)
    assert res["observation"] == "Wrote n.json (6 bytes)." and (workspace / "n.json").read_text() == "[1, 2]"
    assert res["error"] is None and res["truncated"] is False


def test_edit_may_delete_text(workspace):
    (workspace / "m").write_text("keep drop keep")
    assert run("Edit", {"file_path": "m", "old_string": " drop", "new_string": ""}, workspace)["observation"] == (
        "Edited m (1 replacement).")
    assert (workspace / "m").read_text() == "keep keep"


def test_glob_from_a_subdirectory_lists_paths_from_the_workdir(workspace):
    (workspace / "s" / "t").mkdir(parents=True)
    (workspace / "s" / "t" / "x.py").write_text("")
    (workspace / "s" / "y.py").write_text("")
    assert run("Glob", {"pattern": "**/*.py", "path": "s/t"}, workspace)["observation"] == "s/t/x.py"
    assert run("Glob", {"pattern": "*.py", "path": ""}, workspace)["observation"] == "No files matched."
    assert run("Glob", {"pattern": "*.py", "path": "s"}, workspace, glob_limit=1)["observation"] == "s/y.py"


# --- Bash --------------------------------------------------------------------------------------


def test_bash_timeout_argument_rules():
    t = lt.bash_timeout
    assert t({"timeout": "", "timeout_ms": ""}, 9) == 9
    assert t({"timeout": True}, 9) == 9 and t({"timeout_ms": False, "timeout": 3}, 9) == 3
    assert t({"timeout_ms": 1500, "timeout": 3}, 9) == 1.5
    assert t({"timeout": 1000.5}, 9) == pytest.approx(1.0005)
    assert t({"timeout": 5}, 9, max_s=0) == lt.MIN_BASH_TIMEOUT_S  # the cap never goes below the minimum
    assert t({"timeout": 5}, 9, max_s=7) == 5
    for bad in ({"timeout": "nan"}, {"timeout_ms": "nan"}, {"timeout": [1]}):
        with pytest.raises(lt.ToolInputError, match="timeout must be a number of seconds"):
            t(bad, 9)
    with pytest.raises(lt.ToolInputError, match="got 'soon'"):
        t({"timeout_ms": "soon"}, 9)


def test_bash_records_exit_timing_and_uses_the_default_timeout(workspace):
    res = run("Bash", {"command": "exit 4"}, workspace, bash_timeout_s=0.3)
    assert (res["exit_code"], res["timed_out"], res["error"], res["truncated"]) == (4, False, None, False)
    assert 0 <= res["command_s"] < 5 and 0 <= res["duration_s"] < 5
    slow = run("Bash", {"command": "sleep 5"}, workspace, bash_timeout_s=0.3)
    assert slow["timed_out"] is True and slow["observation"].startswith("Timed out after 0.3s\n")
    assert slow["exit_code"] == 124


def test_bash_capture_keeps_more_than_the_character_cap(workspace):
    # multi-byte characters: the byte capture must not cut inside what the character cap keeps
    res = run("Bash", {"command": "for i in $(seq 2000); do printf 'é'; done"}, workspace, bash_output_chars=3000)
    assert res["observation"] == "Exit code: 0\nSTDOUT:\n" + "é" * 2000 + "\nSTDERR:\n" and not res["truncated"]


def test_bash_truncation_counts_uncaptured_bytes_of_both_streams(workspace):
    cmd = "head -c 200000 /dev/zero | tr '\\0' o; head -c 200000 /dev/zero | tr '\\0' e >&2"
    res = run("Bash", {"command": cmd}, workspace, bash_output_chars=10)
    marker = res["observation"].rsplit("\n", 1)[1]
    total = len("Exit code: 0\nSTDOUT:\n") + 200000 + len("\nSTDERR:\n") + 200000
    assert marker == f"[truncated {total - 10} chars]" and res["truncated"] is True
    assert "uncaptured" not in res


def test_bash_env_comes_from_the_limits(workspace):
    res = run("Bash", {"command": "echo ${ONLY_HERE:-unset}"}, workspace)
    assert "unset" in res["observation"]
    res = run("Bash", {"command": "echo $ONLY_HERE"}, workspace, env={"HOME": QUIET_HOME, "ONLY_HERE": "yes"})
    assert res["observation"] == "Exit code: 0\nSTDOUT:\nyes\n\nSTDERR:\n"


# --- run_tool ----------------------------------------------------------------------------------


def test_none_limits_fall_back_to_the_defaults(workspace):
    (workspace / "big").write_text("x" * 25000)
    res = run("Read", {"file_path": "big"}, workspace, read_output_chars=None, truncation=None)
    marker = f"\n[truncated {25000 + 7 - 20000} chars]"  # "big\n1. " adds 7 characters
    assert res["truncated"] is True and len(res["observation"]) == 20000 + len(marker)
    assert res["output_chars"] == len(res["observation"])


def test_errors_are_named_by_their_class(workspace):
    res = run("Read", {"file_path": "nope"}, workspace)
    assert res["error"] == "FileNotFoundError" and res["observation"].startswith("FileNotFoundError: ")
    res = run("Read", {}, workspace)
    assert res["error"] == "ValueError" and res["observation"] == "ValueError: file_path is required"
    res = run("Nope", {}, workspace)
    assert (res["error"], res["observation"], res["truncated"]) == ("UnknownTool", "Unknown tool: Nope", False)
    assert set(res) == {"observation", "output_chars", "truncated", "error", "duration_s"}


def test_run_tool_without_workdir_or_limits_uses_root_and_defaults():
    res = lt.run_tool("Glob", {"pattern": "etc/host*"}, None, None, None)
    assert "etc/hostname" in res["observation"].split("\n") or res["observation"].startswith("etc/host")
    assert not math.isnan(res["duration_s"])


def test_bash_timeout_is_capped_by_the_remaining_budget(workspace):
    res = run("Bash", {"command": "sleep 5", "timeout": 60}, workspace, max_timeout_s=0.3)
    assert res["timed_out"] is True and res["observation"].startswith("Timed out after 0.3s\n")
    assert res["command_s"] < 4


def test_bash_stdout_and_stderr_stay_apart(workspace):
    res = run("Bash", {"command": "echo e >&2; echo o"}, workspace)
    assert res["observation"] == "Exit code: 0\nSTDOUT:\no\n\nSTDERR:\ne\n"
