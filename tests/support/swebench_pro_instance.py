"""A SWE-bench Pro instance this test suite makes: a small Python package with a bug, its row in the
dataset's own fields, a bare mirror of its repository (base and fix commits) and a scripts folder in
the layout of scaleapi/SWE-bench_Pro-os — base and instance Dockerfiles in the shape the published
ones have (``FROM python:3.11-slim``, apt, a GitHub clone, ``/preprocess.sh`` and ``/build.sh``
written by heredocs, pip through ``pypi-timemachine``), ``run_script.sh`` and ``parser.py``.

Commits carry fixed dates, so the base commit (and the instance image's recipe) is the same on
every run: a later run reuses the image.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BUGGY.replace("a - b", "a + b")
TESTS = "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n"
TESTS_FIX = TESTS.replace("import mul", "import add, mul") + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
# the date the instance's pip resolves as of: pytest 8.1.1 was the newest then (8.1.2 came 2024-04-26)
AS_OF = "2024-03-15"
PYTEST_AS_OF = "8.1.1"
_DATE = "2024-01-01T00:00:00+00:00"
_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_AUTHOR_DATE": _DATE, "GIT_COMMITTER_DATE": _DATE}

BASE_DOCKERFILE = """\
# shaped like SWE-bench Pro's base Dockerfiles
FROM python:3.11-slim

RUN mkdir /app
WORKDIR /app

RUN apt-get update && apt-get install -y \\
    git \\
    libxslt-dev \\
    qt5-default \\
    && rm -rf /var/lib/apt/lists/*

RUN git clone https://github.com/farmtest/calc.git .
RUN git checkout {env}

ENTRYPOINT ["/bin/bash"]
"""

# build.sh as the published ones write it, but that it waits for the time machine to listen where they
# sleep 3 s and hope (on a loaded CI machine its start can take longer)
INSTANCE_DOCKERFILE = """\
FROM base_farmtest__calc___2024-03-15.{env}

ENV PYTEST_ADDOPTS="--tb=short -v"

RUN cat <<'EOFPREP' > /preprocess.sh
#!/bin/bash
cd /app
git reset --hard {base}
git clean -fdx
git checkout {base}
cd /
EOFPREP
RUN chmod +x /preprocess.sh
RUN /preprocess.sh

RUN cat <<'EOFBUILD' > /build.sh
#!/bin/sh
pip install pypi-timemachine
pypi-timemachine {as_of} --port 9876 &
pip config set global.index-url http://127.0.0.1:9876/
sleep 3
for i in 1 2 3 4 5 6 7 8 9 10; do python -c "import socket; socket.create_connection(('127.0.0.1', 9876), 2)" \\
  2>/dev/null && break; sleep 2; done
cd /app
set -e
pip install pytest
EOFBUILD
RUN chmod +x /build.sh
RUN /build.sh
"""

RUN_SCRIPT = """#!/bin/bash
set -e
run_selected_tests() {
  cd /app
  python -m pytest "$@" -v || true
}
IFS=',' read -r -a TEST_FILES <<< "$1"
run_selected_tests "${TEST_FILES[@]}"
"""

PARSER = """import json, re, sys
text = open(sys.argv[1]).read() + open(sys.argv[2]).read()
tests = [{"name": m.group(1), "status": m.group(2)}
         for m in re.finditer(r"^(\\S+::\\S+)\\s+(PASSED|FAILED|SKIPPED|ERROR)", text, re.M)]
json.dump({"tests": tests}, open(sys.argv[3], "w"))
"""


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` with a fixed author and date; its stdout."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **_ENV}).stdout


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    """Write ``files`` into ``repo`` and commit them; the new commit's id."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def make_pro_instance(tmp: Path) -> tuple[dict[str, Any], Path, Path]:
    """The repository, its bare mirror (``<owner>+<name>``) and a scripts folder under ``tmp``, and
    the row; returns (row, mirror directory, scripts directory)."""
    repo = tmp / "calc"
    git(tmp, "init", "-q", "-b", "main", str(repo))
    env = commit(repo, {"calc.py": BUGGY, ".gitignore": "__pycache__/\n", "tests/test_calc.py": TESTS}, "env")
    base = commit(repo, {"README": "calc\n"}, "base")
    fix = commit(repo, {"calc.py": FIXED, "tests/test_calc.py": TESTS_FIX}, "fix")
    patch = git(repo, "diff", base, fix, "--", "calc.py")
    test_patch = git(repo, "diff", base, fix, "--", "tests")
    mirror = tmp / "mirror"
    mirror.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(mirror / "farmtest+calc")], check=True)
    iid = f"instance_farmtest__calc-{fix}-v{env}"
    scripts = tmp / "SWE-bench_Pro-os"
    for kind, text in (("base_dockerfile", BASE_DOCKERFILE), ("instance_dockerfile", INSTANCE_DOCKERFILE)):
        (scripts / "dockerfiles" / kind / iid).mkdir(parents=True)
        (scripts / "dockerfiles" / kind / iid / "Dockerfile").write_text(
            text.format(env=env, base=base, as_of=AS_OF))
    (scripts / "run_scripts" / iid).mkdir(parents=True)
    (scripts / "run_scripts" / iid / "run_script.sh").write_text(RUN_SCRIPT)
    (scripts / "run_scripts" / iid / "parser.py").write_text(PARSER)
    row = {"instance_id": iid, "repo": "farmtest/calc", "base_commit": base, "patch": patch, "test_patch": test_patch,
           "problem_statement": "add() subtracts", "requirements": "", "interface": "", "repo_language": "python",
           "fail_to_pass": "['tests/test_calc.py::test_add']", "pass_to_pass": '["tests/test_calc.py::test_mul"]',
           "before_repo_set_cmd": f"git reset --hard {base}\ngit clean -fd \ngit checkout {base} \n"
                                  f"git checkout {fix} -- tests/test_calc.py",
           "selected_test_files_to_run": "['tests/test_calc.py']", "dockerhub_tag": f"farmtest.calc-{fix[:12]}"}
    return row, mirror, scripts


def pro_overrides(rows: Path, mirror: Path, scripts: Path, tmp: Path) -> list[str]:
    """The farm overrides that load ``rows`` as SWE-bench Pro with the mirror and the scripts."""
    return ["benchmark=swebench-pro", f"benchmark.path={rows}", f"benchmark.repos={mirror}",
            f"benchmark.pro_scripts={scripts}", f"benchmark.cache_dir={tmp / 'cache'}"]


def write_rows(row: dict[str, Any], tmp: Path) -> Path:
    rows = tmp / "pro.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    return rows
