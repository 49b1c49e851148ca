"""PatchEval Verified: rows of patcheval_verified.json (not Harbor) as farm Tasks.

Each row is one CVE with a prebuilt image whose /workspace holds the vulnerable repository
next to the grader's payload (fix-run.sh, the reference patch, ...). The agent works with no
network; grading applies its patch in a fresh container and runs fix-run.sh
(farm/grade/patcheval.py). Fields and limits follow the vendor's loader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from farm.errors import TaskFormatError
from farm.tasks.loading import LoadedBenchmark, LoadFailure, LoadReport
from farm.tasks.model import Environment, Resources, Source, Task, VerifierSpec

WORKSPACE = "/workspace"
_CVE = re.compile(r"^CVE-\d{4}-\d{4,}$")

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


def task_from_row(row: Any, where: str, benchmark: str = "patch_eval_verified",
                  source: Source | None = None) -> Task:
    if not isinstance(row, dict):
        raise TaskFormatError(where, f"expected a JSON object, got {type(row).__name__}")
    cve_id = _str(row, "cve_id", where)
    where = f"{where} ({cve_id})"
    if not _CVE.match(cve_id):
        raise TaskFormatError(where, f"field 'cve_id': {cve_id!r} is not a CVE id")
    description = _str(row, "cve_description", where)
    image = _str(row, "image_url", where)
    repo = _str(row, "repo", where)
    # the released files spell it 'programing_language'; later docs 'programming_language'
    language = row.get("programing_language") or row.get("programming_language") or ""
    cwe = row.get("cwe_info") or {}
    cwe_ids = sorted(cwe) if isinstance(cwe, dict) else []
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
            "repo": repo, "repo_name": repo_name(repo), "language": str(language), "cwe": cwe_ids,
            "detect_repo_path": True, "hide_workspace_payload": True,
        },
    )


def load_patcheval_rows(path: Path, benchmark: str = "patch_eval_verified", *, source: Source | None = None,
                        select: Callable[..., list[Any]] | None = None) -> LoadedBenchmark:
    """Each row loads or fails on its own; ``select(rows, key, declared)`` picks rows before parsing."""
    path = Path(path)
    rows = list(enumerate(_rows(path)))
    if not rows:
        raise TaskFormatError(path, "contains no PatchEval rows")

    def key(item: tuple[int, Any]) -> str:
        row = item[1]
        return str(row.get("cve_id", "")) if isinstance(row, dict) else ""

    if select is not None:
        rows = select(rows, key, key)
    report = LoadReport(benchmark=benchmark, candidates=len(rows))
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for i, row in rows:
        where = f"{path}[{i}]"
        try:
            task = task_from_row(row, where, benchmark, source)
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
                        source: Source | None = None) -> list[Task]:
    """patcheval_verified.json (a JSON list) or JSON lines, strictly: the first bad row is the error."""
    loaded = load_patcheval_rows(path, benchmark, source=source)
    if loaded.report.failures:
        f = loaded.report.failures[0]
        raise TaskFormatError(f.file, f.message)
    return loaded.tasks


def repo_candidates(task: Task) -> Iterable[str]:
    name = str(task.metadata.get("repo_name", ""))
    if name:
        yield f"{WORKSPACE}/{name}"
        if name.lower() != name:
            yield f"{WORKSPACE}/{name.lower()}"
    yield WORKSPACE
