"""``benchmark=swebench-pro benchmark.path=FILE benchmark.pro_scripts=DIR``: Pro rows loaded as tasks.

Each selected row, with its instance's ``run_script.sh`` and ``parser.py`` from ``DIR``, is written
as a task directory (farm/tasks/swebench_pro/task_dir.py) and loaded by the Harbor loader with the
source's rules, so a row gives the trial key a Harbor copy of the same instance gives
(benchmark, instance id). A row whose scripts are missing fails to load on its own, named.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.errors import ConfigError, TaskFormatError
from farm.tasks.harbor import load_harbor_task
from farm.tasks.loading import LoadedBenchmark, LoadFailure, LoadReport
from farm.tasks.model import Source, Task
from farm.tasks.swebench_pro.rows import read_rows
from farm.tasks.swebench_pro.scripts import KEY, ProScripts
from farm.tasks.swebench_pro.task_dir import default_root, materialize, pro_task

Select = Callable[[list[Any], Callable[[Any], str], Callable[[Any], str | None]], list[Any]]


def _revision(path: Path, scripts: ProScripts) -> str:
    rev = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    scripts_rev = scripts.revision()
    return f"{rev}+scripts@{scripts_rev}" if scripts_rev else rev


def load_pro_rows(path: Path, src: Any, *, scripts_dir: str | None, select: Select | None,
                  cache_dir: str | None = None) -> LoadedBenchmark:
    """The selected rows of ``path`` as tasks of ``src`` (a BenchmarkSource).

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
        tasks.append(pro_task(task, row))
    return LoadedBenchmark(tasks, report)
