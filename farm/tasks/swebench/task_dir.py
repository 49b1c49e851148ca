"""A SWE-bench row as a Harbor task directory, graded by the ``swebench`` package's own rules.

The directory has what Harbor's SWE-bench adapter writes (task.toml with its limits,
instruction.md = the problem statement, ``environment/Dockerfile`` FROM the published instance
image, ``solution/solve.sh`` applying the gold patch) but its verifier is the evaluation script
the pinned ``swebench`` package makes for the instance (``tests/eval.sh``); ``tests/test.sh``
runs it into ``/logs/verifier/test_output.txt``, which farm grades on the host with the
package's log parser and report functions (farm/grade/swebench.py). Nothing in the verifier
needs the network. A Harbor copy of the same instance whose ``tests/config.json`` holds the row
becomes the same task (:func:`swebench_task`), so both give the same trial keys and rows.

Directories are written once under a content hash of the row and this format, so a run, a
resume and another process find the same files.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from farm.tasks.model import Task
from farm.tasks.swebench import spec

FORMAT = 1
TEST_LOG = "/logs/verifier/test_output.txt"
ROW_KEYS = ("instance_id", "repo", "version", "base_commit", "environment_setup_commit", "test_patch",
            "FAIL_TO_PASS", "PASS_TO_PASS", "spec", "log_parser_of")

TASK_TOML = """\
# written by farm from a SWE-bench row (farm/tasks/swebench/task_dir.py); limits as Harbor's adapter sets them
[metadata]
difficulty = {difficulty}
category = "debugging"
tags = ["debugging", "swe-bench"]
repo = {repo}
version = {version}

[verifier]
timeout_sec = 3000
network_mode = "no-network"

[agent]
timeout_sec = 3000

[environment]
build_timeout_sec = 1800.0
cpus = 1
memory = '4G'
storage = '10G'
"""

TEST_SH = f"""\
#!/bin/bash
# farm: the swebench package's evaluation script for this instance (tests/eval.sh), its output
# kept whole for grading on the host by the package's own log parser (farm/grade/swebench.py)
bash /tests/eval.sh > {TEST_LOG} 2>&1
code=$?
echo "[farm] eval.sh exited $code; the last lines of its output:"
tail -n 60 {TEST_LOG}
"""

SOLVE_SH = """\
#!/bin/bash
# the instance's gold patch (SWE-bench's `patch` field)
set -euo pipefail
cd /testbed
git apply -v - <<'FARM_GOLD_PATCH_EOF'
{patch}
FARM_GOLD_PATCH_EOF
"""


def _q(value: str) -> str:
    return json.dumps(value)


def files_of(row: dict[str, Any]) -> dict[str, str]:
    """The task directory's files for ``row`` (relative path -> text)."""
    return {
        "task.toml": TASK_TOML.format(difficulty=_q(str(row.get("difficulty", "unknown"))), repo=_q(row["repo"]),
                                      version=_q(row["version"])),
        "instruction.md": row["problem_statement"],
        "environment/Dockerfile": f"FROM {spec.instance_image(row)}\nWORKDIR /testbed\nRUN mkdir -p /logs\n",
        "tests/test.sh": TEST_SH,
        "tests/eval.sh": spec.eval_script(row),
        "tests/config.json": json.dumps(row, indent=1, sort_keys=True) + "\n",
        "solution/solve.sh": SOLVE_SH.format(patch=row["patch"].rstrip("\n")),
    }


def materialize(row: dict[str, Any], root: Path) -> Path:
    """Write the row's task directory under ``root`` (once per content) and return it."""
    salt = f"farm-swebench-task v{FORMAT} swebench {spec.SWEBENCH_VERSION}"
    return write_task_dir(files_of(row), root, row["instance_id"], salt)


def write_task_dir(files: dict[str, str], root: Path, instance_id: str, salt: str) -> Path:
    """``files`` (relative path -> text) as ``root/<instance_id>.<content hash>/<instance_id>``,
    written once per content and atomically (a rename), so concurrent writers never see half a
    task; ``salt`` names the format, so a format change gets new directories."""
    h = hashlib.sha256(f"{salt}\0".encode())
    for rel, text in sorted(files.items()):
        h.update(rel.encode() + b"\0" + text.encode() + b"\0")
    final = root / f"{instance_id}.{h.hexdigest()[:12]}" / instance_id
    if (final / "task.toml").is_file():
        return final
    final.parent.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=final.parent.parent))
    for rel, text in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if rel.endswith(".sh"):
            path.chmod(0o755)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, final)
    except OSError:  # another process wrote the same content first
        if not (final / "task.toml").is_file():
            raise
    return final


def swebench_task(task: Task, row: dict[str, Any], *, repos: str | None, pythons: str | None) -> Task:
    """``task`` (loaded from a directory :func:`materialize` wrote) graded by the swebench rules."""
    verifier = replace(task.verifier, protocol="swebench", success_marker=None)
    meta = {**task.metadata, "swebench": {k: row[k] for k in ROW_KEYS if k in row},
            "swebench_repos": repos, "swebench_pythons": pythons}
    return replace(task, verifier=verifier, verifier_network="no-network", require_git_patch=True, metadata=meta)


def default_root() -> Path:
    base = os.environ.get("FARM_CACHE_DIR") or str(Path.home() / ".cache" / "farm")
    return Path(base) / "swebench-tasks"
