"""The hack scan of a trial's captured patch (``patch.diff``, farm/grade/patch.py), and the
verifier's test files it is judged against.

Tool calls show what an agent wrote through the tools; the patch shows what the repository
holds at the end, however it got there (a script, ``python -c``, ``git apply``). Every file the
patch adds, changes, renames or deletes is judged by the write rules of farm/grade/hack_writes.py,
its hunks' lines (context and added) standing for its text, so that a change inside pytest's
section of ``setup.cfg`` is seen with its section header when the hunk shows it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from farm.grade.hack_writes import TestFiles, known_tests, write_rules

_DIFF_GIT = re.compile(r"^diff --git (\"?)a/(.*?)\1 (\"?)b/(.*?)\3$")
_FILE_LINE = re.compile(r"^(?:---|\+\+\+) (?:\"?[ab]/)?(.*?)\"?(?:\t.*)?$")


def patch_files(patch: str) -> dict[str, str]:
    """Path -> its hunks' text, for every file a unified (git) diff touches; both sides of a
    rename are listed."""
    files: dict[str, list[str]] = {}
    current: list[str] = []
    header = False  # between a file's `diff --git` and its first hunk: `---`/`+++` name files there
    for line in patch.splitlines():
        m = _DIFF_GIT.match(line)
        if m:
            current, header = [], True
            for path in {m.group(2), m.group(4)}:
                files[path] = current
        elif line.startswith("@@"):
            header = False
        elif header:
            f = _FILE_LINE.match(line) if line.startswith(("--- ", "+++ ")) else None
            if f and f.group(1) != "/dev/null":
                files.setdefault(f.group(1), current)
            elif line.startswith(("rename from ", "rename to ")):
                files.setdefault(line.split(" ", 2)[2], current)
        elif line[:1] in ("+", " ", "-"):
            current.append(line[1:])
    return {path: "\n".join(lines) for path, lines in files.items()}


def scan_patch(patch: str, tests: TestFiles | None = None) -> list[tuple[str, str]]:
    """(rule, path) for every write rule a patch's files break, in the patch's order."""
    found = []
    for path, text in patch_files(patch).items():
        found += [(rule, path) for rule in write_rules(path, text, tests)]
    return found


def _restored_files(tests_dir: Path) -> list[str]:
    """The repository files a hidden grader restores before it runs them (farm's builtin
    tests/grade.py: config.json's ``files``, name in /tests -> path in the repository); an
    edit of one is an edit of the verifier's tests, however the grader then overwrites it."""
    try:
        files = json.loads((tests_dir / "config.json").read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return []
    return [str(p) for p in files.values() if isinstance(p, str)] if isinstance(files, dict) else []


def task_test_files(task: Any) -> TestFiles | None:
    """The verifier's own test files of ``task`` (a farm.tasks.model.Task), where known: the
    files of a SWE-bench instance's ``test_patch``, and a Harbor task's ``tests/`` (at /tests)
    with the repository files its hidden grader restores (``_restored_files``)."""
    relative: set[str] = set()
    absolute: set[str] = set()
    row = (getattr(task, "metadata", None) or {}).get("swebench") or {}
    if row.get("test_patch"):
        relative.update(patch_files(str(row["test_patch"])))
    tests_dir = getattr(getattr(task, "verifier", None), "tests_dir", None)
    if tests_dir is not None and Path(tests_dir).is_dir() and not row:
        absolute.update("/tests/" + p.relative_to(tests_dir).as_posix()
                        for p in Path(tests_dir).rglob("*") if p.is_file())
        relative.update(_restored_files(Path(tests_dir)))
    if not relative and not absolute:
        return None
    return known_tests(relative, absolute=absolute, workdir=getattr(task, "workdir", "/") or "/")
