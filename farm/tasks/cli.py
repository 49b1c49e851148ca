"""``farm tasks list`` and ``farm tasks fetch``: what farm/cli.py dispatches to.

``list`` prints a table on a terminal and tab-separated rows otherwise (ids are never cut,
so they can be copied from a pipe), or JSON with ``--json``. Tasks that failed to load are
listed at the end on stderr, counted by cause, with file and line. ``fetch`` materialises a
pinned source into the cache (or checks a mirror) so that later commands work offline.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from farm.config import BenchmarkConfig
from farm.errors import ConfigError
from farm.tasks.loading import LoadReport
from farm.tasks.model import Task

COLUMNS = ("benchmark", "task_id", "image", "workdir", "network", "timeouts", "oracle")


def task_row(t: Task) -> dict[str, Any]:
    """One task as `farm tasks list --json` prints it."""
    return {
        "benchmark": t.benchmark, "task_id": t.task_id, "image": t.environment.image, "workdir": t.workdir,
        "agent_network": t.agent_network, "verifier_network": t.verifier_network,
        "agent_timeout_s": t.agent_timeout_s, "verifier_timeout_s": t.verifier_timeout_s,
        "oracle": t.solution_dir is not None, "revision": t.source.revision, "source": t.source.url,
        "path": str(t.path) if t.path else None,
        "dockerfile": str(t.environment.dockerfile) if t.environment.dockerfile else None,
    }


def by_language(tasks: list[Task]) -> str:
    """`` (Go 83, JavaScript 77, Python 70)`` where tasks name their language (PatchEval's
    records do), else nothing: a benchmark's count as its publication states it."""
    counts = Counter(str(t.metadata["language"]) for t in tasks if t.metadata.get("language"))
    return f" ({', '.join(f'{lang} {n}' for lang, n in sorted(counts.items()))})" if counts else ""


def print_report(report: LoadReport, err: Console) -> None:
    for line in report.lines():
        err.print(line, highlight=False, markup=False, soft_wrap=True)


def list_tasks(cfg: BenchmarkConfig, *, as_json: bool = False, out: Console, err: Console,
               path: str | None = None) -> int:
    from dataclasses import replace

    from farm.tasks.benchmark import load_benchmark_report

    if path:
        cfg = replace(cfg, path=path)
    loaded = load_benchmark_report(cfg)
    tasks, report = loaded.tasks, loaded.report
    if as_json:
        doc = {"tasks": [task_row(t) for t in tasks], "load": report.as_dict()}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    cells = [(t.benchmark, t.task_id, t.environment.image or "-", t.workdir, f"{t.agent_network}/{t.verifier_network}",
              f"{t.agent_timeout_s:g}s/{t.verifier_timeout_s:g}s", "yes" if t.solution_dir else "no") for t in tasks]
    if out.is_terminal:
        table = Table(title=f"{len(tasks)} tasks")
        for col in COLUMNS:
            # the id is what people copy: it is never squeezed or cut
            table.add_column(col, no_wrap=col == "task_id",
                             min_width=max((len(c[1]) for c in cells), default=7) if col == "task_id" else None)
        for row in cells:
            table.add_row(*row)
        out.print(table)
    failed = f", {len(report.failures)} failed to load (listed on stderr)" if report.failures else ""
    if not out.is_terminal:
        # tab-separated, one task per line, ids whole; the count as a trailing comment line
        sys.stdout.write("\t".join(COLUMNS) + "\n" + "".join("\t".join(row) + "\n" for row in cells)
                         + f"# {len(tasks)} tasks{failed}\n")
        sys.stdout.flush()
    elif failed:
        out.print(f"{len(tasks)} tasks{failed}", highlight=False)
    print_report(report, err)
    return 0


def fetch(cfg: BenchmarkConfig, *, out: Console) -> int:
    """Materialise the configured source (``benchmark=NAME``) into the cache and say where."""
    from farm.tasks import catalog, fetch
    from farm.tasks.harbor import harbor_candidates

    key = catalog.source_key(cfg.name)
    if key is None:
        raise ConfigError(f"invalid value {cfg.name!r} for 'benchmark.name': `farm tasks fetch` needs a pinned "
                          f"source, one of {sorted(catalog.SOURCES)}")
    if cfg.path:
        raise ConfigError("`farm tasks fetch` reads benchmark.name (and benchmark.mirror); benchmark.path is "
                          "a local copy that needs no fetching")
    src = catalog.get_source(key)
    directory = fetch.materialize(src, Path(cfg.cache_dir) if cfg.cache_dir else None, mirror=cfg.mirror)
    count = len(harbor_candidates(directory)) if src.loader == "harbor" else None
    what = f"{count} task directories" if count is not None else f"{src.file}"
    out.print(f"{src.name} @ {src.revision}: {directory} ({what})", highlight=False, soft_wrap=True)
    return 0
