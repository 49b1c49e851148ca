"""``benchmark.path=FILE``: SWE-bench rows loaded as tasks of a registered source.

Each selected row is written as a task directory (farm/tasks/swebench/task_dir.py) and loaded by
the Harbor loader with the source's rules, so a row and a Harbor copy of the same instance give
the same trial key (benchmark, instance id). The Harbor copy itself is converted the same way
when its ``tests/config.json`` holds the row (:func:`convert_harbor_copies`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.errors import ConfigError, TaskFormatError
from farm.tasks.harbor import load_harbor_task
from farm.tasks.loading import LoadedBenchmark, LoadFailure, LoadReport
from farm.tasks.model import Source, Task
from farm.tasks.swebench.rows import check_row, read_rows
from farm.tasks.swebench.task_dir import default_root, materialize, swebench_task

Select = Callable[[list[Any], Callable[[Any], str], Callable[[Any], str | None]], list[Any]]


def _file_revision(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def load_rows(path: Path, src: Any, *, select: Select | None, repos: str | None, pythons: str | None,
              cache_dir: str | None = None) -> LoadedBenchmark:
    """The selected rows of ``path`` as tasks of ``src`` (a BenchmarkSource).

    Raises:
        TaskFormatError: the file cannot be read or a row is malformed (named).
    """
    rows = read_rows(path)
    if select is not None:
        rows = select(rows, lambda r: r["instance_id"], lambda r: None)
    root = _task_root(cache_dir)
    source = Source(url=str(path.resolve()), revision=_file_revision(path))
    report = LoadReport(benchmark=src.name)
    tasks: list[Task] = []
    for row in rows:
        report.candidates += 1
        try:
            task_dir = materialize(row, root)
            task = load_harbor_task(task_dir, src.name, defaults=src.harbor_defaults(), source=source, report=report)
        except (TaskFormatError, ConfigError) as exc:
            err = exc if isinstance(exc, TaskFormatError) else TaskFormatError(str(path), str(exc))
            report.failures.append(LoadFailure.from_error(row["instance_id"], err))
            continue
        tasks.append(swebench_task(task, row, repos=repos, pythons=pythons))
    return LoadedBenchmark(tasks, report)


def _task_root(cache_dir: str | None) -> Path:
    return Path(cache_dir).expanduser() / "swebench-tasks" if cache_dir else default_root()


def convert_harbor_copies(loaded: LoadedBenchmark, *, repos: str | None, pythons: str | None,
                          cache_dir: str | None = None) -> LoadedBenchmark:
    """Harbor SWE-bench tasks whose ``tests/config.json`` is the instance row, graded as rows are.

    Harbor's verifier for them runs a parser that downloads its dependencies and, through the
    swebench package, requirements files from GitHub; farm runs the package's evaluation script
    instead and grades on the host (farm/grade/swebench.py). Tasks without the row stay as they are.
    """
    out = []
    for task in loaded.tasks:
        config = task.verifier.tests_dir / "config.json" if task.verifier.tests_dir else None
        row = None
        if config is not None and config.is_file():
            try:
                row = check_row(json.loads(config.read_text(encoding="utf-8")), str(config))
            except (ValueError, TaskFormatError):
                row = None
        if row is None or row["instance_id"] != task.task_id:
            out.append(task)
            continue
        directory = materialize(row, _task_root(cache_dir))  # where rows write theirs (benchmark.cache_dir)
        converted = load_harbor_task(directory, task.benchmark, source=task.source)
        converted = swebench_task(converted, row, repos=repos, pythons=pythons)
        # the copy's own limits, network and image lock stay; only the verifier and oracle are the row's
        out.append(Task(**{**task.__dict__, "verifier": converted.verifier, "solution_dir": converted.solution_dir,
                           "verifier_network": converted.verifier_network, "metadata": converted.metadata}))
    return LoadedBenchmark(out, loaded.report)
