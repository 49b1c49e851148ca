"""Task factories: a ``Task`` object for sandbox and grading tests, a Harbor task directory for runs.

``make_task`` builds the task in memory (no files; a sandbox backend opens it as is);
``make_task_dir`` writes a minimal Harbor task that the local backend runs (with ``CHECK_ANSWER``
as its test), as ``benchmark.path`` reads it; ``make_task_files`` writes one from any task.toml
text, for the loading and validation tests.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from farm.tasks.model import BuildStep, Environment, Task, VerifierSpec

# a task.toml that loads: both timeouts and a prebuilt image
GOOD_TOML = '[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\ndocker_image = "python:3.12"\n'


def make_task(
    *,
    network: str = "no-network",
    image: str | None = None,
    workdir: str = "/app",
    build_steps: tuple[BuildStep, ...] = (),
    build_context: Path | None = None,
    task_id: str = "conformance",
    env: dict[str, str] | None = None,
    **env_kw: Any,
) -> Task:
    return Task(
        benchmark="conformance",
        task_id=task_id,
        instruction="",
        environment=Environment(
            image=image, workdir=workdir, env=env or {}, build_steps=build_steps, build_context=build_context, **env_kw
        ),
        verifier=VerifierSpec(),
        agent_network=network,  # type: ignore[arg-type]
        verifier_network=network,  # type: ignore[arg-type]
    )


def make_task_dir(root: Path, name: str, test_sh: str, solve_sh: str | None = "echo fixed > /app/answer.txt\n") -> Path:
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


def make_task_files(root: Path, name: str, toml: str = GOOD_TOML, *, dockerfile: str | None = None,
                    test_sh: bool = True, files: dict[str, str] | None = None) -> Path:
    """A Harbor task directory from its task.toml text (plus a Dockerfile, test.sh, other files)."""
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "task.toml").write_text(toml)
    (d / "instruction.md").write_text(f"Do {name}.\n")
    if test_sh:
        (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    if dockerfile is not None:
        (d / "environment").mkdir()
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d
