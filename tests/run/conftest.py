from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


def make_task(root: Path, name: str, test_sh: str, solve_sh: str | None = "echo fixed > /app/answer.txt\n") -> Path:
    """A minimal Harbor task runnable by the local backend."""
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "task.toml").write_text(textwrap.dedent("""\
        version = "1.0"
        [agent]
        timeout_sec = 60
        network_mode = "no-network"
        [verifier]
        timeout_sec = 30
        network_mode = "no-network"
        [environment]
        cpus = 1
        memory = "1G"
    """))
    (d / "instruction.md").write_text("Write 'fixed' into /app/answer.txt.\n")
    (d / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /app\n"
        "RUN git init -q && echo seed > seed.txt && git add -A && "
        "git -c user.name=t -c user.email=t@example.invalid commit -qm init\n"
    )
    (d / "tests" / "test.sh").write_text(test_sh)
    if solve_sh is not None:
        (d / "solution").mkdir()
        (d / "solution" / "solve.sh").write_text(solve_sh)
    return d


CHECK_ANSWER = (
    "#!/bin/bash\nif grep -qx fixed /app/answer.txt 2>/dev/null; then echo 1 > /logs/verifier/reward.txt; "
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    make_task(root, "write-answer", CHECK_ANSWER)
    make_task(root, "no-reward", "#!/bin/bash\necho 'tests ran but wrote nothing'\n")
    return root
