"""Where the per-instance scripts come from (``benchmark.pro_scripts``): a checkout of
SWE-bench_Pro-os, a bare clone or snapshot read at HEAD, or a plain folder; and the real Pro
fixture (../shared/fixtures/harbor/swebench-pro) materialized from its row and scripts, giving the
Harbor copy's trial key and its byte-identical run_script.sh and parser.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from farm.config import load_config
from farm.errors import ConfigError
from farm.tasks import catalog
from farm.tasks.benchmark import load_benchmark_report
from farm.tasks.harbor import load_harbor_task
from farm.tasks.swebench_pro.load import load_pro_rows
from farm.tasks.swebench_pro.rows import check_row
from farm.tasks.swebench_pro.scripts import ProScripts, ScriptsError
from tests.shared import shared_path

IID = "instance_acme__calc-" + "a" * 40 + "-vnan"
FIXTURE = "instance_gravitational__teleport-5dca072bb4301f4579a15364fcf37cc0c39f7f6c"


def _official_layout(root: Path) -> Path:
    (root / "run_scripts" / IID).mkdir(parents=True)
    (root / "run_scripts" / IID / "run_script.sh").write_text("echo run\n")
    (root / "run_scripts" / IID / "parser.py").write_text("# parser\n")
    for kind, env in (("base_dockerfile", "ENV LANG=C.UTF-8"), ("instance_dockerfile", 'ENV PYTEST_ADDOPTS="-v"')):
        (root / "dockerfiles" / kind / IID).mkdir(parents=True)
        (root / "dockerfiles" / kind / IID / "Dockerfile").write_text(f"FROM x\n{env}\nRUN true\n")
    return root


def test_a_checkout_gives_the_scripts_and_the_dockerfiles_env(tmp_path: Path) -> None:
    scripts = ProScripts.at(_official_layout(tmp_path / "pro"))
    assert scripts.scripts(IID) == {"run_script.sh": "echo run\n", "parser.py": "# parser\n"}
    assert scripts.env_lines(IID) == ["export LANG=C.UTF-8", 'export PYTEST_ADDOPTS="-v"']


def test_a_bare_clone_is_read_at_head_and_its_commit_recorded(tmp_path: Path) -> None:
    work = _official_layout(tmp_path / "work")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@x"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "scripts"], check=True)
    head = subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    bare = tmp_path / "snap" / "repo"  # what a snapshot fetch leaves: <dir>/repo, a git directory
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    scripts = ProScripts.at(bare.parent)
    assert scripts.git_dir == bare and scripts.revision() == head
    assert scripts.scripts(IID)["parser.py"] == "# parser\n"
    assert scripts.env_lines(IID)[0] == "export LANG=C.UTF-8"
    with pytest.raises(ScriptsError, match="no run_scripts/instance_other/run_script.sh"):
        scripts.scripts("instance_other")


def test_a_git_repository_without_run_scripts_is_refused(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "empty.git")], check=True)
    with pytest.raises(ConfigError, match=r"'benchmark.pro_scripts'.*no run_scripts/ at HEAD"):
        ProScripts.at(tmp_path / "empty.git")


def test_a_folder_with_no_parser_is_refused_by_key(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    with pytest.raises(ConfigError, match=r"invalid value .* for 'benchmark.pro_scripts': no run_scripts/"):
        ProScripts.at(tmp_path)


def _fixture_row(copy: Path) -> dict:
    """The fixture's config.json, which has only what Harbor's test.sh reads, completed into a row
    with the copy's own gold patch (from solve.sh) and instruction."""
    config = json.loads((copy / "tests" / "config.json").read_text(encoding="utf-8"))
    solve = (copy / "solution" / "solve.sh").read_text(encoding="utf-8")
    patch = solve.split("<< '__SOLUTION__'\n", 1)[1].split("\n__SOLUTION__", 1)[0]
    row = {k: v for k, v in config.items() if not k.startswith("_")}
    row.update(patch=patch, test_patch="", problem_statement=(copy / "instruction.md").read_text(encoding="utf-8"))
    return row


def test_the_real_fixture_materializes_as_the_harbor_copy(tmp_path: Path) -> None:
    copy = shared_path("fixtures", "harbor", "swebench-pro", FIXTURE)
    config = json.loads((copy / "tests" / "config.json").read_text(encoding="utf-8"))
    row = _fixture_row(copy)
    patch = row["patch"]
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    scripts = tmp_path / "scripts" / FIXTURE
    scripts.mkdir(parents=True)
    for name in ("run_script.sh", "parser.py"):
        shutil.copy(copy / "tests" / name, scripts / name)
    src = catalog.get_source("swebench_pro")
    loaded = load_pro_rows(rows, src, scripts_dir=str(scripts.parent), select=None, cache_dir=str(tmp_path / "c"))
    assert not loaded.report.failures
    task = loaded.tasks[0]
    harbor = load_harbor_task(copy, src.name, defaults=src.harbor_defaults())
    assert (task.benchmark, task.task_id) == (harbor.benchmark, harbor.task_id)
    for name in ("run_script.sh", "parser.py"):
        ours = task.verifier.tests_dir / name  # type: ignore[operator]
        assert ours.read_bytes() == (copy / "tests" / name).read_bytes()
    test_sh = (task.verifier.tests_dir / "test.sh").read_text()  # type: ignore[operator]
    # the last line of before_repo_set_cmd, as Harbor's test.sh and the official grader run it
    assert check_row(row, "r")["before_repo_set_cmd"].strip().split("\n")[-1].strip() in test_sh
    selected = ",".join(config["selected_test_files_to_run"])
    assert f"bash /tests/run_script.sh '{selected}' >" in test_sh
    # the fixture's row has no dockerhub_tag: the official naming rule gives the image Harbor's copy names
    assert task.environment.dockerfile is not None and harbor.environment.dockerfile is not None
    froms = [[ln for ln in d.read_text().splitlines() if ln.startswith("FROM ")]
             for d in (task.environment.dockerfile, harbor.environment.dockerfile)]
    assert froms[0] == froms[1] and len(froms[0]) == 1
    assert patch.rstrip("\n") in (task.solution_dir / "solve.sh").read_text()  # type: ignore[operator]


def _load_dir(tmp_path: Path, directory: Path) -> list:
    cfg = load_config(["benchmark=swebench-pro", f"benchmark.path={directory}",
                       f"benchmark.cache_dir={tmp_path / 'cache'}"])
    return load_benchmark_report(cfg.benchmark).tasks


def test_a_harbor_copy_with_a_partial_row_keeps_harbors_verifier(tmp_path: Path) -> None:
    copy = shared_path("fixtures", "harbor", "swebench-pro", FIXTURE)
    (task,) = _load_dir(tmp_path, copy.parent)
    assert task.task_id == FIXTURE and task.verifier.protocol == "harbor" and "swebench_pro" not in task.metadata


def test_a_harbor_copy_holding_the_whole_row_is_graded_by_its_parser_on_the_host(tmp_path: Path) -> None:
    copy = shared_path("fixtures", "harbor", "swebench-pro", FIXTURE)
    mine = tmp_path / "harbor" / FIXTURE
    shutil.copytree(copy, mine)
    (mine / "tests" / "config.json").write_text(json.dumps(_fixture_row(copy)))
    (task,) = _load_dir(tmp_path, mine.parent)
    assert (task.task_id, task.verifier.protocol) == (FIXTURE, "swebench_pro")
    assert task.metadata["swebench_pro"]["fail_to_pass"][0] == "TestMTLSClientCAs"
    assert task.environment.dockerfile == mine / "environment" / "Dockerfile"  # the copy's own image recipe
    assert task.verifier.tests_dir is not None
    assert (task.verifier.tests_dir / "parser.py").read_bytes() == (copy / "tests" / "parser.py").read_bytes()
    assert "bash /tests/run_script.sh" in (task.verifier.tests_dir / "test.sh").read_text()
