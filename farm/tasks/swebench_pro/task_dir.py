"""A SWE-bench Pro row as a Harbor task directory, graded by the instance's own parser.

The directory has what Harbor's SWE-bench Pro adapter writes (task.toml, instruction.md,
``environment/Dockerfile`` FROM the published ``jefzda/sweap-images`` image with the repository
at ``/app``, ``solution/solve.sh`` applying the gold patch, the official ``run_script.sh`` and
``parser.py`` under ``tests/``), but ``tests/test.sh`` is farm's: it does what the official
entry script does after applying the patch (the Dockerfiles' ``ENV`` lines exported, the last line
of ``before_repo_set_cmd`` — the checkout of the test files from the fix commit — then
``run_script.sh`` with the selected tests, comma-joined) and leaves the script's stdout, stderr and
exit status in ``/logs/verifier``. farm runs ``parser.py`` on those logs on the host and applies
the official rule (farm/grade/swebench_pro.py), so nothing the agent left in the sandbox can
stand in for the parser or the reward.

Directories are written once under a content hash of the row, the scripts and this format.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from farm.tasks.model import Task
from farm.tasks.swebench.task_dir import write_task_dir
from farm.tasks.swebench_pro.rows import gold_checkout, image_tag, instruction

FORMAT = 3  # 2: test.sh without set -u (as the official entry script); 3: the fix commit made when absent
LOG_DIR = "/logs/verifier"
STDOUT_LOG = f"{LOG_DIR}/run_script.stdout.txt"
STDERR_LOG = f"{LOG_DIR}/run_script.stderr.txt"
EXIT_FILE = f"{LOG_DIR}/run_script.exit"
REPO_DIR = "/app"
# what grading reads (farm/grade/swebench_pro.py); the rest of the row stays in tests/config.json
ROW_KEYS = ("instance_id", "repo", "base_commit", "fail_to_pass", "pass_to_pass", "selected_test_files_to_run",
            "dockerhub_tag", "repo_language")

TASK_TOML = """\
# written by farm from a SWE-bench Pro row (farm/tasks/swebench_pro/task_dir.py); limits as Harbor's adapter sets them
[metadata]
difficulty = "unknown"
category = "debugging"
tags = ["debugging", "swe-bench-pro"]
repo = {repo}
repo_language = {language}

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

TEST_SH = """\
#!/bin/bash
# farm: SWE-bench Pro's grading steps for this instance (what swe_bench_pro_eval.py's entry script
# does once the patch is in place), with no shell options, as there: a failing step still leaves
# logs, and an ENV line naming an unset variable expands as it would upstream. The instance's
# parser.py reads the logs on the host (farm/grade/swebench_pro.py).
mkdir -p {log_dir}
rm -f {stdout} {stderr} {exit_file}
{exports}
cd {repo_dir}
{make_fix}{checkout}
bash /tests/run_script.sh {selected} > {stdout} 2> {stderr}
code=$?
echo "$code" > {exit_file}
echo "[farm] run_script.sh exited $code; the last lines of its output:"
tail -n 60 {stdout}
"""

SOLVE_SH = """\
#!/bin/bash
# the instance's gold patch (SWE-bench Pro's `patch` field)
set -euo pipefail
cd {repo_dir}
git apply -v - <<'FARM_GOLD_PATCH_EOF'
{patch}
FARM_GOLD_PATCH_EOF
"""


# The line above the checkout names the fix commit. Upstream's images hold it (a full clone, gold
# source included, which an agent can read); farm's stand-ins hold the base commit alone. Where it
# is absent, the same test files are made from base_commit + test_patch (equal to the fix's on 196
# of the 197 Python rows whose commits a mirror has; docs/benchmarks.md) and put where git looks
# first for that commit, a replace ref. Replace refs found in the repository are removed first and
# the check ignores them, so nothing the agent left can stand in for the commit; the environment
# keeps git from being told to ignore replace refs.
MAKE_FIX = """\
for ref in $(git for-each-ref --format='%(refname)' refs/replace/ 2>/dev/null); do git update-ref -d "$ref"; done
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.useReplaceRefs GIT_CONFIG_VALUE_0=true
unset GIT_NO_REPLACE_OBJECTS
if ! git --no-replace-objects cat-file -e {fix}^{{commit}} 2>/dev/null; then
  tree=$(GIT_INDEX_FILE=/tmp/farm-fix.index sh -c 'rm -f "$GIT_INDEX_FILE" \\
    && git --no-replace-objects read-tree {base} \\
    && git --no-replace-objects apply --cached /tests/test_patch.diff \\
    && git --no-replace-objects write-tree') \\
    && made=$(GIT_AUTHOR_NAME=farm GIT_AUTHOR_EMAIL=farm@localhost GIT_COMMITTER_NAME=farm \\
      GIT_COMMITTER_EMAIL=farm@localhost git --no-replace-objects commit-tree "$tree" -p {base} \\
      -m "farm: the test files of {fix} (base_commit + test_patch)") \\
    && git update-ref refs/replace/{fix} "$made" \\
    || echo "[farm] the fix commit {fix} is absent and could not be made from test_patch"
fi
"""


def _q(value: str) -> str:
    return json.dumps(value)


def _dockerfile(row: dict[str, Any]) -> str:
    # the dataset's own set-up lines before the last (reset, clean, checkout of the base commit),
    # as Harbor's adapter runs them at build time; the last line belongs to grading
    setup = [ln.strip() for ln in row["before_repo_set_cmd"].strip().split("\n")[:-1] if ln.strip()]
    lines = [f"FROM {image_tag(row)}", "ENTRYPOINT []", f"WORKDIR {REPO_DIR}"]
    if setup:
        lines.append("RUN set -e && " + " && ".join(setup))
    lines.append("RUN mkdir -p /logs")
    return "\n".join(lines) + "\n"


def files_of(row: dict[str, Any], scripts: dict[str, str], env_lines: list[str]) -> dict[str, str]:
    """The task directory's files for ``row`` with the instance's scripts (relative path -> text)."""
    # one argument, comma-joined, as the run scripts split it; quoting changes nothing for the
    # Python instances' test ids (no spaces) and keeps a `[param]` id from being read as a glob
    selected = ",".join(row["selected_test_files_to_run"])
    checkout = gold_checkout(row)
    fix = fix_commit(checkout)
    make_fix = MAKE_FIX.format(fix=fix, base=row["base_commit"]) if fix else ""
    test_sh = TEST_SH.format(log_dir=LOG_DIR, stdout=STDOUT_LOG, stderr=STDERR_LOG, exit_file=EXIT_FILE,
                             exports="\n".join(env_lines), repo_dir=REPO_DIR, checkout=checkout, make_fix=make_fix,
                             selected=shlex.quote(selected) if selected else "")
    return {
        "task.toml": TASK_TOML.format(repo=_q(row["repo"]), language=_q(row.get("repo_language", "unknown"))),
        "instruction.md": instruction(row),
        "environment/Dockerfile": _dockerfile(row),
        "tests/test.sh": test_sh,
        "tests/run_script.sh": scripts["run_script.sh"],
        "tests/parser.py": scripts["parser.py"],
        "tests/config.json": json.dumps(row, indent=1, sort_keys=True) + "\n",
        "tests/test_patch.diff": row["test_patch"],
        "solution/solve.sh": SOLVE_SH.format(repo_dir=REPO_DIR, patch=row["patch"].rstrip("\n")),
    }


def fix_commit(checkout: str) -> str | None:
    """The commit ``git checkout <commit> -- <files>`` names, when the line is of that form."""
    m = re.match(r"^git checkout ([0-9a-f]{40}) --( |$)", checkout)
    return m.group(1) if m else None


def materialize(row: dict[str, Any], scripts: dict[str, str], env_lines: list[str], root: Path) -> Path:
    """Write the row's task directory under ``root`` (once per content) and return it."""
    return write_task_dir(files_of(row, scripts, env_lines), root, row["instance_id"],
                          f"farm-swebench-pro-task v{FORMAT}")


def pro_task(task: Task, row: dict[str, Any], *, repos: str | None = None, pythons: str | None = None,
             scripts: str | None = None) -> Task:
    """``task`` (loaded from a directory :func:`materialize` wrote) graded by the SWE-bench Pro rule.
    With ``repos`` and ``scripts`` (benchmark.repos, benchmark.pro_scripts) a sandbox backend can
    build the instance image's stand-in where the published one is absent (farm/sandbox/images/swebench_pro/)."""
    verifier = replace(task.verifier, protocol="swebench_pro", success_marker=None)
    meta = {**task.metadata, "swebench_pro": {k: row[k] for k in ROW_KEYS if k in row}}
    if repos and scripts:
        meta |= {"swebench_repos": repos, "swebench_pythons": pythons, "swebench_pro_scripts": scripts}
    return replace(task, verifier=verifier, verifier_network="no-network", require_git_patch=True, metadata=meta)


def default_root() -> Path:
    base = os.environ.get("FARM_CACHE_DIR") or str(Path.home() / ".cache" / "farm")
    return Path(base) / "swebench-pro-tasks"
