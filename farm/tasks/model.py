"""The Task contract: everything a sandbox, an agent and a grader need to know about one task.

Tasks are frozen so that a task object can be hashed, shared across trials and shipped to
Ray workers without anybody mutating it on the way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

NetworkMode = Literal["public", "no-network"]


@dataclass(frozen=True)
class Resources:
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int = 10240
    pids: int = 4096


@dataclass(frozen=True)
class BuildStep:
    """One interpreted Dockerfile instruction that the sandbox replays on start.

    kind: ``workdir`` (arg = absolute path), ``env`` (key, value), ``copy`` (src relative to the
    build context, dest absolute), ``run`` (shell command, executed in the current workdir).
    """

    kind: Literal["workdir", "env", "copy", "run"]
    arg: str
    value: str = ""


@dataclass(frozen=True)
class Environment:
    image: str | None = None  # the container image (FROM or docker_image), digest when known
    workdir: str = "/app"
    env: Mapping[str, str] = field(default_factory=dict)
    build_context: Path | None = None  # the task's environment/ directory
    build_steps: tuple[BuildStep, ...] = ()
    resources: Resources = field(default_factory=Resources)
    build_timeout_s: float = 600.0


@dataclass(frozen=True)
class VerifierSpec:
    """How the task is graded: a protocol name and where its payload lives on the host."""

    protocol: str = "harbor"  # "harbor" (tests/test.sh + reward file) | "patcheval"
    tests_dir: Path | None = None
    success_marker: str | None = None  # e.g. SWE-bench Verified's "SWEBench results ends here"
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Source:
    url: str = ""
    revision: str = ""
    subpath: str = ""


@dataclass(frozen=True)
class Task:
    benchmark: str
    task_id: str
    instruction: str
    environment: Environment
    verifier: VerifierSpec
    agent_timeout_s: float = 3600.0
    verifier_timeout_s: float = 600.0
    agent_network: NetworkMode = "public"
    verifier_network: NetworkMode = "public"
    solution_dir: Path | None = None  # contains solve.sh, for the oracle
    require_git_patch: bool = True
    source: Source = field(default_factory=Source)
    path: Path | None = None  # the task directory, when it came from one
    metadata: Mapping[str, object] = field(default_factory=dict)

    @property
    def workdir(self) -> str:
        return self.environment.workdir
