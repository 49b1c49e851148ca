"""PatchEval Verified: rows of patcheval_verified.json (not Harbor) as farm Tasks.

Each row is one CVE with a prebuilt image whose /workspace holds the vulnerable repository
next to the grader's payload (fix-run.sh, the reference patch, ...). The agent works with no
network; grading applies its patch in a fresh container and runs fix-run.sh
(farm/grade/patcheval.py). Fields and limits follow the vendor's loader.

The benchmark publishes a second file for agents, its SWE-agent dataset (``cve_id``,
``work_dir``, ``problem_statement``; upstream ``exp_agent/sweagent/dataset.jsonl``). Where it lies
beside the records it is joined by CVE: ``work_dir`` names the repository inside the image
(the first place the repository is looked for), and the problem statement is kept on the task.
The agent's instruction stays the vendor harness's, built from the CVE description: the
problem statement also names the vulnerable lines, which the vendor's agent was not told.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from farm.errors import TaskFormatError
from farm.tasks.loading import LoadedBenchmark, LoadFailure, LoadReport
from farm.tasks.model import Environment, Resources, Source, Task, VerifierSpec

WORKSPACE = "/workspace"
_CVE = re.compile(r"^CVE-\d{4}-\d{4,}$")
# the three languages PatchEval has; its grader's failure heuristics are per language
LANGUAGES = ("Go", "JavaScript", "Python")
# an image reference as docker takes it: no blanks, no scheme
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$", re.I)
# the agent dataset beside the records (as ../shared has it), or where an upstream checkout
# keeps it relative to patcheval/datasets
AGENT_DATASET_NAMES = ("sweagent_dataset.jsonl", "../../exp_agent/sweagent/dataset.jsonl")

INSTRUCTION = """\
Fix the security vulnerability described below in the repository under {workspace}.

{cve_id}: {description}

The repository is somewhere under {workspace}: find its git root first and keep every file \
path you use inside it. Change the source code so that the vulnerability can no longer be \
exploited while the existing behaviour stays intact. Do not search the web or use network \
commands to look up this CVE, its advisory or the upstream fix.
"""


def _rows(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskFormatError(path, f"cannot read PatchEval rows: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, list):
        return data
    rows = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise TaskFormatError(f"{path}:{no}", f"neither a JSON list nor JSON lines: {e}") from None
    return rows


def _str(row: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = row.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise TaskFormatError(where, f"field {key!r}: expected a non-empty string, got {value!r:.80}")
    return value.strip()


def repo_name(repo_url: str) -> str:
    """Stem of the repository URL's last path component (https://github.com/a/b.git -> b)."""
    last = urlparse(repo_url).path.rstrip("/").rsplit("/", 1)[-1]
    return last[:-4] if last.endswith(".git") else last


def _language(row: dict[str, Any], where: str) -> str:
    # the released files spell it 'programing_language'; later docs 'programming_language'
    key = "programming_language" if "programming_language" in row and "programing_language" not in row \
        else "programing_language"
    value = row.get(key)
    if value not in LANGUAGES:
        raise TaskFormatError(where, f"field {key!r}: expected one of {list(LANGUAGES)}, got {value!r:.80}")
    return str(value)


def _optional(row: dict[str, Any], key: str, where: str, kind: type, item: type | None = None) -> Any:
    """``row[key]`` when present: of ``kind`` (a list's items of ``item``), else an error naming it."""
    value = row.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind) or (item is not None and not all(isinstance(v, item) for v in value)):
        want = f"a list of {item.__name__}" if item is not None else f"a {kind.__name__}"
        raise TaskFormatError(where, f"field {key!r}: expected {want}, got {value!r:.80}")
    return value


def _repo(row: dict[str, Any], where: str) -> str:
    repo = _str(row, "repo", where)
    url = urlparse(repo)
    if url.scheme not in ("http", "https") or not repo_name(repo):
        raise TaskFormatError(where, f"field 'repo': expected the repository's https URL, got {repo!r:.80}")
    return repo


def _work_dir(row: dict[str, Any], where: str) -> str:
    """The agent dataset's ``work_dir``: the repository's directory inside the image."""
    value = _str(row, "work_dir", where)
    path = PurePosixPath(value)
    if not path.is_relative_to(WORKSPACE) or ".." in path.parts or str(path) != value.rstrip("/"):
        raise TaskFormatError(where, f"field 'work_dir': expected a directory under {WORKSPACE}, got {value!r:.80}")
    return str(path)


def task_from_row(row: Any, where: str, benchmark: str = "patch_eval_verified",
                  source: Source | None = None, agent: tuple[str, Any] | None = None) -> Task:
    """One record as a Task; ``agent``: (where, row) of its agent dataset row, if joined."""
    if not isinstance(row, dict):
        raise TaskFormatError(where, f"expected a JSON object, got {type(row).__name__}")
    cve_id = _str(row, "cve_id", where)
    where = f"{where} ({cve_id})"
    if not _CVE.match(cve_id):
        raise TaskFormatError(where, f"field 'cve_id': {cve_id!r} is not a CVE id")
    description = _str(row, "cve_description", where)
    image = _str(row, "image_url", where)
    if not _IMAGE.match(image):
        raise TaskFormatError(where, f"field 'image_url': expected an image reference, got {image!r:.80}")
    repo = _repo(row, where)
    language = _language(row, where)
    cwe = _optional(row, "cwe_info", where, dict)
    fix_commits = _optional(row, "patch_url", where, list, str)
    for key in ("vul_func", "fix_func"):
        _optional(row, key, where, list, dict)
    joined: dict[str, object] = {}
    if agent is not None:
        agent_where, agent_row = agent
        agent_where = f"{agent_where} ({cve_id})"
        joined = {"work_dir": _work_dir(agent_row, agent_where),
                  "problem_statement": _str(agent_row, "problem_statement", agent_where)}
    return Task(
        benchmark=benchmark,
        task_id=cve_id,
        instruction=INSTRUCTION.format(workspace=WORKSPACE, cve_id=cve_id, description=description),
        environment=Environment(
            image=image, workdir=WORKSPACE,
            resources=Resources(cpus=1.0, memory_mb=4096, storage_mb=20480),
        ),
        verifier=VerifierSpec(protocol="patcheval"),
        agent_timeout_s=3600.0,
        verifier_timeout_s=600.0,
        agent_network="no-network",
        verifier_network="no-network",
        require_git_patch=True,
        source=source or Source(),
        metadata={
            "repo": repo, "repo_name": repo_name(repo), "language": language, "cwe": sorted(cwe),
            "fix_commits": list(fix_commits), **joined,
            "detect_repo_path": True, "hide_workspace_payload": True,
        },
    )


def agent_dataset_beside(records: Path) -> Path | None:
    """The benchmark's agent dataset where it lies relative to the records file, if anywhere."""
    here = records.parent if records.is_file() else records
    return next((here / name for name in AGENT_DATASET_NAMES if (here / name).is_file()), None)


def _agent_rows(path: Path, records: set[str]) -> dict[str, list[tuple[str, Any]]]:
    """The agent dataset's rows by CVE. A row that names no CVE, or one the records do not
    have, means the file is not this benchmark's: an error naming the row."""
    by_cve: dict[str, list[tuple[str, Any]]] = {}
    for i, row in enumerate(_rows(path)):
        where = f"{path}[{i}]"
        cve = row.get("cve_id") if isinstance(row, dict) else None
        if not isinstance(cve, str) or not cve.strip():
            raise TaskFormatError(where, f"agent dataset row: field 'cve_id': expected a CVE id, got {cve!r:.80}")
        if cve.strip() not in records:
            raise TaskFormatError(where, f"agent dataset row: field 'cve_id': {cve!r} has no record in the "
                                         f"PatchEval records beside it")
        by_cve.setdefault(cve.strip(), []).append((where, row))
    return by_cve


def load_patcheval_rows(path: Path, benchmark: str = "patch_eval_verified", *, source: Source | None = None,
                        select: Callable[..., list[Any]] | None = None,
                        agent_dataset: Path | None = None) -> LoadedBenchmark:
    """Each row loads or fails on its own; ``select(rows, key, declared)`` picks rows before parsing.

    ``agent_dataset``: the benchmark's agent dataset to join (default: the one beside ``path``,
    :func:`agent_dataset_beside`); every record then needs exactly one row in it.
    """
    path = Path(path)
    rows = list(enumerate(_rows(path)))
    if not rows:
        raise TaskFormatError(path, "contains no PatchEval rows")

    def key(item: tuple[int, Any]) -> str:
        row = item[1]
        return str(row.get("cve_id", "")) if isinstance(row, dict) else ""

    dataset = agent_dataset if agent_dataset is not None else agent_dataset_beside(path)
    agent = _agent_rows(dataset, {key(r).strip() for r in rows}) if dataset is not None else None
    if select is not None:
        rows = select(rows, key, key)
    report = LoadReport(benchmark=benchmark, candidates=len(rows))
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for i, row in rows:
        where = f"{path}[{i}]"
        try:
            joined = None
            if agent is not None:
                matches = agent.get(key((i, row)).strip(), [])
                if len(matches) != 1:
                    found = ", ".join(w for w, _ in matches) or "none"
                    raise TaskFormatError(f"{where} ({key((i, row))})", f"expected one row in the agent dataset "
                                                                        f"{dataset}, found {found}")
                joined = matches[0]
            task = task_from_row(row, where, benchmark, source, joined)
        except TaskFormatError as exc:
            report.failures.append(LoadFailure.from_error(f"row {i}", exc))
            continue
        if task.task_id in seen:
            report.failures.append(LoadFailure(f"row {i}", str(path), None, "duplicate_id",
                                               f"duplicate cve_id {task.task_id!r} (also row {seen[task.task_id]})"))
            continue
        seen[task.task_id] = i
        tasks.append(task)
    return LoadedBenchmark(tasks, report)


def load_patcheval_file(path: Path, benchmark: str = "patch_eval_verified", *,
                        source: Source | None = None, agent_dataset: Path | None = None) -> list[Task]:
    """patcheval_verified.json (a JSON list) or JSON lines, strictly: the first bad row is the error."""
    loaded = load_patcheval_rows(path, benchmark, source=source, agent_dataset=agent_dataset)
    if loaded.report.failures:
        f = loaded.report.failures[0]
        raise TaskFormatError(f.file, f.message)
    return loaded.tasks


def repo_candidates(task: Task) -> Iterable[str]:
    """Where the repository may be, in order: the agent dataset's ``work_dir``, then the vendor
    harness's guesses from the repository's name."""
    if task.metadata.get("work_dir"):
        yield str(task.metadata["work_dir"])
    name = str(task.metadata.get("repo_name", ""))
    if name:
        yield f"{WORKSPACE}/{name}"
        if name.lower() != name:
            yield f"{WORKSPACE}/{name.lower()}"
    yield WORKSPACE
