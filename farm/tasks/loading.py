"""What a load produced: the tasks, every task that failed (file, line, cause), and warnings.

One bad task never costs the others: each candidate loads or fails on its own, and the
failures are reported together at the end (``farm tasks list``, ``farm run``, ``farm
validate``), counted by cause. ``benchmark.strict=true`` turns any failure into an error.
Fields farm parses but does not honour yet are counted per field, so a run on a dataset that
uses them says so once, with the number of tasks concerned.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field

from farm.errors import ConfigError, TaskFormatError
from farm.tasks.model import Task

log = logging.getLogger(__name__)

_LINE = re.compile(r"(?:^|[ (])(?:at )?line (\d+)")


class TaskLoadError(TaskFormatError):
    """A task that cannot be loaded: names the file, the line when known, and a cause.

    ``cause`` is short and machine-readable: ``bad_toml``, ``missing_file``, ``bad_value``,
    ``dockerfile``, ``duplicate_id``, ``unsupported_layout``, ``unreadable``.
    """

    def __init__(self, path: object, message: str, *, cause: str, line: int | None = None) -> None:
        super().__init__(path, message)
        self.cause = cause
        self.line = line


@dataclass(frozen=True)
class LoadFailure:
    task: str  # the task directory's name (or a row's position)
    file: str
    line: int | None
    cause: str
    message: str

    @classmethod
    def from_error(cls, task: str, exc: TaskFormatError) -> LoadFailure:
        cause = getattr(exc, "cause", None) or ("dockerfile" if exc.path.endswith("Dockerfile") else "bad_value")
        line = getattr(exc, "line", None)
        if line is None:
            m = _LINE.search(str(exc)[len(exc.path):])
            line = int(m.group(1)) if m else None
        message = str(exc)[len(exc.path) + 2:] if str(exc).startswith(exc.path) else str(exc)
        return cls(task=task, file=exc.path, line=line, cause=cause, message=message)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def as_dict(self) -> dict[str, object]:
        return {"task": self.task, "file": self.file, "line": self.line, "cause": self.cause, "message": self.message}


@dataclass
class LoadReport:
    """Everything one benchmark load produced besides the tasks."""

    benchmark: str
    candidates: int = 0  # task directories (or rows) selected for loading
    failures: list[LoadFailure] = field(default_factory=list)
    # field -> (what farm does with it, tasks that use it)
    unhonoured: dict[str, tuple[str, int]] = field(default_factory=dict)

    def note_field(self, name: str, note: str) -> None:
        _, n = self.unhonoured.get(name, (note, 0))
        self.unhonoured[name] = (note, n + 1)

    def by_cause(self) -> dict[str, int]:
        return dict(sorted(Counter(f.cause for f in self.failures).items()))

    def lines(self) -> list[str]:
        """The end-of-command summary: warnings per field, then every failure."""
        out = [f"warning: {self.benchmark}: {name} is used by {n} task(s): {note}"
               for name, (note, n) in sorted(self.unhonoured.items())]
        if self.failures:
            causes = ", ".join(f"{c} {n}" for c, n in self.by_cause().items())
            out.append(f"{self.benchmark}: {len(self.failures)} of {self.candidates} task(s) failed to load "
                       f"({causes}):")
            out += [f"  {f.task}: {f.where}: [{f.cause}] {f.message}" for f in self.failures]
        return out

    def as_dict(self) -> dict[str, object]:
        return {"benchmark": self.benchmark, "candidates": self.candidates, "failed": len(self.failures),
                "failures_by_cause": self.by_cause(), "failures": [f.as_dict() for f in self.failures],
                "unhonoured_fields": {k: {"note": v[0], "tasks": v[1]} for k, v in sorted(self.unhonoured.items())}}


@dataclass
class LoadedBenchmark:
    tasks: list[Task]
    report: LoadReport

    def enforce(self, strict: bool, *, quiet: bool = False) -> LoadedBenchmark:
        """Under ``strict`` a failure is an error listing all of them.

        Otherwise the report is logged as warnings, unless ``quiet`` (the caller prints it
        itself, at the end of its output).
        """
        if self.report.failures and strict:
            raise ConfigError("benchmark.strict=true and tasks failed to load:\n" + "\n".join(self.report.lines()))
        if not quiet:
            for line in self.report.lines():
                log.warning("%s", line)
        return self


def merge_reports(reports: list[LoadReport]) -> list[str]:
    return [line for r in reports for line in r.lines()]

