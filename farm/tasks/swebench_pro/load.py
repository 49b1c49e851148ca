"""``benchmark=swebench-pro benchmark.path=FILE benchmark.pro_scripts=DIR``: Pro rows loaded as tasks.

Each selected row, with its instance's ``run_script.sh`` and ``parser.py`` from ``DIR``, is written
as a task directory (farm/tasks/swebench_pro/task_dir.py) and loaded by the Harbor loader with the
source's rules, so a row gives the trial key a Harbor copy of the same instance gives
(benchmark, instance id). A row whose scripts are missing fails to load on its own, named. A
Harbor copy whose ``tests/`` hold the whole row and both scripts is graded the same way
(:func:`convert_harbor_copies`).
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
from farm.tasks.swebench_pro.rows import check_row, read_rows
from farm.tasks.swebench_pro.scripts import FILES, KEY, ProScripts
from farm.tasks.swebench_pro.task_dir import default_root, materialize, pro_task

Select = Callable[[list[Any], Callable[[Any], str], Callable[[Any], str | None]], list[Any]]


def _revision(path: Path, scripts: ProScripts) -> str:
    rev = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    scripts_rev = scripts.revision()
    return f"{rev}+scripts@{scripts_rev}" if scripts_rev else rev


def load_pro_rows(path: Path, src: Any, *, scripts_dir: str | None, select: Select | None,
                  cache_dir: str | None = None, repos: str | None = None, pythons: str | None = None
                  ) -> LoadedBenchmark:
    """The selected rows of ``path`` as tasks of ``src`` (a BenchmarkSource); with ``repos``
    (benchmark.repos) their instance images can be built where absent.

    Raises:
        ConfigError: ``scripts_dir`` is unset or not a scripts directory (named by its key).
        TaskFormatError: the file cannot be read or a row is malformed (named).
    """
    if not scripts_dir:
        raise ConfigError(f"'{KEY}' is required with SWE-bench Pro rows: the per-instance run_script.sh and "
                          "parser.py are not in the dataset (name a copy of scaleapi/SWE-bench_Pro-os)")
    scripts = ProScripts.at(scripts_dir)
    rows = read_rows(path)
    if select is not None:
        rows = select(rows, lambda r: r["instance_id"], lambda r: None)
    root = Path(cache_dir).expanduser() / "swebench-pro-tasks" if cache_dir else default_root()
    source = Source(url=str(path.resolve()), revision=_revision(path, scripts))
    report = LoadReport(benchmark=src.name)
    tasks: list[Task] = []
    for row in rows:
        report.candidates += 1
        try:
            files = scripts.scripts(row["instance_id"])
            task_dir = materialize(row, files, scripts.env_lines(row["instance_id"]), root)
            task = load_harbor_task(task_dir, src.name, defaults=src.harbor_defaults(), source=source, report=report)
        except (TaskFormatError, ConfigError) as exc:
            err = exc if isinstance(exc, TaskFormatError) else TaskFormatError(str(path), str(exc))
            report.failures.append(LoadFailure.from_error(row["instance_id"], err))
            continue
        tasks.append(pro_task(task, row, repos=repos, pythons=pythons, scripts=str(scripts.root)))
    return LoadedBenchmark(tasks, report)


def _row_of(task: Task) -> tuple[dict[str, Any], dict[str, str]] | None:
    """The row and scripts a Harbor copy's ``tests/`` hold, when they hold all of them."""
    tests = task.verifier.tests_dir
    if tests is None or not all((tests / name).is_file() for name in ("config.json", *FILES)):
        return None
    config = tests / "config.json"
    try:
        row = check_row(json.loads(config.read_text(encoding="utf-8")), str(config))
    except (ValueError, TaskFormatError):
        return None  # a partial row (the fixture's) or none: the copy keeps Harbor's own verifier
    if row["instance_id"] != task.task_id:
        return None
    return row, {name: (tests / name).read_text(encoding="utf-8", errors="replace") for name in FILES}


def convert_harbor_copies(loaded: LoadedBenchmark, *, cache_dir: str | None = None) -> LoadedBenchmark:
    """Harbor SWE-bench Pro tasks whose ``tests/config.json`` is the whole row, graded as rows are.

    Harbor's test.sh runs the parser and decides inside the sandbox, with the sandbox's python3;
    farm runs the copy's own run_script.sh in it and its parser.py on the host. The copy's image,
    limits and network stay; only the verifier, the oracle and the grading metadata are the row's.
    """
    root = Path(cache_dir).expanduser() / "swebench-pro-tasks" if cache_dir else default_root()
    out = []
    for task in loaded.tasks:
        found = _row_of(task)
        if found is None:
            out.append(task)
            continue
        row, scripts = found
        converted = pro_task(load_harbor_task(materialize(row, scripts, [], root), task.benchmark,
                                              source=task.source), row)
        out.append(Task(**{**task.__dict__, "verifier": converted.verifier, "solution_dir": converted.solution_dir,
                           "verifier_network": converted.verifier_network, "metadata": converted.metadata}))
    return LoadedBenchmark(out, loaded.report)
