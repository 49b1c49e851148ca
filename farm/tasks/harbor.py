"""Load Harbor-format task directories (task.toml, instruction.md, environment/, tests/, solution/).

Field precedence follows the vendor's loader (reference/harbor-tasks.md §0) so that a task
means the same thing here as in the harness whose numbers we reproduce; per-source defaults
(timeouts, network, success marker) come in through ``HarborDefaults``.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from farm.errors import TaskFormatError
from farm.tasks.dockerfile import parse_dockerfile
from farm.tasks.model import Environment, NetworkMode, Resources, Source, Task, VerifierSpec

_CANARY = re.compile(r"^\s*(#.*canary.*|<!--.*canary.*-->)\s*$", re.IGNORECASE)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class HarborDefaults:
    """What a source assumes when task.toml is silent (differs per benchmark)."""

    workdir: str = "/app"
    agent_timeout_s: float = 3600.0
    verifier_timeout_s: float = 600.0
    network: NetworkMode = "public"
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int = 10240
    success_marker: str | None = None
    require_git_patch: bool = True
    strip_canary: bool = True


def strip_canary(text: str) -> str:
    """Drop leading canary comment lines (and the blank lines after them), as Harbor does."""
    lines = text.splitlines(keepends=True)
    i = 0
    stripped = False
    while i < len(lines) and _CANARY.match(lines[i]):
        i += 1
        stripped = True
    if stripped:
        while i < len(lines) and not lines[i].strip():
            i += 1
    return "".join(lines[i:])


def _size_mb(value: Any, field: str, path: Path) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    m = _SIZE.match(str(value))
    if not m:
        raise TaskFormatError(path, f"invalid value {value!r} for {field}: expected e.g. '2G' or '512M'")
    number, unit = float(m.group(1)), m.group(2).upper()
    factor = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    return max(1, int(number * factor))


def _network(value: Any, field: str, path: Path) -> NetworkMode:
    if value in ("public", "no-network"):
        return value
    raise TaskFormatError(
        path, f"invalid value {value!r} for {field}: farm supports 'public' and 'no-network'"
    )


def _section(data: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise TaskFormatError(path, f"[{name}] must be a table, got {type(value).__name__}")
    return value


def _number(section: dict[str, Any], key: str, default: float, where: str, path: Path) -> float:
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TaskFormatError(path, f"invalid value {value!r} for {where}.{key}: expected a positive number")
    return float(value)


def _str_map(value: Any, where: str, path: Path) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TaskFormatError(path, f"{where} must be a table of strings")
    return {str(k): str(v) for k, v in value.items()}


def load_harbor_task(
    task_dir: Path,
    benchmark: str,
    *,
    defaults: HarborDefaults | None = None,
    source: Source | None = None,
) -> Task:
    """Parse one Harbor task directory into a Task; malformed input names the file."""
    d = defaults or HarborDefaults()
    task_dir = Path(task_dir)
    toml_path = task_dir / "task.toml"
    if not toml_path.is_file():
        raise TaskFormatError(toml_path, "missing task.toml (not a Harbor task directory)")
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(toml_path, f"invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise TaskFormatError(toml_path, f"not UTF-8: {exc}") from None

    instruction_path = task_dir / "instruction.md"
    if not instruction_path.is_file():
        raise TaskFormatError(instruction_path, "missing instruction.md")
    instruction = instruction_path.read_text(encoding="utf-8", errors="replace")
    if d.strip_canary:
        instruction = strip_canary(instruction)

    tests_dir = task_dir / "tests"
    if not (tests_dir / "test.sh").is_file():
        raise TaskFormatError(tests_dir / "test.sh", "missing tests/test.sh (the verifier)")

    agent = _section(data, "agent", toml_path)
    verifier = _section(data, "verifier", toml_path)
    env_sec = _section(data, "environment", toml_path)
    metadata = _section(data, "metadata", toml_path)

    image = env_sec.get("docker_image") or env_sec.get("base_image")
    dockerfile = task_dir / "environment" / "Dockerfile"
    build_steps: tuple = ()
    docker_env: dict[str, str] = {}
    docker_workdir: str | None = None
    if dockerfile.is_file():
        parsed = parse_dockerfile(dockerfile)
        docker_workdir = parsed.workdir
        if not image:
            image = parsed.image
            build_steps = parsed.steps
            docker_env = parsed.env
    elif not image:
        raise TaskFormatError(
            task_dir / "environment", "missing environment/Dockerfile and no [environment].docker_image"
        )

    base_network = env_sec.get("network_mode")
    if base_network is None and "allow_internet" in env_sec:
        base_network = "public" if env_sec["allow_internet"] else "no-network"
    agent_network = agent.get("network_mode", base_network) or d.network
    verifier_network = verifier.get("network_mode", base_network) or d.network

    if "memory_mb" in env_sec:
        memory_mb = _size_mb(env_sec["memory_mb"], "environment.memory_mb", toml_path)
    elif "memory" in env_sec:
        memory_mb = _size_mb(env_sec["memory"], "environment.memory", toml_path)
    else:
        memory_mb = d.memory_mb
    if "storage_mb" in env_sec:
        storage_mb = _size_mb(env_sec["storage_mb"], "environment.storage_mb", toml_path)
    elif "storage" in env_sec:
        storage_mb = _size_mb(env_sec["storage"], "environment.storage", toml_path)
    else:
        storage_mb = d.storage_mb

    # task.toml env values are kept literal: expanding ${VAR} against the orchestrator's
    # environment would leak its secrets into sandboxes (leaf-harness.md §9.15).
    env = {**docker_env, **_str_map(env_sec.get("env"), "[environment].env", toml_path)}
    workdir = env_sec.get("workdir") or docker_workdir or d.workdir
    if not str(workdir).startswith("/"):
        raise TaskFormatError(toml_path, f"invalid value {workdir!r} for environment.workdir: must be absolute")

    environment = Environment(
        image=image,
        workdir=str(workdir),
        env=env,
        build_context=(task_dir / "environment") if (task_dir / "environment").is_dir() else None,
        build_steps=build_steps,
        resources=Resources(
            cpus=_number(env_sec, "cpus", d.cpus, "environment", toml_path),
            memory_mb=memory_mb,
            storage_mb=storage_mb,
        ),
        build_timeout_s=_number(env_sec, "build_timeout_sec", 600.0, "environment", toml_path),
    )
    solution = task_dir / "solution"
    return Task(
        benchmark=benchmark,
        task_id=task_dir.name,
        instruction=instruction,
        environment=environment,
        verifier=VerifierSpec(
            protocol="harbor",
            tests_dir=tests_dir,
            success_marker=d.success_marker,
            env=_str_map(verifier.get("env"), "[verifier].env", toml_path),
        ),
        agent_timeout_s=_number(agent, "timeout_sec", d.agent_timeout_s, "agent", toml_path),
        verifier_timeout_s=_number(verifier, "timeout_sec", d.verifier_timeout_s, "verifier", toml_path),
        agent_network=_network(agent_network, "agent.network_mode", toml_path),
        verifier_network=_network(verifier_network, "verifier.network_mode", toml_path),
        solution_dir=solution if (solution / "solve.sh").is_file() else None,
        require_git_patch=d.require_git_patch,
        source=source or Source(url=str(task_dir.parent)),
        path=task_dir,
        metadata=dict(metadata),
    )


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


def load_harbor_dir(
    root: Path,
    benchmark: str,
    *,
    defaults: HarborDefaults | None = None,
    source: Source | None = None,
) -> list[Task]:
    """Every child directory with a task.toml is a task (or ``root`` itself, if it is one)."""
    root = Path(root)
    if not root.is_dir():
        raise TaskFormatError(root, "not a directory of Harbor tasks")
    if is_task_dir(root):
        return [load_harbor_task(root, benchmark, defaults=defaults, source=source)]
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and is_task_dir(p))
    if not dirs:
        raise TaskFormatError(root, "contains no Harbor task directories (no */task.toml)")
    return [load_harbor_task(p, benchmark, defaults=defaults, source=source) for p in dirs]


def with_overrides(task: Task, **changes: Any) -> Task:
    return replace(task, **changes)
