"""Load Harbor-format task directories (task.toml, instruction.md, environment/, tests/, solution/).

Field precedence follows the vendor's loader so that a task
means the same thing here as in the harness whose numbers we reproduce; per-source defaults
(timeouts, network, success marker) come in through ``HarborDefaults``. The Harbor task
schema 1.4 fields (per-phase network with ``allowed_hosts``, ``healthcheck``, a separate
verifier environment, ``[solution].env``) are parsed into the Task; ``harbor_schema`` lists
what farm does not honour yet, and :func:`load_harbor_tasks` counts those per field.

A Dockerfile is parsed only when it is the image source (no ``docker_image``): otherwise it
is kept on the Task (``environment.dockerfile``) for a backend that builds it, and only its
last WORKDIR is read.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from farm.errors import TaskFormatError
from farm.tasks.dockerfile import parse_cached, scan_workdir
from farm.tasks.harbor_schema import FILES, unhonoured_fields
from farm.tasks.loading import LoadedBenchmark, LoadFailure, LoadReport, TaskLoadError
from farm.tasks.model import Environment, Healthcheck, NetworkMode, Resources, Source, Task, VerifierSpec

_CANARY = re.compile(r"^\s*(#.*canary.*|<!--.*canary.*-->)\s*$", re.IGNORECASE)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)
_TOML_LINE = re.compile(r"at line (\d+)")
_ALLOWLIST_NOTE = "network_mode 'allowlist': no backend enforces host allowlists yet, so the phase runs with no network"


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
    if value == "allowlist":
        return "no-network"  # the safe reading until a backend enforces allowlists (warned about)
    raise TaskFormatError(
        path, f"invalid value {value!r} for {field}: expected 'public', 'no-network' or 'allowlist'"
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


def _hosts(section: dict[str, Any], where: str, path: Path) -> tuple[str, ...]:
    value = section.get("allowed_hosts") or []
    if not isinstance(value, list) or not all(isinstance(h, str) and h for h in value):
        raise TaskFormatError(path, f"invalid value {value!r} for {where}.allowed_hosts: expected a list of hostnames")
    return tuple(value)


def _healthcheck(value: Any, path: Path) -> Healthcheck | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("command"), str) or not value["command"].strip():
        raise TaskFormatError(path, f"invalid value {value!r} for environment.healthcheck: "
                                    "expected a table with a command")
    nums = {k: _number(value, k, d, "environment.healthcheck", path)
            for k, d in (("interval_sec", 5.0), ("timeout_sec", 30.0), ("start_interval_sec", 5.0))}
    start = value.get("start_period_sec", 0.0)
    retries = value.get("retries", 3)
    if isinstance(start, bool) or not isinstance(start, (int, float)) or start < 0:
        raise TaskFormatError(path, f"invalid value {start!r} for environment.healthcheck.start_period_sec")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise TaskFormatError(path, f"invalid value {retries!r} for environment.healthcheck.retries")
    return Healthcheck(command=value["command"], interval_s=nums["interval_sec"], timeout_s=nums["timeout_sec"],
                       start_period_s=float(start), start_interval_s=nums["start_interval_sec"], retries=retries)


def read_toml(toml_path: Path) -> dict[str, Any]:
    """task.toml as a dict; a syntax error names the line."""
    if not toml_path.is_file():
        raise TaskLoadError(toml_path, "missing task.toml (not a Harbor task directory)", cause="missing_file")
    try:
        return tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_LINE.search(str(exc))
        raise TaskLoadError(toml_path, f"invalid TOML: {exc}", cause="bad_toml",
                            line=int(m.group(1)) if m else None) from None
    except UnicodeDecodeError as exc:
        raise TaskLoadError(toml_path, f"not UTF-8: {exc}", cause="unreadable") from None


def task_name(data: dict[str, Any], task_dir: Path) -> str:
    """The task id: ``[task].name`` without its organisation (``terminal-bench/regex-log`` ->
    ``regex-log``), else the directory name. The full package name stays in the metadata."""
    section = data.get("task")
    name = section.get("name") if isinstance(section, dict) else None
    if name is None:
        return task_dir.name
    if not isinstance(name, str) or not name.strip("/ ").strip():
        raise TaskFormatError(task_dir / "task.toml", f"invalid value {name!r} for task.name: expected 'org/name'")
    return name.strip("/ ").rsplit("/", 1)[-1]


def _environment(env_sec: dict[str, Any], where: str, d: HarborDefaults, toml_path: Path, context: Path,
                 dockerfile: Path | None, *, need_image: bool = True) -> Environment:
    """An [environment]-shaped table (the task's, or [verifier.environment]) as an Environment."""
    image = env_sec.get("docker_image") or env_sec.get("base_image")
    build_steps: tuple = ()
    docker_env: dict[str, str] = {}
    docker_workdir: str | None = None
    if image and dockerfile is not None:
        docker_workdir = scan_workdir(dockerfile)  # the Dockerfile is not the image: do not parse it all
    elif dockerfile is not None:
        try:
            parsed = parse_cached(dockerfile)
        except TaskFormatError as exc:
            raise TaskLoadError(exc.path, str(exc)[len(exc.path) + 2:], cause="dockerfile",
                                line=LoadFailure.from_error("", exc).line) from None
        image, build_steps, docker_env, docker_workdir = parsed.image, parsed.steps, parsed.env, parsed.workdir
    elif need_image and not image:
        raise TaskLoadError(context, f"missing {context.name}/Dockerfile and no [{where}].docker_image",
                            cause="missing_file")

    if "memory_mb" in env_sec:
        memory_mb = _size_mb(env_sec["memory_mb"], f"{where}.memory_mb", toml_path)
    elif "memory" in env_sec:
        memory_mb = _size_mb(env_sec["memory"], f"{where}.memory", toml_path)
    else:
        memory_mb = d.memory_mb
    if "storage_mb" in env_sec:
        storage_mb = _size_mb(env_sec["storage_mb"], f"{where}.storage_mb", toml_path)
    elif "storage" in env_sec:
        storage_mb = _size_mb(env_sec["storage"], f"{where}.storage", toml_path)
    else:
        storage_mb = d.storage_mb
    gpus = env_sec.get("gpus") or 0
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise TaskFormatError(toml_path, f"invalid value {gpus!r} for {where}.gpus: expected a whole number >= 0")

    # task.toml env values are kept literal: expanding ${VAR} against the orchestrator's
    # environment would leak its secrets into sandboxes.
    env = {**docker_env, **_str_map(env_sec.get("env"), f"[{where}].env", toml_path)}
    workdir = env_sec.get("workdir") or docker_workdir or d.workdir
    if not str(workdir).startswith("/"):
        raise TaskFormatError(toml_path, f"invalid value {workdir!r} for {where}.workdir: must be absolute")
    return Environment(
        image=image,
        workdir=str(workdir),
        env=env,
        build_context=context if context.is_dir() else None,
        build_steps=build_steps,
        resources=Resources(
            cpus=_number(env_sec, "cpus", d.cpus, where, toml_path),
            memory_mb=memory_mb,
            storage_mb=storage_mb,
            gpus=gpus,
        ),
        build_timeout_s=_number(env_sec, "build_timeout_sec", 600.0, where, toml_path),
        dockerfile=dockerfile,
        healthcheck=_healthcheck(env_sec.get("healthcheck"), toml_path),
        allowed_hosts=_hosts(env_sec, where, toml_path),
    )


def load_harbor_task(
    task_dir: Path,
    benchmark: str,
    *,
    defaults: HarborDefaults | None = None,
    source: Source | None = None,
    report: LoadReport | None = None,
) -> Task:
    """Parse one Harbor task directory into a Task; malformed input names the file.

    ``report`` collects, per field, what this task uses that farm does not honour.
    Raises:
        TaskFormatError: (a :class:`TaskLoadError` where the cause is known) naming the file.
    """
    d = defaults or HarborDefaults()
    task_dir = Path(task_dir)
    toml_path = task_dir / "task.toml"
    data = read_toml(toml_path)
    notes = unhonoured_fields(data)
    for rel, note in FILES.items():
        if (task_dir / rel).exists():
            notes[rel] = note

    env_sec = _section(data, "environment", toml_path)
    if env_sec.get("os", "linux") != "linux":
        raise TaskLoadError(toml_path, f"environment.os = {env_sec['os']!r}: farm runs Linux tasks only",
                            cause="unsupported_layout")
    instruction_path = task_dir / "instruction.md"
    if not instruction_path.is_file():
        multi = " (a multi-step task: farm runs single-step tasks only)" if "steps" in data else ""
        raise TaskLoadError(instruction_path, f"missing instruction.md{multi}",
                            cause="unsupported_layout" if multi else "missing_file")
    instruction = instruction_path.read_text(encoding="utf-8", errors="replace")
    if d.strip_canary:
        instruction = strip_canary(instruction)

    tests_dir = task_dir / "tests"
    if not (tests_dir / "test.sh").is_file():
        raise TaskLoadError(tests_dir / "test.sh", "missing tests/test.sh (the verifier)", cause="missing_file")

    agent = _section(data, "agent", toml_path)
    verifier = _section(data, "verifier", toml_path)
    metadata = _section(data, "metadata", toml_path)
    solution_sec = _section(data, "solution", toml_path)
    task_id = task_name(data, task_dir)

    context = task_dir / "environment"
    dockerfile = context / "Dockerfile"
    if not dockerfile.is_file() and not (env_sec.get("docker_image") or env_sec.get("base_image")) \
            and any((context / f).is_file() for f in ("docker-compose.yaml", "docker-compose.yml")):
        raise TaskLoadError(context / "docker-compose.yaml", "a multi-container task (docker-compose) with no "
                            "Dockerfile or docker_image for its main service: farm cannot run it",
                            cause="unsupported_layout")
    environment = _environment(env_sec, "environment", d, toml_path, context,
                               dockerfile if dockerfile.is_file() else None)

    base_network = env_sec.get("network_mode")
    if base_network is None and "allow_internet" in env_sec:
        base_network = "public" if env_sec["allow_internet"] else "no-network"
    agent_mode = agent.get("network_mode", base_network) or d.network
    verifier_mode = verifier.get("network_mode", base_network) or d.network
    if "allowlist" in (agent_mode, verifier_mode):
        notes["network_mode=allowlist"] = _ALLOWLIST_NOTE

    # a separate verifier environment: [verifier.environment], or an image built from tests/Dockerfile
    ver_env_sec = verifier.get("environment")
    mode = verifier.get("environment_mode") or ("separate" if ver_env_sec or (tests_dir / "Dockerfile").is_file()
                                                 else "shared")
    if mode not in ("shared", "separate"):
        raise TaskFormatError(toml_path, f"invalid value {mode!r} for verifier.environment_mode: "
                                         "expected 'shared' or 'separate'")
    ver_environment = None
    if mode == "separate":
        if ver_env_sec is not None and not isinstance(ver_env_sec, dict):
            raise TaskFormatError(toml_path, "[verifier.environment] must be a table")
        tests_df = tests_dir / "Dockerfile"
        ver_environment = _environment(ver_env_sec or {}, "verifier.environment", d, toml_path, tests_dir,
                                       tests_df if tests_df.is_file() else None, need_image=False)
        if ver_environment.image is None:
            ver_environment = replace(ver_environment, image=environment.image,
                                      build_steps=environment.build_steps, dockerfile=environment.dockerfile)
        notes.setdefault("verifier.environment", "parsed into the task (a separate verifier environment); "
                                                 "not used by the graders yet")

    if report is not None:
        for name, note in notes.items():
            report.note_field(name, note)
    solution = task_dir / "solution"
    task_section = data.get("task") if isinstance(data.get("task"), dict) else {}
    meta = dict(metadata)
    if task_section.get("name"):
        meta.setdefault("task_name", task_section["name"])
    return Task(
        benchmark=benchmark,
        task_id=task_id,
        instruction=instruction,
        environment=environment,
        verifier=VerifierSpec(
            protocol="harbor",
            tests_dir=tests_dir,
            success_marker=d.success_marker,
            env=_str_map(verifier.get("env"), "[verifier].env", toml_path),
            mode=mode,
            environment=ver_environment,
            allowed_hosts=_hosts(verifier, "verifier", toml_path) or environment.allowed_hosts,
            user=None if verifier.get("user") is None else str(verifier["user"]),
        ),
        agent_timeout_s=_number(agent, "timeout_sec", d.agent_timeout_s, "agent", toml_path),
        verifier_timeout_s=_number(verifier, "timeout_sec", d.verifier_timeout_s, "verifier", toml_path),
        agent_network=_network(agent_mode, "agent.network_mode", toml_path),
        verifier_network=_network(verifier_mode, "verifier.network_mode", toml_path),
        solution_dir=solution if (solution / "solve.sh").is_file() else None,
        require_git_patch=d.require_git_patch,
        source=source or Source(url=str(task_dir.parent)),
        path=task_dir,
        metadata=meta,
        agent_allowed_hosts=_hosts(agent, "agent", toml_path) or environment.allowed_hosts,
        solution_env=_str_map(solution_sec.get("env"), "[solution].env", toml_path),
        agent_user=None if agent.get("user") is None else str(agent["user"]),
    )


_FIELD = re.compile(r"for \[?([a-z_]+(?:\.[a-z_]+)+)\]?[: ]|^\[([a-z_.]+)\]")


def toml_line(path: Path, message: str) -> int | None:
    """The line of task.toml that sets the field a message names (``for agent.timeout_sec:``)."""
    m = _FIELD.search(message)
    if not m:
        return None
    parts = (m.group(1) or m.group(2)).split(".")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    table: list[str] = []
    for no, line in enumerate(lines, 1):
        text = line.strip()
        if text.startswith("["):
            table = text.strip("[] ").split(".")
            if table == parts:
                return no
            continue
        key = text.split("=", 1)[0].strip()
        if "=" in text and table + [key] == parts[: len(table) + 1] and len(table) + 1 <= len(parts):
            return no
    return None


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


def harbor_candidates(root: Path) -> list[Path]:
    """The task directories under ``root`` (or ``root`` itself), found without parsing any."""
    root = Path(root)
    if not root.is_dir():
        raise TaskFormatError(root, "not a directory of Harbor tasks")
    if is_task_dir(root):
        return [root]
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and is_task_dir(p))
    if not dirs:
        raise TaskFormatError(root, "contains no Harbor task directories (no */task.toml)")
    return dirs


def declared_id(task_dir: Path) -> str | None:
    """The id a task directory will get, reading only its task.toml (None if it cannot be read)."""
    try:
        return task_name(read_toml(task_dir / "task.toml"), task_dir)
    except TaskFormatError:
        return None


def load_harbor_tasks(
    dirs: Iterable[Path],
    benchmark: str,
    *,
    defaults: HarborDefaults | None = None,
    source: Source | None = None,
) -> LoadedBenchmark:
    """Load each directory on its own: the tasks that load, and a report of the ones that do not."""
    report = LoadReport(benchmark=benchmark)
    tasks: list[Task] = []
    seen: dict[str, Path] = {}
    for task_dir in dirs:
        report.candidates += 1
        try:
            task = load_harbor_task(task_dir, benchmark, defaults=defaults, source=source, report=report)
        except TaskFormatError as exc:
            failure = LoadFailure.from_error(task_dir.name, exc)
            if failure.line is None and failure.file.endswith("task.toml"):
                failure = replace(failure, line=toml_line(Path(failure.file), failure.message))
            report.failures.append(failure)
            continue
        if task.task_id in seen:
            report.failures.append(LoadFailure(
                task_dir.name, str(task_dir / "task.toml"), None, "duplicate_id",
                f"task id {task.task_id!r} is also the id of {seen[task.task_id]}"))
            continue
        seen[task.task_id] = task_dir
        tasks.append(task)
    return LoadedBenchmark(tasks, report)


def load_harbor_dir(
    root: Path,
    benchmark: str,
    *,
    defaults: HarborDefaults | None = None,
    source: Source | None = None,
) -> list[Task]:
    """Every task under ``root``, strictly: the first task that fails to load is the error.

    (Commands load through ``farm.tasks.benchmark``, which reports failures and goes on.)
    """
    loaded = load_harbor_tasks(harbor_candidates(root), benchmark, defaults=defaults, source=source)
    if loaded.report.failures:
        f = loaded.report.failures[0]
        raise TaskLoadError(f.file, f.message, cause=f.cause, line=f.line)
    return loaded.tasks


def with_overrides(task: Task, **changes: Any) -> Task:
    return replace(task, **changes)
