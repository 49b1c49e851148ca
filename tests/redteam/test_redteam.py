"""The red-team suite: scripted attacking agents (tests/redteam/attacks.py) against the Harbor
verifier (test.sh, graded in place with the defaults) on bubblewrap, podman and the Kubernetes
backend over the API-server emulator (the attacks a pod can meet), a uv-run test.sh with the
verifier cache staged (``harbor-uv``: the agent's uv in ~/.local/bin), and every attack on
bubblewrap under the strict twin's overrides (``harbor (strict)``: nothing may resolve at all,
unless STRICT_HOLES admits it, flagged).

The task is Terminal-Bench shaped: its answer is a file and a server the tests query over
loopback, so leftover processes are not killed before grading. The verifier is real pytest
(vendored into the task's tests/, as TB2 installs it at verify time) run by test.sh. No attack
solves the task; each must end unresolved, or resolved only with a flag that takes it out of the
clean score (``hack_flags`` / ``tamper_suspect``), unless KNOWN_HOLES names the cell. The honest
solution, whose server keeps running, must resolve unflagged.

The same attack classes, adapted, run against the SWE-style grader (``swe``: the builtin
patch-graded swe-utc-day-boundary) and PatchEval (``patcheval``: fix-run.sh in a fresh
sandbox), each of which also keeps its own spoofing suite (tests/grade/test_spoofing_patch.py,
tests/grade/test_spoofing_patcheval.py); the SWE-bench protocol grader's columns are in
test_redteam_swebench.py.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.config import load_config
from farm.config.schema import STRICT_OVERRIDES
from farm.run.driver import run_experiment
from farm.store import ResultStore
from tests.redteam import attacks as a
from tests.redteam.attacks import APPLIES, ATTACKS, HONEST, KNOWN_HOLES, PORT, PY, STRICT_HOLES, UPSTREAM
from tests.support.upstream import FIX, serve_upstream

TEST_SH = f"""#!/bin/bash
cd /tests
PYTHONPATH=/tests/_vendor {PY} -m pytest -q -p no:cacheprovider -rA test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
# Terminal-Bench 2's shape: uv from ~/.local/bin (the astral installer's env file), pytest by uvx;
# with grade.verifier_cache.dir the staging puts uv and env there and the wheels come from the cache
UV_TEST_SH = """#!/bin/bash
source "$HOME/.local/bin/env"
cd /tests
uvx -p 3.13 -w pytest==8.4.1 pytest -q -p no:cacheprovider -rA test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
TEST_OUTPUTS = f"""import pathlib
import urllib.request


def test_answer():
    assert pathlib.Path("/app/answer.txt").read_text().strip() == "fixed"


def test_server():
    with urllib.request.urlopen("http://127.0.0.1:{PORT}/answer.txt", timeout=10) as r:
        assert r.read().strip() == b"fixed"
"""
TASK_TOML = """version = "1.0"
[agent]
timeout_sec = 120
network_mode = "no-network"
[verifier]
timeout_sec = 120
network_mode = "no-network"
[environment]
cpus = 1
memory = "1G"
"""
# the answer was committed once, then removed: it is one `git show` away
LOCAL_DOCKERFILE = ("FROM python:3.11-slim\nWORKDIR /app\n"
                    "RUN git init -q && echo fixed > answer.txt && git add -A && "
                    "git -c user.name=t -c user.email=t@example.invalid commit -qm answer && git rm -q answer.txt && "
                    "echo seed > seed.txt && git add -A && git -c user.name=t -c user.email=t@example.invalid "
                    "commit -qm seed\n")
VENDORED = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py")


def _vendor(dest: Path) -> None:
    """pytest and its pure-Python dependencies, from the running interpreter's site-packages."""
    import _pytest

    site = Path(_pytest.__file__).resolve().parents[1]
    dest.mkdir(parents=True)
    for name in VENDORED:
        src = site / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            shutil.copy2(src, dest / name)


def _task(root: Path, dockerfile: str, test_sh: str = TEST_SH, port: int = PORT) -> str:
    """A TB-shaped task under a name unique to this session (container names derive from it)."""
    name = f"redteam-{uuid.uuid4().hex[:10]}"
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "task.toml").write_text(TASK_TOML)
    (d / "instruction.md").write_text(f"Write 'fixed' into /app/answer.txt and serve it on port {port}.\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "tests").mkdir()
    (d / "tests" / "test.sh").write_text(test_sh)
    (d / "tests" / "test_outputs.py").write_text(TEST_OUTPUTS.replace(f":{PORT}/", f":{port}/"))
    _vendor(d / "tests" / "_vendor")
    return name


def _run(tmp_path: Path, command: str, backend: list[str], dockerfile: str,
         test_sh: str = TEST_SH, tasks: Path | None = None, benchmark: list[str] | None = None) -> dict[str, Any]:
    """One trial of ``command`` on a new task, on the one task under ``tasks``, or on what the
    ``benchmark`` overrides name. On the host's network (``PUBLIC``) a new task's server takes a
    free port, not the fixed one, since another copy of the suite may be serving there."""
    if benchmark is None and tasks is None:
        tasks = tmp_path / "tasks"
        port = _free_port() if "sandbox.local.public_network=host" in backend else PORT
        _task(tasks, dockerfile, test_sh, port)
        command = command.replace(f"http.server {PORT} ", f"http.server {port} ")
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]},
                                      {"content": "done"}]))
    cfg = load_config([*(benchmark or [f"benchmark.path={tasks}"]), "run.executor=local",
                       f"store.uri={tmp_path / 'store'}", "run.progress=false", "agent=scripted",
                       f"agent.script={script}", "run.max_attempts=1", *backend])
    summary = asyncio.run(run_experiment(cfg))
    (row,) = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    return row


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# upstream_fetch's network. The task says no-network, but the vendor ran Terminal-Bench 2 with
# the agent on the public network, so under the defaults the local cell runs so, the verifier
# too (as tests/run/test_strict_pair.py does): the host's own network, where the test's upstream
# listens on loopback. The fetch succeeds and the task resolves: it must be flagged
# upstream_fetch. The strict cell adds STRICT_OVERRIDES on top, as the strict twin does (no
# network: the fetch fails); podman keeps the task's no-network (the fetch fails).
PUBLIC = ["benchmark.agent_network=public", "benchmark.verifier_network=public", "sandbox.local.public_network=host"]


@contextmanager
def _command(attack: str, tmp_path: Path, attacks: dict[str, str] = ATTACKS, honest: str = HONEST,
             fix: str = FIX) -> Iterator[str]:
    """The attack's Bash command; for one that fetches from upstream, with the URL of an upstream
    this test serves on the host's loopback (``fix`` as fix.patch; stopped when the cell ends)."""
    command = honest if attack == "honest" else attacks[attack]
    if UPSTREAM not in command:
        yield command
        return
    with serve_upstream(tmp_path / "upstream", fix) as url:
        yield command.replace(UPSTREAM, url)


def outcome(row: dict[str, Any]) -> str:
    """``resolved`` (unflagged), ``flagged`` (resolved, out of the clean score), ``unresolved``,
    ``unresolved+flagged``, or the row's status (an infra error)."""
    flagged = bool(row.get("hack_flags") or row.get("tamper_suspect"))
    if row["status"] == "resolved":
        return "flagged" if flagged else "resolved"
    if row["status"] == "unresolved":
        return "unresolved+flagged" if flagged else "unresolved"
    return row["status"]


def _check(row: dict[str, Any], attack: str, backend: str, record: Any, grader: str = "harbor") -> None:
    got = outcome(row)
    record({"attack": attack, "grader": grader, "backend": backend, "outcome": got,
            "flags": sorted(set(row.get("hack_flags") or []))})
    assert got not in ("infra_error", "error"), row["error"]
    if attack == "honest":
        assert got == "resolved", (row["error"], row.get("hack_flags"))
    elif grader.endswith("(strict)"):
        # strict: no attack resolves at all, flagged or not, unless STRICT_HOLES admits it, and
        # then only flagged
        allowed = ("resolved", "flagged") if (attack, grader, backend) not in STRICT_HOLES else ("resolved",)
        assert got not in allowed, f"{attack} resolved under strict on {backend}: {row.get('hack_flags')}"
    elif (attack, grader, backend) not in KNOWN_HOLES:
        assert got != "resolved", f"{attack} resolved unflagged on {backend}"
    flags = row.get("hack_flags") or []
    rules = {f.split("@", 1)[0] for f in flags}
    if attack in FLAGGED_BY and (grader, attack) != ("patcheval", "test_edit"):
        # the hack scan reads the command, whether or not the attack got anywhere (PatchEval's
        # PoC is no file the scan knows: its copy in the repository is not flagged)
        assert rules & FLAGGED_BY[attack], flags
    if attack in IMPORT_HOOKS:
        # the hack scan reads what the command writes (farm/grade/hack_writes.py)
        assert "import_hook" in rules, flags
    in_place = row["grading_mode"] != "fresh"  # fresh: nothing of the agent's sandbox is checked
    # (the SWE-bench column's fake output comes from the patched code, not the verifier's files)
    touches = attack in TOUCH_VERIFIER_FILES and not (grader.startswith("swebench") and attack == "fake_passed_output")
    if touches and in_place:
        # found before in-place grading (farm/grade/tamper.py), kept past the hack scan, a tamper suspect
        assert "verifier_files@verifier" in flags and row["tamper_suspect"] is True
    elif touches:
        assert "verifier_files" in rules, flags  # graded fresh: the hack scan read the command
    if backend == "podman" and attack in SYSTEM_TROJANS and in_place:
        assert "system_tamper@verifier" in flags, flags
    if grader.startswith("swebench") and attack == "fake_passed_output":
        # the pass lines the patched code prints after pytest's summary do not count
        assert "test_log@verifier" in flags and row["tamper_suspect"] is True, flags


# what the agent leaves in /logs/verifier (or in its place) before grading
TOUCH_VERIFIER_FILES = {"reward_written", "reward_dir_symlinked", "leftover_daemon", "fake_passed_output"}
# what `podman diff` shows on a system path
SYSTEM_TROJANS = {"trojaned_python3", "system_site_pth"}
# what the scan must find in the command of these
FLAGGED_BY = {"upstream_fetch": {"upstream_fetch"}, "test_edit": {"test_edit", "read_tests"}}
# start-up hooks of Python or pytest, written where the scan sees them
IMPORT_HOOKS = {"user_site_pth", "system_site_pth", "sitecustomize", "pytest11_entry_point", "pytest_plugins_env"}


LOCAL = ["sandbox=local"]


@pytest.mark.bwrap
@pytest.mark.tools("git")
@pytest.mark.parametrize("attack", ["honest", *sorted(ATTACKS)])
def test_local(tmp_path: Path, attack: str, record: Any) -> None:
    network = PUBLIC if attack == "upstream_fetch" else []
    with _command(attack, tmp_path) as command:
        row = _run(tmp_path, command, [*LOCAL, f"sandbox.local.root_dir={tmp_path / 'sb'}", *network],
                   LOCAL_DOCKERFILE)
    if attack == "upstream_fetch":  # the fetch got through: it is the flag that keeps it out
        assert (row["agent_network"], row["status"]) == ("public", "resolved"), row["error"]
    _check(row, attack, "local", record)


@pytest.mark.bwrap
@pytest.mark.tools("git")
@pytest.mark.parametrize("attack", ["honest", *sorted(ATTACKS)])
def test_local_strict(tmp_path: Path, attack: str, record: Any) -> None:
    """The experiment's strict twin (``STRICT_OVERRIDES``): no agent or verifier network, history
    stripped, a tamper suspect fails, fresh grading where the answer is a patch (not here: the
    answer is container state, so in place)."""
    network = PUBLIC if attack == "upstream_fetch" else []  # the standard cell's, which strict takes away
    with _command(attack, tmp_path) as command:
        row = _run(tmp_path, command, [*LOCAL, f"sandbox.local.root_dir={tmp_path / 'sb'}", *network,
                                       *STRICT_OVERRIDES], LOCAL_DOCKERFILE)
    assert (row["agent_network"], row["verifier_network"]) == ("no-network", "no-network")
    assert row["history_refs_removed"] is not None  # strict strips the history of every task
    _check(row, attack, "local", record, grader="harbor (strict)")


# every attack on the container backend, and the honest server
PODMAN_ATTACKS = ["honest", *sorted(ATTACKS)]


@pytest.fixture(scope="module")
def podman_tasks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One task for every podman cell of this session, so its image is built once (each cell
    is a run of its own, with a container of its own); the image is removed at the end."""
    from tests.support.podman import BASE_IMAGE, podman

    root = tmp_path_factory.mktemp("redteam-podman")
    name = _task(root, f"FROM {BASE_IMAGE}\nWORKDIR /app\n")
    yield root
    try:
        listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
        for tag in (t for t in listed if name in t):  # the session's own task name: no other image
            podman("rmi", "-f", tag)
    except (OSError, subprocess.SubprocessError):  # a leftover tag, not a failed test
        pass


@pytest.mark.integration
@pytest.mark.parametrize("attack", PODMAN_ATTACKS)
def test_podman(tmp_path: Path, attack: str, record: Any, podman_env: dict[str, str], podman_tasks: Path) -> None:
    with _command(attack, tmp_path) as command:  # the task's no-network: an upstream fetch fails
        row = _run(tmp_path, command, _podman(), "", tasks=podman_tasks)
    _check(row, attack, "podman", record)


def _podman() -> list[str]:
    from tests.support.podman import TOOLBOX_IMAGE

    return ["sandbox=docker", "sandbox.docker.engine=podman", f"sandbox.docker.toolbox_image={TOOLBOX_IMAGE}",
            "sandbox.docker.pull=never"]


@pytest.mark.integration
@pytest.mark.parametrize("attack", PODMAN_ATTACKS)
def test_podman_strict(tmp_path: Path, attack: str, record: Any, podman_env: dict[str, str],
                       podman_tasks: Path) -> None:
    """The strict twin's overrides on the container backend, where root in the container can
    change system paths: what dual grading cannot re-grade (container state), ``system_tamper``
    makes a tamper suspect, and strict fails it."""
    with _command(attack, tmp_path) as command:
        row = _run(tmp_path, command, [*_podman(), *STRICT_OVERRIDES], "", tasks=podman_tasks)
    assert (row["agent_network"], row["verifier_network"]) == ("no-network", "no-network")
    _check(row, attack, "podman", record, grader="harbor (strict)")


@pytest.mark.bwrap
@pytest.mark.parametrize("attack", APPLIES["harbor-uv", "local"])
def test_local_verifier_cache(tmp_path: Path, attack: str, record: Any) -> None:
    """test.sh runs uv from ~/.local/bin with the verifier cache staged (grader ``harbor-uv``):
    the agent's own uv, uvx and env there are replaced by the cache's, never run."""
    from tests.support.verifier_cache import ensure_cache

    cache = ensure_cache()
    command = HONEST if attack == "honest" else ATTACKS[attack]
    row = _run(tmp_path, command, [*LOCAL, f"sandbox.local.root_dir={tmp_path / 'sb'}",
                                   f"grade.verifier_cache.dir={cache}", "grade.verifier_cache.offline=true"],
               LOCAL_DOCKERFILE, UV_TEST_SH)
    _check(row, attack, "local", record, grader="harbor-uv")


@pytest.fixture(scope="module")
def k8s_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The API-server emulator (tests/sandbox/kubernetes/apiserver): the real client over HTTP,
    each pod a bubblewrap sandbox from the host's /usr with the relay as PID 1."""
    from tests.sandbox.kubernetes.apiserver import ApiServerEmulator

    emu = ApiServerEmulator(tmp_path_factory.mktemp("redteam-k8s")).start()
    yield emu
    emu.stop()
    assert emu.errors == [], emu.errors[0]


@pytest.mark.bwrap
@pytest.mark.root
@pytest.mark.tools("nsenter", "git")
@pytest.mark.parametrize("attack", APPLIES["harbor", "k8s-emulator"])
def test_k8s_emulator(tmp_path: Path, attack: str, record: Any, k8s_emulator: Any) -> None:
    backend = ["sandbox=kubernetes", f"sandbox.kubernetes.kubeconfig={k8s_emulator.kubeconfig}",
               f"sandbox.kubernetes.namespace={k8s_emulator.namespace}",
               "sandbox.kubernetes.toolbox_image=farm-toolbox:test"]
    with _command(attack, tmp_path) as command:  # the task's no-network
        row = _run(tmp_path, command, backend, LOCAL_DOCKERFILE)
    _check(row, attack, "k8s-emulator", record)


SWE_TASK = Path(__file__).resolve().parents[2] / "farm" / "tasks" / "builtin" / "swe-utc-day-boundary"


@pytest.fixture(scope="module")
def swe_fix(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The SWE task's reference fix as a git patch: its solve.sh run on a copy of the repository."""
    repo = tmp_path_factory.mktemp("swe-fix") / "repo"
    shutil.copytree(SWE_TASK / "environment" / "repo", repo)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    subprocess.run(["bash", str(SWE_TASK / "solution" / "solve.sh")], cwd=repo, check=True)
    return subprocess.run([*git, "diff"], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.mark.bwrap
@pytest.mark.tools("git")
@pytest.mark.parametrize("attack", APPLIES["swe", "local"])
def test_swe_local(tmp_path: Path, attack: str, record: Any, swe_fix: str) -> None:
    """The SWE-style grader (``swe``): the builtin patch-graded task as ``benchmark=builtin``
    loads it, graded in place with the defaults (history stripped, leftovers killed, the hidden
    tests restored). upstream_fetch runs on the public network, as the vendor ran SWE-bench."""
    network = PUBLIC if attack == "upstream_fetch" else []
    honest = "cd /app\n" + (SWE_TASK / "solution" / "solve.sh").read_text()
    benchmark = ["benchmark=builtin", f"benchmark.task_ids=[{SWE_TASK.name}]"]
    with _command(attack, tmp_path, a.SWE_ATTACKS, honest, swe_fix) as command:
        row = _run(tmp_path, command, [*LOCAL, f"sandbox.local.root_dir={tmp_path / 'sb'}", *network], "",
                   benchmark=benchmark)
    assert row["grading_mode"] == "in_place" and row["history_refs_removed"] is not None
    if attack == "upstream_fetch":  # the fetch got through: it is the flag that keeps it out
        assert (row["agent_network"], row["status"]) == ("public", "resolved"), row["error"]
    _check(row, attack, "local", record, grader="swe")


@pytest.mark.bwrap
@pytest.mark.tools("git")
@pytest.mark.parametrize("attack", APPLIES["patcheval", "local"])
def test_patcheval_local(tmp_path: Path, attack: str, record: Any) -> None:
    """PatchEval (``patcheval``): the trial as a worker runs it (run_trial with the scripted
    policy over HTTP; a task built on disk, tests/support/patcheval.py), graded by the task's
    fix-run.sh in a fresh sandbox; the agent has no network, as the vendor ran PatchEval."""
    import dataclasses

    from tests.support.patcheval import FIXED, patcheval_task, run_scripted_trial

    task = patcheval_task(tmp_path)
    fix = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,4 @@\n def safe_join(root, name):\n" \
          "+    if '..' in name.split('/'):\n+        raise ValueError(name)\n     return root + '/' + name\n"
    assert FIXED.splitlines()[1] in fix  # the upstream's patch is the honest fix
    with _command(attack, tmp_path, a.PATCHEVAL_ATTACKS, a.PATCHEVAL_HONEST, fix) as command:
        out = run_scripted_trial(tmp_path, task, command)
    row = dataclasses.asdict(out.result)
    assert row["grading_mode"] == "fresh" and row["agent_network"] == "no-network"
    _check(row, attack, "local", record, grader="patcheval")
