"""The Task contract: everything a sandbox, an agent and a grader need to know about one task.

Tasks are frozen so that a task object can be hashed, shared across trials and shipped to
Ray workers without anybody mutating it on the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

NetworkMode = Literal["public", "no-network"]


@dataclass(frozen=True)
class Resources:
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int = 10240
    pids: int = 4096
    gpus: int = 0  # [environment].gpus; backends that cannot attach GPUs refuse gpus > 0


@dataclass(frozen=True)
class BuildStep:
    """One interpreted Dockerfile instruction that the sandbox replays on start.

    kind: ``workdir`` (arg = absolute path), ``env`` (key, value), ``copy`` (src relative to the
    build context, dest absolute), ``run`` (shell command, executed in the current workdir).
    """

    kind: Literal["workdir", "env", "copy", "run"]
    arg: str
    value: str = ""
    line: int = 0  # the Dockerfile line it came from (0: not from a Dockerfile)
    from_stage: str = ""  # copy: COPY --from=<stage or image>; the source is not the build context
    flags: tuple[str, ...] = ()  # builder flags replay cannot honour (RUN --mount=type=bind, ADD URL, ...)
    build_only: bool = False  # env: an ARG, set while building but not in the running container


@dataclass(frozen=True)
class Healthcheck:
    """[environment].healthcheck (Harbor task schema 1.4): must pass before the agent starts."""

    command: str
    interval_s: float = 5.0
    timeout_s: float = 30.0
    start_period_s: float = 0.0
    start_interval_s: float = 5.0
    retries: int = 3


@dataclass(frozen=True)
class Environment:
    image: str | None = None  # the container image (FROM or docker_image), digest when known
    workdir: str = "/app"
    env: Mapping[str, str] = field(default_factory=dict)
    build_context: Path | None = None  # the task's environment/ directory
    build_steps: tuple[BuildStep, ...] = ()
    resources: Resources = field(default_factory=Resources)
    build_timeout_s: float = 600.0
    dockerfile: Path | None = None  # environment/Dockerfile, when the task has one (parsed lazily)
    healthcheck: Healthcheck | None = None
    allowed_hosts: tuple[str, ...] = ()  # [environment].allowed_hosts (network_mode = "allowlist")


@dataclass(frozen=True)
class VerifierSpec:
    """How the task is graded: a protocol name and where its payload lives on the host."""

    protocol: str = "harbor"  # "harbor" (tests/test.sh + reward file) | "patcheval"
    tests_dir: Path | None = None
    success_marker: str | None = None  # e.g. SWE-bench Verified's "SWEBench results ends here"
    env: Mapping[str, str] = field(default_factory=dict)
    # [verifier].environment_mode: "shared" runs test.sh in the agent's sandbox; "separate" in
    # a fresh one built from ``environment`` ([verifier.environment] or tests/Dockerfile)
    mode: Literal["shared", "separate"] = "shared"
    environment: Environment | None = None
    allowed_hosts: tuple[str, ...] = ()  # [verifier].allowed_hosts
    user: str | None = None


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
    agent_allowed_hosts: tuple[str, ...] = ()  # [agent].allowed_hosts (network_mode = "allowlist")
    solution_env: Mapping[str, str] = field(default_factory=dict)  # [solution].env, for the oracle
    agent_user: str | None = None  # [agent].user (None: the image's default user)

    @property
    def workdir(self) -> str:
        return self.environment.workdir


def with_networks(task: Task, agent: str | None, verifier: str | None) -> Task:
    """``task`` with its agent / verifier network replaced where given (``benchmark.agent_network``
    / ``benchmark.verifier_network``; None keeps the task's own setting, e.g. Leaf's registry's
    ``public`` for SWE-bench agents)."""
    changes = {k: v for k, v in (("agent_network", agent), ("verifier_network", verifier))
               if v is not None and v != getattr(task, k)}
    return replace(task, **changes) if changes else task
