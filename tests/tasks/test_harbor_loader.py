from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from farm.errors import TaskFormatError
from farm.tasks.dockerfile import parse_dockerfile
from farm.tasks.harbor import HarborDefaults, load_harbor_dir, load_harbor_task, strip_canary


def test_every_harbor_fixture_loads(harbor_dir: Path):
    root = harbor_dir
    loaded = {}
    for bench in ("terminal-bench-2", "swebench-verified", "swebench-pro"):
        for task in load_harbor_dir(root / bench, bench):
            loaded[task.task_id] = task
    assert len(loaded) == 6
    fix = loaded["fix-git"]
    assert fix.environment.image == "alexgshaw/fix-git:20251031"  # docker_image wins over FROM
    assert fix.workdir == "/app/personal-site"  # last WORKDIR of the Dockerfile
    assert fix.agent_timeout_s == 900 and fix.verifier_timeout_s == 900
    assert fix.environment.resources.memory_mb == 2048
    assert fix.solution_dir is not None and (fix.solution_dir / "solve.sh").is_file()
    dj = loaded["django__django-13401"]
    assert dj.environment.image.startswith("swebench/sweb.eval.x86_64.django_1776_django-13401")
    assert dj.workdir == "/testbed"
    assert dj.environment.resources.memory_mb == 4096
    assert [s.kind for s in dj.environment.build_steps] == ["workdir", "run", "run"]
    assert dj.solution_dir is None
    assert "canary" not in dj.instruction.lower().splitlines()[0]


def test_per_source_defaults_apply(harbor_dir: Path):
    d = HarborDefaults(success_marker="SWEBench results ends here", network="no-network")
    task = load_harbor_task(harbor_dir / "swebench-verified/django__django-14404", "swebench_verified", defaults=d)
    assert task.verifier.success_marker == "SWEbench results ends here".replace("SWEbench", "SWEBench")
    assert task.agent_network == "no-network"


def test_strip_canary_keeps_the_body():
    text = "# BENCHMARK DATA SHOULD NEVER APPEAR. canary GUID 123\n\nFix the bug.\n"
    assert strip_canary(text) == "Fix the bug.\n"
    assert strip_canary("Fix the bug.\n# canary later\n") == "Fix the bug.\n# canary later\n"


def _copy_task(harbor_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "regex-log"
    shutil.copytree(harbor_dir / "terminal-bench-2/regex-log", dst)
    return dst


def test_missing_test_sh_names_the_file(harbor_dir: Path, tmp_path: Path):
    task = _copy_task(harbor_dir, tmp_path)
    (task / "tests/test.sh").unlink()
    with pytest.raises(TaskFormatError, match=r"tests/test.sh"):
        load_harbor_task(task, "x")


def test_bad_toml_names_the_file(harbor_dir: Path, tmp_path: Path):
    task = _copy_task(harbor_dir, tmp_path)
    (task / "task.toml").write_text("[agent\ntimeout_sec = 1\n")
    with pytest.raises(TaskFormatError, match=r"task.toml: invalid TOML"):
        load_harbor_task(task, "x")


def test_wrong_types_in_toml_name_the_field(harbor_dir: Path, tmp_path: Path):
    task = _copy_task(harbor_dir, tmp_path)
    (task / "task.toml").write_text('[agent]\ntimeout_sec = "soon"\n[environment]\ndocker_image = "x"\n')
    with pytest.raises(TaskFormatError, match=r"agent.timeout_sec"):
        load_harbor_task(task, "x")
    (task / "task.toml").write_text('[environment]\ndocker_image = "x"\nnetwork_mode = "open"\n')
    with pytest.raises(TaskFormatError, match=r"'open' for agent.network_mode"):
        load_harbor_task(task, "x")


def test_unknown_dockerfile_instruction_names_the_file_and_line(tmp_path: Path):
    df = tmp_path / "Dockerfile"
    df.write_text("FROM python:3.11-slim\nWORKDIR /app\nFETCH https://example.invalid/x.tgz /app/\n")
    with pytest.raises(TaskFormatError, match=r"Dockerfile: line 3: unknown Dockerfile instruction FETCH"):
        parse_dockerfile(df)
    df.write_text("WORKDIR /app\nFROM b\n")
    with pytest.raises(TaskFormatError, match="line 1: WORKDIR before FROM"):
        parse_dockerfile(df)


def test_dockerfile_steps_follow_the_file(tmp_path: Path):
    df = tmp_path / "Dockerfile"
    df.write_text(
        "# comment\nFROM python:3.11-slim\nWORKDIR /app\nENV A=1 B=\"two words\"\nCOPY setup.sh ./\n"
        "RUN echo one && \\\n    echo two\nWORKDIR sub\nCMD [\"bash\"]\n"
    )
    parsed = parse_dockerfile(df)
    assert parsed.image == "python:3.11-slim" and parsed.workdir == "/app/sub"
    assert parsed.env == {"A": "1", "B": "two words"}
    kinds = [(s.kind, " ".join(s.arg.split()), s.value) for s in parsed.steps]
    assert kinds == [
        ("workdir", "/app", ""), ("env", "A", "1"), ("env", "B", "two words"),
        ("copy", "setup.sh", "/app/"), ("run", "echo one && echo two", ""), ("workdir", "/app/sub", ""),
    ]


def test_a_directory_without_tasks_is_an_error(tmp_path: Path):
    with pytest.raises(TaskFormatError, match="no Harbor task"):
        load_harbor_dir(tmp_path, "x")
