"""The verifier_setup rules (farm/grade/verifier_setup.py) on real Terminal-Bench 2.0 verifier
outputs (tests/fixtures/verifier_setup, recorded by running the tasks' own test.sh) and in a
real sandbox."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from farm.grade import verifier_setup as vs
from farm.grade.harbor import run_harbor_verifier
from farm.grade.verifier_setup import classify, setup_failure
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.model import Environment, Task, VerifierSpec
from tests.shared import shared_path

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "verifier_setup"


def _out(name: str) -> str:
    return (RECORDED / f"{name}.txt").read_text()


# (recording, the reward its test.sh wrote, expected rule family or None, the evidence it must
# quote: the last failing line, the one that stopped the verifier)
CASES = [
    ("local-nonet-nocache", 0.0, "not_found", "/tests/test.sh: line 19: uvx: command not found"),
    ("local-public-nocache", 0.0, "not_found", "/tests/test.sh: line 19: uvx: command not found"),
    ("local-nonet-nocache-pip", 0.0, "not_found", "/tests/test.sh: line 6: pytest: command not found"),
    ("podman-nonet-nocache", 0.0, "not_found", "/tests/test.sh: line 19: uvx: command not found"),
    # the cache staged uv and python: the tests ran, so a 0 is the answer's, a 1 stays a 1
    ("local-nonet-cache-unsolved", 0.0, None, None),
    ("podman-nonet-cache-unsolved", 0.0, None, None),
    ("local-nonet-cache-solved", 1.0, None, None),
    ("podman-nonet-cache-solved", 1.0, None, None),
]
# every rule family that matches somewhere in a recording
FAMILIES = {
    "local-nonet-nocache": {"curl", "not_found"},
    "local-nonet-nocache-pip": {"pip", "not_found"},
    "podman-nonet-nocache": {"apt", "not_found"},
    "local-nonet-cache-unsolved": {"curl"},
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_rule_families_seen_in_real_outputs(name: str) -> None:
    out = _out(name)
    assert {kind for kind, rx in vs.SETUP_FAILURES if rx.search(out)} == FAMILIES[name]


@pytest.mark.parametrize("name,reward,kind,evidence", CASES, ids=[c[0] for c in CASES])
def test_recorded_terminal_bench_outputs(name: str, reward: float, kind: str | None, evidence: str | None) -> None:
    verdict = classify(_out(name), reward)
    if kind is None:
        assert verdict is None
    else:
        assert verdict is not None and verdict.kind == kind and evidence in verdict.evidence


def test_the_uncached_verifier_shows_every_step_of_its_failed_set_up_and_no_test() -> None:
    out = _out("local-nonet-nocache")
    assert "/root/.local/bin/env: No such file or directory" in out and "uvx: command not found" in out
    assert not vs.tests_ran(out)
    assert vs.tests_ran(_out("local-nonet-cache-unsolved"))  # "collected 2 items", "2 failed"


def test_curl_failing_to_fetch_the_installer_does_not_matter_once_the_tests_ran() -> None:
    out = _out("local-nonet-cache-unsolved")  # staged uv: the installer's download failed harmlessly
    assert setup_failure(out) is not None and setup_failure(out).kind == "curl"
    assert classify(out, 0.0) is None


def test_a_missing_reward_after_a_failed_set_up_is_setup_even_when_output_looks_like_tests() -> None:
    out = _out("local-nonet-nocache")
    assert classify(out, None).evidence == "/tests/test.sh: line 19: uvx: command not found"
    assert classify("collected 3 items\n=== 3 failed in 0.1s ===\n", None) is None  # no evidence: stays no_reward


def test_apt_update_warnings_alone_are_not_evidence() -> None:
    out = ("Err:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving 'deb.debian.org'\n"
           "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving\n"
           "curl is already the newest version (7.88.1-10).\nscore: 0\n")
    assert setup_failure(out) is None and classify(out, 0.0) is None
    assert classify("E: Unable to locate package curl\n", 0.0).kind == "apt"


@pytest.mark.parametrize("line,kind", [
    ("/tests/test.sh: line 19: uvx: command not found", "not_found"),
    ("bash: pytest: command not found", "not_found"),
    ("error: No interpreter found for Python 3.13 in managed installations or search path", "uv"),
    ("  × No solution found when resolving `--with` dependencies:", "uv"),
    ("ERROR: No matching distribution found for pytest==8.4.1", "pip"),
    ("ERROR: Could not find a version that satisfies the requirement pytest==8.4.1 (from versions: none)", "pip"),
    ("curl: (7) Failed to connect to astral.sh port 443 after 3 ms: Couldn't connect to server", "curl"),
])
def test_each_rule_family(line: str, kind: str) -> None:
    assert classify(f"Reading package lists...\n{line}\n", 0.0).kind == kind


@pytest.mark.parametrize("ran", ["collected 1 item", "==== 2 passed, 1 failed in 0.3s ====",
                                 "=================================== FAILURES ===================================",
                                 "FAILED ../tests/test_outputs.py::test_hello_file_exists - AssertionError",
                                 "============================ no tests ran in 0.01s ============================="])
def test_any_sign_that_tests_ran_keeps_the_zero_as_unresolved(ran: str) -> None:
    assert classify(f"uvx: command not found\n{ran}\n", 0.0) is None


def test_a_ctrf_report_counts_as_tests_ran_and_reward_one_is_never_overridden() -> None:
    assert classify("uvx: command not found\n", 0.0, ctrf_present=True) is None
    assert classify("uvx: command not found\n", 1.0) is None
    assert classify("uvx: command not found\n", 0.5).kind == "not_found"


@pytest.mark.bwrap
async def test_a_real_tb2_verifier_without_network_is_verifier_setup_not_a_zero(tmp_path: Path) -> None:
    src = shared_path("fixtures/terminal-bench-2.0") / "gcode-to-text" / "tests"
    shutil.copytree(src, tmp_path / "tests")
    task = Task(benchmark="terminal-bench-2", task_id="gcode-to-text", instruction="",
                environment=Environment(workdir="/app"), verifier=VerifierSpec(tests_dir=tmp_path / "tests"),
                verifier_timeout_s=120, agent_network="no-network", verifier_network="no-network")
    sb = LocalSandbox(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        res = await run_harbor_verifier(task, sb)
        wrote = (await sb.exec("cat /logs/verifier/reward.txt", cwd="/")).stdout.strip()
    finally:
        await sb.close()
    assert wrote == "0"  # what the script itself concluded
    assert (res.error_class, res.reward, res.resolved) == ("verifier_setup", None, False)
    assert res.error == ("the verifier's set-up failed before any test ran (it wrote reward 0; not_found): "
                         "/tests/test.sh: line 19: uvx: command not found")


@pytest.mark.bwrap
@pytest.mark.parametrize("sh,marker,cls,error", [
    ("uvx -p 3.13 pytest /tests\n", None, "verifier_setup",
     "the verifier wrote neither /logs/verifier/reward.json nor reward.txt, after its set-up failed (not_found): "
     "/tests/test.sh: line 1: uvx: command not found"),
    ("echo 'collected 0 items'\n", None, "verifier_no_reward",
     "the verifier wrote neither /logs/verifier/reward.json nor reward.txt"),
    ("pytest /tests; echo 1 > /logs/verifier/reward.txt\n", "END", "verifier_setup",
     "verifier output lacks the success marker 'END', after its set-up failed (not_found): "
     "/tests/test.sh: line 1: pytest: command not found"),
])
async def test_no_valid_reward_is_verifier_setup_only_with_evidence(tmp_path: Path, sh: str, marker: str | None,
                                                                   cls: str, error: str) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text(sh)
    task = Task(benchmark="b", task_id="t", instruction="", environment=Environment(workdir="/app"),
                verifier=VerifierSpec(tests_dir=tmp_path / "tests", success_marker=marker), verifier_timeout_s=60,
                agent_network="no-network", verifier_network="no-network")
    sb = LocalSandbox(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        res = await run_harbor_verifier(task, sb)
    finally:
        await sb.close()
    assert (res.error_class, res.error, res.reward) == (cls, error, None)
