"""The achievable ceiling of each pinned benchmark: per task, does its own oracle pass?

No benchmark is 100 % achievable: some gold patches fail their own tests, some verifiers time
out, some environments cannot be built. A claim read against 100 % then blames the model for
tasks nobody can pass, so every pinned source ships a data file (``ceilings/<source>.json``,
package data) with each task's oracle status and where that status comes from (a publication
or a run here), for the source revision it was taken on. The report reads a claim against
both 100 % and this ceiling (farm/report/ceilings.py); docs/benchmarks.md ("Ceilings")
describes the files.

File layout (JSON, validated on load; a bad value is an error naming the file, the field and
the value):

    {"schema": 1, "source": "<catalog name>",
     "pin": {"url": ..., "revision": <40-hex, must equal the catalog's>, "subpath": ..., "tasks": N},
     "flaky_counts_as": "pass" | "fail",
     "provenance": {"<id>": {"kind": "published" | "measured", "where": ..., "date": ...,
                             optional "url", "repo", "path", "commit", "machine", "images", "notes"}},
     "tasks": {"<task id>": {"status": <STATUSES>, "provenance": "<id>",
                             optional "runs", "passes", "cause", "note"}},
     "rest": optional {"status": ..., "provenance": ..., "note": ...}}

``rest`` states the status of every task of the pin the file does not list (a publication
that names only its failures); without it, unlisted tasks are unknown.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.errors import ConfigError

CEILING_DIR = Path(__file__).with_name("ceilings")
SCHEMA = 1
STATUSES = ("pass", "flaky", "invalid_gold", "timeout", "harness_bug", "not_built")
PROVENANCE_KINDS = ("published", "measured")
_TOP = {"schema", "source", "pin", "flaky_counts_as", "provenance", "tasks", "rest", "notes"}
_PIN = {"url", "revision", "subpath", "tasks"}
_PROV = {"kind", "where", "date", "url", "repo", "path", "commit", "machine", "images", "notes"}
_TASK = {"status", "provenance", "runs", "passes", "cause", "note"}
_REST = {"status", "provenance", "note"}
_SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class OracleStatus:
    status: str
    provenance: str  # an id of the file's provenance block
    runs: int | None = None
    passes: int | None = None
    cause: str = ""
    note: str = ""


@dataclass(frozen=True)
class Ceiling:
    """How many of a set of tasks their oracle passes; ``unknown`` are in no file entry."""

    source: str
    tasks: int
    achievable: int
    unknown: int
    by_status: dict[str, int]
    provenance: tuple[str, ...]  # the provenance ids the counted entries come from

    @property
    def low(self) -> float:
        """Share (0..1) of tasks known achievable: every unknown task counted as failing."""
        return self.achievable / self.tasks if self.tasks else float("nan")

    @property
    def high(self) -> float:
        """Share (0..1) with every unknown task counted as achievable (what a 100 % reading assumes)."""
        return (self.achievable + self.unknown) / self.tasks if self.tasks else float("nan")


@dataclass
class CeilingFile:
    source: str
    pin: dict[str, Any]
    flaky_counts_as: str
    provenance: dict[str, dict[str, Any]]
    tasks: dict[str, OracleStatus]
    rest: OracleStatus | None = None
    notes: str = ""
    path: Path | None = field(default=None, compare=False)

    def achievable(self, status: str) -> bool:
        return status == "pass" or (status == "flaky" and self.flaky_counts_as == "pass")

    def ceiling(self, task_ids: Iterable[str] | None = None) -> Ceiling:
        """The ceiling over ``task_ids`` (a run's tasks), or over every task of the pin."""
        statuses: list[OracleStatus | None]
        if task_ids is None:
            unlisted = self.pin["tasks"] - len(self.tasks)
            statuses = [*self.tasks.values(), *([self.rest] * unlisted)]
        else:
            statuses = [self.tasks.get(t, self.rest) for t in task_ids]
        known = [s for s in statuses if s is not None]
        return Ceiling(
            source=self.source, tasks=len(statuses),
            achievable=sum(self.achievable(s.status) for s in known),
            unknown=len(statuses) - len(known),
            by_status=dict(Counter(s.status for s in known)),
            provenance=tuple(sorted({s.provenance for s in known})),
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": SCHEMA, "source": self.source, "pin": self.pin,
            "flaky_counts_as": self.flaky_counts_as, "provenance": self.provenance,
            "tasks": {t: _entry_json(s) for t, s in sorted(self.tasks.items())},
        }
        if self.rest is not None:
            doc["rest"] = {k: v for k, v in _entry_json(self.rest).items() if k in _REST}
        if self.notes:
            doc["notes"] = self.notes
        return doc


def _entry_json(s: OracleStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"status": s.status, "provenance": s.provenance}
    for name in ("runs", "passes"):
        if getattr(s, name) is not None:
            out[name] = getattr(s, name)
    for name in ("cause", "note"):
        if getattr(s, name):
            out[name] = getattr(s, name)
    return out


class _Check:
    """Validation helpers that name the file, the dotted field and the bad value."""

    def __init__(self, file: Path | str) -> None:
        self.file = file

    def fail(self, where: str, message: str) -> ConfigError:
        return ConfigError(f"{self.file}: {where}: {message}")

    def mapping(self, where: str, value: Any, allowed: set[str], required: Iterable[str] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__} {value!r}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.fail(f"{where}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
        for name in required:
            if name not in value:
                raise self.fail(f"{where}.{name}", "missing")
        return value

    def text(self, where: str, value: Any, required: bool = True) -> str:
        if value is None and not required:
            return ""
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"expected a non-empty string, got {value!r}")
        return value

    def count(self, where: str, value: Any, minimum: int = 0) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(where, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def choice(self, where: str, value: Any, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            raise self.fail(where, f"invalid value {value!r} (allowed: {', '.join(allowed)})")
        return value


def _status(c: _Check, where: str, raw: Any, provenance: Mapping[str, Any], allowed: set[str]) -> OracleStatus:
    raw = c.mapping(where, raw, allowed, ("status", "provenance"))
    status = c.choice(f"{where}.status", raw["status"], STATUSES)
    prov = c.text(f"{where}.provenance", raw["provenance"])
    if prov not in provenance:
        raise c.fail(f"{where}.provenance", f"{prov!r} is not an id of the provenance block "
                                            f"({', '.join(sorted(provenance)) or 'empty'})")
    runs = c.count(f"{where}.runs", raw.get("runs"), 1)
    passes = c.count(f"{where}.passes", raw.get("passes"))
    if runs is not None and passes is not None and passes > runs:
        raise c.fail(f"{where}.passes", f"{passes} passes in {runs} runs")
    # "flaky" means "passed some of N runs, not all": without the counts it says nothing
    if status == "flaky" and (runs is None or passes is None or not 0 < passes < runs):
        raise c.fail(f"{where}.status", f"'flaky' needs runs and passes with 0 < passes < runs, "
                                         f"got runs={runs!r} passes={passes!r}")
    return OracleStatus(status=status, provenance=prov, runs=runs, passes=passes,
                        cause=c.text(f"{where}.cause", raw.get("cause"), required=False),
                        note=c.text(f"{where}.note", raw.get("note"), required=False))


def _provenance(c: _Check, raw: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(raw, dict):
        raise c.fail("provenance", f"expected a mapping of id to block, got {raw!r}")
    for pid, block in raw.items():
        where = f"provenance.{pid}"
        block = c.mapping(where, block, _PROV, ("kind", "where", "date"))
        kind = c.choice(f"{where}.kind", block["kind"], PROVENANCE_KINDS)
        # a measurement means nothing without the machine and the images it ran on
        required = ("where", "date", "machine", "images") if kind == "measured" else ("where", "date")
        for name in required:
            if block.get(name) is None:
                raise c.fail(f"{where}.{name}", f"missing (a {kind} status needs {', '.join(required)})")
        for name in _PROV - {"kind"}:
            c.text(f"{where}.{name}", block.get(name), required=name in required)
        if block.get("commit") is not None and not re.fullmatch(r"[0-9a-f]{7,40}", block["commit"]):
            raise c.fail(f"{where}.commit", f"expected a git commit id, got {block['commit']!r}")
        out[pid] = dict(block)
    if not out:
        raise c.fail("provenance", "empty: every status needs a source")
    return out


def parse_ceiling(doc: Any, file: Path | str, expected: Mapping[str, Any] | None = None) -> CeilingFile:
    """Validate one ceiling document. ``expected`` (the catalog's pin: source, revision, tasks)
    makes a file for another revision an error rather than a silently wrong ceiling."""
    c = _Check(file)
    doc = c.mapping("<top>", doc, _TOP, ("schema", "source", "pin", "flaky_counts_as", "provenance", "tasks"))
    if doc["schema"] != SCHEMA:
        raise c.fail("schema", f"unsupported value {doc['schema']!r} (this farm reads {SCHEMA})")
    source = c.text("source", doc["source"])
    pin = c.mapping("pin", doc["pin"], _PIN, ("url", "revision", "tasks"))
    c.text("pin.url", pin["url"])
    if not isinstance(pin["revision"], str) or not _SHA.match(pin["revision"]):
        raise c.fail("pin.revision", f"expected a 40-hex commit, got {pin['revision']!r}")
    c.count("pin.tasks", pin["tasks"], 1)
    for name, want in (expected or {}).items():
        got = source if name == "source" else pin.get(name)
        if got != want:
            raise c.fail("source" if name == "source" else f"pin.{name}",
                         f"{got!r} does not match the catalog's {want!r}: this file is for another pin")
    flaky = c.choice("flaky_counts_as", doc["flaky_counts_as"], ("pass", "fail"))
    provenance = _provenance(c, doc["provenance"])
    raw_tasks = doc["tasks"]
    if not isinstance(raw_tasks, dict):
        raise c.fail("tasks", f"expected a mapping of task id to status, got {raw_tasks!r}")
    tasks = {tid: _status(c, f"tasks.{tid}", raw, provenance, _TASK) for tid, raw in raw_tasks.items()}
    if len(tasks) > pin["tasks"]:
        raise c.fail("tasks", f"{len(tasks)} tasks listed, but the pin has {pin['tasks']}")
    rest = _status(c, "rest", doc["rest"], provenance, _REST) if doc.get("rest") is not None else None
    return CeilingFile(source=source, pin=dict(pin), flaky_counts_as=flaky, provenance=provenance,
                       tasks=tasks, rest=rest, notes=c.text("notes", doc.get("notes"), required=False),
                       path=Path(file))


def _catalog_pin(source: str) -> dict[str, Any]:
    from farm.tasks.catalog import SOURCES  # the catalog imports harbor.py; only needed here

    s = SOURCES[source]
    return {"source": s.name, "url": s.url, "revision": s.revision, "tasks": s.expected_tasks}


def ceiling_path(source: str, directory: Path | str | None = None) -> Path:
    return Path(directory or CEILING_DIR) / f"{source}.json"


def load_ceiling(source: str, directory: Path | str | None = None) -> CeilingFile | None:
    """The ceiling file of a catalog source, or None when there is none. The file's pin must be
    the catalog's (source, URL, revision, task count)."""
    from farm.config.benchmarks import source_key

    key = source_key(source)
    if key is None:
        return None
    path = ceiling_path(key, directory)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON: {e}") from None
    return parse_ceiling(doc, path, _catalog_pin(key))


def write_ceiling(cf: CeilingFile, path: Path) -> None:
    # tasks sorted by id, one field per line: a merge shows up in review as the lines it changed
    path.write_text(json.dumps(cf.to_json(), indent=1, sort_keys=False, ensure_ascii=False) + "\n")


def merge_gold_results(
    source: str,
    results: Mapping[str, str | Mapping[str, Any]],
    *,
    provenance: Mapping[str, Any],
    provenance_id: str | None = None,
    directory: Path | str | None = None,
) -> Path:
    """Record oracle results measured here (``make swebench-gold``) in the source's ceiling file.

    ``results`` maps a task id to a status (``"pass"``) or an entry (``{"status": "flaky",
    "runs": 3, "passes": 2, "cause": ..., "note": ...}``); each replaces the task's entry, and
    the entry it replaces is kept in the note. ``provenance`` is the block the new entries
    point to (kind, where, date; machine and images for a measurement), stored under
    ``provenance_id`` (default ``<kind>-<date>``). The file is created from the catalog's pin when there is none.
    Everything is validated before the file is written. Returns the file's path.
    """
    from farm.config.benchmarks import source_key

    key = source_key(source)
    if key is None:
        raise ConfigError(f"merge_gold_results: unknown source {source!r}")
    provenance_id = provenance_id or f"{provenance.get('kind')}-{provenance.get('date')}"
    path = ceiling_path(key, directory)
    current = load_ceiling(key, directory)
    pin = _catalog_pin(key)
    doc = current.to_json() if current else {
        "schema": SCHEMA, "source": key, "flaky_counts_as": "pass", "provenance": {}, "tasks": {},
        "pin": {"url": pin["url"], "revision": pin["revision"], "tasks": pin["tasks"]},
    }
    old = doc["provenance"].get(provenance_id)
    if old is not None and old != dict(provenance):
        raise ConfigError(f"merge_gold_results: provenance id {provenance_id!r} already names "
                          f"another block in {path}: {old!r}")
    doc["provenance"][provenance_id] = dict(provenance)
    for tid, value in results.items():
        entry = {"status": value} if isinstance(value, str) else dict(value)
        entry["provenance"] = provenance_id
        before = doc["tasks"].get(tid)
        if before is not None and before.get("provenance") != provenance_id:
            was = f"was {before['status']} per {before['provenance']}"
            entry["note"] = f"{entry['note']} ({was})" if entry.get("note") else was
        doc["tasks"][tid] = entry
    merged = parse_ceiling(doc, path, pin)
    write_ceiling(merged, path)
    return path
