"""The vendor's tool environment to the byte under agent.compat leaf-2609 / leaf-legacy (issue 27
item 5): nothing of farm's in the Bash shell's environment, ``OLDPWD`` and ``SHLVL`` as the
vendor's transport gives them, Read of ``/dev/null``, and a lone surrogate in a request failing
the call before anything is written. farm-safe keeps its own rules (docs/agent.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from agent_helpers import QUIET_HOME, agent_cfg, sandbox_file, tool_agent

from farm.agent.execution import ToolCall, ToolExecutor, vendor_harness_refuses

AGENT = tool_agent()
VENDOR = ("leaf-2609", "leaf-legacy")


@pytest.fixture(autouse=True)
def _no_outside_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # CI exports FARM_REQUIRE_* / AWS_* / CI into this process, whose environment the in-process
    # sandbox agent hands on: what the test asserts is what farm adds, so those go first
    for name in list(os.environ):
        if name.startswith(("FARM", "AWS", "CI")):
            monkeypatch.delenv(name)


def bash(command: str, ws: Path, compat: str, **env: str) -> str:
    limits = {"compat": compat, "env": {"HOME": QUIET_HOME, **env}}
    return AGENT.op_tool("Bash", {"command": command}, str(ws), limits)["observation"]


def stdout(observation: str) -> str:
    return observation.split("\nSTDOUT:\n", 1)[1].split("\nSTDERR:\n", 1)[0]


@pytest.mark.parametrize("compat", VENDOR)
def test_no_farm_name_in_the_shell_and_oldpwd_shlvl_as_the_vendor(workspace: Path, compat: str) -> None:
    out = bash("env -0", workspace, compat)
    env = dict(e.split("=", 1) for e in stdout(out).split("\0") if "=" in e)
    assert not [k for k in env if k.startswith("FARM")], env
    assert env["OLDPWD"] == str(workspace)
    # the shell itself reads 4 (a lone `env` is exec'd by bash, which gives it one level less)
    assert env["SHLVL"] == "3"
    assert stdout(bash("echo $SHLVL; true", workspace, compat)) == "4\n"
    # `cd -` goes back to the start directory, as under the vendor's transport
    assert stdout(bash("cd /tmp && cd - >/dev/null && pwd", workspace, compat)) == f"{workspace}\n"
    # a FARM_* name the task's own environment sets is the task's, and stays
    assert stdout(bash("echo $FARM_TASK_VAR", workspace, compat, FARM_TASK_VAR="from-image")) == "from-image\n"


def test_farm_safe_keeps_its_process_tag(workspace: Path) -> None:
    out = stdout(bash("echo ${FARM_EXEC_ID:+tagged} $SHLVL", workspace, "farm-safe"))
    assert out.split()[0] == "tagged"


@pytest.mark.parametrize("compat", VENDOR)
def test_read_of_dev_null_is_its_empty_content_and_other_devices_stay_refused(workspace: Path, compat: str) -> None:
    def read(path: str) -> str:
        return AGENT.op_tool("Read", {"file_path": path}, str(workspace), {"compat": compat})["observation"]

    assert read("/dev/null") == "/dev/null\n"
    assert read("/dev/zero") == "ValueError: /dev/zero is a character device, not a regular file"
    edit = AGENT.op_tool("Edit", {"file_path": "/dev/null", "old_string": "x", "new_string": "y"}, str(workspace),
                         {"compat": compat})
    assert edit["observation"] == "ValueError: old_string was not found"
    safe = AGENT.op_tool("Read", {"file_path": "/dev/null"}, str(workspace), {"compat": "farm-safe"})
    assert safe["observation"] == "ValueError: /dev/null is a character device, not a regular file"


def test_a_lone_surrogate_in_any_argument_is_the_harness_failure() -> None:
    content = json.loads('"ok \\ud800 bad"')  # what a model's JSON can carry
    refused = vendor_harness_refuses(ToolCall("c1", "Write", {"file_path": "a.txt", "content": content}, True), "/app")
    assert refused is not None and refused.startswith("UnicodeEncodeError: 'utf-8' codec can't encode character "
                                                      "'\\ud800' in position ")
    assert refused.endswith(": surrogates not allowed")
    fine = ToolCall("c2", "Write", {"file_path": "a.txt", "content": "fine é"}, True)
    assert vendor_harness_refuses(fine, "/app") is None


@pytest.mark.parametrize("compat", VENDOR)
async def test_write_with_a_lone_surrogate_writes_nothing_and_ends_the_turn(sandbox, compat: str) -> None:
    sb, _ = sandbox
    ex = ToolExecutor(sb, "/app", agent_cfg(compat=compat))
    content = json.loads('"x\\udcff"')
    outcomes = await ex.run_turn([ToolCall("c1", "Write", {"file_path": "s.txt", "content": content}, True),
                                  ToolCall("c2", "Write", {"file_path": "t.txt", "content": "later"}, True)])
    assert len(outcomes) == 1 and outcomes[0].failure is not None
    assert outcomes[0].failure.startswith("UnicodeEncodeError: ")
    assert await sandbox_file(sb, "/app/s.txt") is None and await sandbox_file(sb, "/app/t.txt") is None


async def test_the_shell_environment_inside_a_real_sandbox(sandbox) -> None:
    sb, _ = sandbox
    ex = ToolExecutor(sb, "/app", agent_cfg(compat="leaf-2609"))
    [out] = await ex.run_turn([ToolCall("c1", "Bash", {"command": "env | cut -d= -f1 | sort; cd /; cd -"}, True)])
    names = stdout(out.observation or "").split()
    assert not [n for n in names if n.startswith("FARM")], names
    assert "OLDPWD" in names and names[-1] == "/app"
