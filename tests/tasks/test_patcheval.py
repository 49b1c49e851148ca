"""PatchEval Verified: loader on the real rows, grader end to end in real sandboxes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from farm.errors import TaskFormatError
from farm.grade import patcheval as grade
from farm.tasks.benchmark import load_pinned_source
from farm.tasks.model import BuildStep
from farm.tasks.patcheval import load_patcheval_file, repo_name
from tests.shared import BUNDLED

GRADING = BUNDLED / "grading"  # real PatchEval rows and grader logs, bundled (tests/fixtures/README.md)


def test_verified_rows_become_no_network_tasks() -> None:
    tasks = load_pinned_source("patch_eval_verified", root=GRADING / "patcheval_verified_rows.jsonl")
    assert [t.task_id for t in tasks] == ["CVE-2020-26215", "CVE-2022-1986", "CVE-2020-26294"]
    t = tasks[0]
    assert t.environment.image == "ghcr.io/patcheval-cve/patcheval-cve:cve-2020-26215"
    assert (t.agent_network, t.verifier_network) == ("no-network", "no-network")
    assert t.verifier.protocol == "patcheval" and t.workdir == "/workspace"
    assert (t.agent_timeout_s, t.verifier_timeout_s) == (3600, 600)
    assert t.environment.resources.memory_mb == 4096 and t.environment.resources.cpus == 1
    assert t.metadata["repo_name"] == "notebook" and t.metadata["language"] == "Python"
    assert t.metadata["cwe"] == ["CWE-601"]
    assert "CVE-2020-26215" in t.instruction and "Open redirect" in t.instruction
    assert "/workspace" in t.instruction and "web" in t.instruction
    assert t.source.revision == "b43285cdde80cc04608d5f1178a330b740c91c2d"
    mirrored = load_pinned_source("patch_eval_verified", root=GRADING / "patcheval_verified_rows.jsonl",
                              image_registry="mirror.local")
    assert mirrored[1].environment.image == "mirror.local/patcheval-cve/patcheval-cve:cve-2022-1986"


def test_bad_rows_name_the_row_and_field(tmp_path: Path) -> None:
    rows = tmp_path / "rows.json"
    good = {"cve_id": "CVE-2020-1234", "cve_description": "d", "repo": "https://github.com/a/b.git",
            "image_url": "ghcr.io/x/y:z", "programing_language": "Python"}
    rows.write_text(json.dumps([good, {**good, "image_url": None}]))
    with pytest.raises(TaskFormatError, match=r"rows.json\[1\] \(CVE-2020-1234\).*'image_url'"):
        load_patcheval_file(rows)
    rows.write_text(json.dumps([good, good]))
    with pytest.raises(TaskFormatError, match="duplicate cve_id 'CVE-2020-1234'"):
        load_patcheval_file(rows)
    rows.write_text(json.dumps([{**good, "cve_id": "GHSA-1"}]))
    with pytest.raises(TaskFormatError, match="not a CVE id"):
        load_patcheval_file(rows)
    assert repo_name("https://github.com/a/b.git") == "b" and repo_name("https://github.com/gogs/gogs/") == "gogs"


def test_upstream_logs_parse_to_the_expected_verdicts() -> None:
    expected = json.loads((GRADING / "patcheval_logs" / "expected_verdicts.json").read_text())
    for log in sorted((GRADING / "patcheval_logs").glob("*.log")):
        cve = log.name.split(".")[0]
        text = log.read_text()
        got = grade.parse_grader_log(text)
        want = expected[cve]
        assert got["poc_result"] == want["poc_result"] and got["validation_type"] == want["validation_type"]
        assert got["strict_success"] == want["strict_success"] and got["poc_only_success"] == want["poc_only_success"]
        failure = grade.failure_type(text, 0 if want["poc_result"] else 1)
        assert failure == (None if want["poc_result"] else "validation_fail")
    assert grade.failure_type("error: patch does not apply", 1) == "apply_fail"
    assert grade.failure_type("main.go:12:3: undefined: x", 1) == "compilation_fail"
    assert grade.failure_type("", 124, timed_out=True) == "timeout"


# --- grading end to end, in real (bubblewrap) sandboxes --------------------------------------


FIX_RUN = """#!/bin/bash
# applies the candidate patch and runs the "PoC": it exploits unless the input is sanitised
set -e
cd /workspace/vuln
git apply /workspace/fix.patch
out=$(bash ./render.sh '<script>')
echo "rendered: $out"
[ "$out" != '<script>' ]
"""


def _workspace(tmp_path: Path) -> Path:
    ctx = tmp_path / "environment"
    repo = ctx / "workspace" / "vuln"
    repo.mkdir(parents=True)
    (repo / "render.sh").write_text('echo "$1"\n')
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base"], cwd=repo, check=True)
    (ctx / "workspace" / "fix-run.sh").write_text(FIX_RUN)
    (ctx / "workspace" / "llm.patch").write_text("reference patch the agent must not see\n")
    return ctx


GOOD_PATCH = """diff --git a/render.sh b/render.sh
--- a/render.sh
+++ b/render.sh
@@ -1 +1 @@
-echo "$1"
+echo "$1" | sed 's/</\\&lt;/g'
"""
NOOP_PATCH = """diff --git a/render.sh b/render.sh
--- a/render.sh
+++ b/render.sh
@@ -1 +1,2 @@
 echo "$1"
+# looked at it
"""


@pytest.fixture
def patcheval_task(tmp_path: Path):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"cve_id": "CVE-2099-0001", "cve_description": "XSS in render.sh",
                                 "repo": "https://example.invalid/org/vuln.git", "image_url": "local",
                                 "programing_language": "Python"}]))
    (task,) = load_patcheval_file(rows)
    ctx = _workspace(tmp_path)
    env = dataclasses.replace(task.environment, image=None, build_context=ctx,
                              build_steps=(BuildStep("copy", "workspace", "/workspace"),))
    return dataclasses.replace(task, environment=env, verifier_timeout_s=60)


def _local(tmp_path: Path):
    from farm.sandbox.local.sandbox import LocalSandbox

    def make(task, role: str):
        return LocalSandbox(task, root_dir=tmp_path / "sb")

    return make


@pytest.mark.bwrap
@pytest.mark.tools("git")
async def test_agent_view_hides_the_grader_payload(patcheval_task, tmp_path: Path) -> None:
    sb = _local(tmp_path)(patcheval_task, "agent")
    await sb.start()
    try:
        repo = await grade.prepare_workspace(sb, patcheval_task)
        assert repo == "/workspace/vuln"
        assert (await sb.exec("ls -A /workspace")).stdout.split() == ["vuln"]
    finally:
        await sb.close()


@pytest.mark.bwrap
@pytest.mark.tools("git")
@pytest.mark.parametrize("patch,resolved", [(GOOD_PATCH, True), (NOOP_PATCH, False), ("not a patch", False)])
async def test_fix_run_decides_in_a_fresh_sandbox(patcheval_task, tmp_path: Path, patch: str, resolved: bool) -> None:
    verdict = await grade.grade(_local(tmp_path), patcheval_task, patch)
    assert verdict.resolved is resolved and verdict.reward == (1.0 if resolved else 0.0)
    if resolved:
        assert "rendered: &lt;script>" in verdict.output and verdict.failure_type is None
    elif patch == "not a patch":
        assert verdict.failure_type in ("apply_fail", "validation_fail") and verdict.exit_code != 0
    else:
        assert "rendered: <script>" in verdict.output and verdict.failure_type == "validation_fail"


def test_each_row_loads_on_its_own_and_selection_skips_unread_rows(tmp_path: Path) -> None:
    from farm.config import load_config
    from farm.tasks.benchmark import load_benchmark_report

    good = {"cve_id": "CVE-2020-1234", "cve_description": "d", "repo": "https://github.com/a/b.git",
            "image_url": "ghcr.io/x/y:z", "programing_language": "Python"}
    rows = [good, {**good, "cve_id": "not-a-cve"}, {**good, "cve_id": "CVE-2021-9999"}]
    (tmp_path / "patcheval_verified.json").write_text(json.dumps(rows))
    base = ["benchmark=patcheval-verified", f"benchmark.path={tmp_path}"]
    loaded = load_benchmark_report(load_config(base).benchmark)
    assert [t.task_id for t in loaded.tasks] == ["CVE-2020-1234", "CVE-2021-9999"]
    (f,) = loaded.report.failures
    assert f.task == "row 1" and f.cause == "bad_value" and "'not-a-cve' is not a CVE id" in f.message
    assert {t.benchmark for t in loaded.tasks} == {"patch_eval_verified"}
    only = load_benchmark_report(load_config([*base, "benchmark.task_ids=[CVE-2021-9999]"]).benchmark)
    assert [t.task_id for t in only.tasks] == ["CVE-2021-9999"] and only.report.failures == []
