#!/usr/bin/env python3
"""Validate the bundled task suite (farm/tasks/builtin) without farm itself.

For every task, this replays environment/Dockerfile (WORKDIR / ENV / COPY / RUN) into fresh
directories and runs the task inside bubblewrap, the way the local backend will: a read-only
host system, private writable /app-style workdirs plus /tmp /root /tests /logs /solution, no
network, own PID namespace. Two checks per task:

  nop     test.sh on the untouched environment must give reward 0;
  oracle  on a fresh build, solution/solve.sh then test.sh (same sandbox, so a service the
          solution leaves running is still there) must give reward 1.

/tests is empty while solve.sh runs and is filled just before test.sh, as Harbor does.
Usage: python3 tests/tasks/builtin_check.py [--task ID ...] [--jobs N] [--keep]
Prints a table and exits non-zero if any task fails a check or is too slow.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

SUITE = Path(__file__).resolve().parents[2] / "farm" / "tasks" / "builtin"
SCRATCH_DIRS = ("/tmp", "/root", "/tests", "/logs", "/solution")
SYSTEM_TOPS = {"usr", "etc", "bin", "sbin", "lib", "lib64", "proc", "dev", "sys", "run", "var"}
ORACLE_LIMIT_S = 10.0
VERIFY_LIMIT_S = 20.0
HARD_TIMEOUT_S = 120.0
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
# Runs inside the sandbox: the "agent" phase, a handshake while the host uploads /tests,
# then the verifier phase.
DRIVER = r"""
cd "$FARM_WORKDIR" || exit 97
if [ "$FARM_SOLVE" = 1 ]; then
  chmod +x /solution/solve.sh
  /solution/solve.sh </dev/null >/logs/agent/oracle.txt 2>&1
  echo "solve.sh exit code $?" >>/logs/agent/oracle.txt
fi
echo AGENT-DONE
read -r _
cd "$FARM_WORKDIR" || exit 98
rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
chmod +x /tests/test.sh
/tests/test.sh </dev/null >/logs/verifier/test-stdout.txt 2>&1
"""


class CheckError(Exception):
    pass


@dataclass
class Build:
    root: Path
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    tops: set[str] = field(default_factory=set)

    def host(self, path: str) -> Path:
        top = path.strip("/").split("/")[0]
        if not top or top in SYSTEM_TOPS:
            raise CheckError(f"path {path!r} is not writable in the sandbox")
        if "/" + top not in SCRATCH_DIRS:
            self.tops.add(top)
        return self.root / path.lstrip("/")


def dockerfile_steps(path: Path) -> list[tuple[str, str]]:
    steps, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        steps.append((keyword.upper(), rest.strip()))
    return steps


def bwrap_argv(build: Build, net: bool = False) -> list[str]:
    argv = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if not net:
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("bin", "sbin", "lib", "lib64"):
        p = Path("/" + name)
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), str(p)]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for d in sorted({*(SCRATCH_DIRS), *("/" + t for t in build.tops)}):
        host = build.root / d.lstrip("/")
        host.mkdir(parents=True, exist_ok=True)
        argv += ["--bind", str(host), d]
    argv += ["--clearenv"]
    for k, v in {**BASE_ENV, **build.env}.items():
        argv += ["--setenv", k, v]
    return argv


def copy_into(src: Path, dest: Path, dest_is_dir: bool) -> None:
    if src.is_dir():
        shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)
    elif dest_is_dir or dest.is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / src.name)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)


def build_task(task: Path, root: Path) -> Build:
    build = Build(root=root)
    for d in SCRATCH_DIRS:
        (root / d.lstrip("/")).mkdir(parents=True)
    for sub in ("agent", "verifier", "artifacts"):
        (root / "logs" / sub).mkdir()
    context = task / "environment"
    for keyword, arg in dockerfile_steps(context / "Dockerfile"):
        if keyword == "FROM":
            if not arg.startswith("python:3.11"):
                raise CheckError(f"FROM {arg!r}: the local backend serves python:3.11 images only")
        elif keyword == "WORKDIR":
            build.workdir = os.path.normpath(os.path.join(build.workdir, arg))
            build.host(build.workdir).mkdir(parents=True, exist_ok=True)
        elif keyword == "ENV":
            words = shlex.split(arg)
            if words and "=" not in words[0]:
                build.env[words[0]] = arg.split(None, 1)[1]
            else:
                for word in words:
                    key, _, value = word.partition("=")
                    build.env[key] = value
        elif keyword == "COPY":
            *srcs, dest = shlex.split(arg)
            dest_abs = os.path.normpath(os.path.join(build.workdir, dest))
            for src in srcs:
                source = (context / src).resolve()
                if not source.is_relative_to(context.resolve()) or not source.exists():
                    raise CheckError(f"COPY source {src!r} not found in {context}")
                copy_into(source, build.host(dest_abs), dest.endswith("/") or len(srcs) > 1)
        elif keyword == "RUN":
            argv = bwrap_argv(build) + ["--chdir", build.workdir, "/bin/sh", "-c", arg]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=HARD_TIMEOUT_S)
            if proc.returncode:
                raise CheckError(f"RUN {arg!r} exited {proc.returncode}: {proc.stderr[-800:]}")
        else:
            raise CheckError(f"Dockerfile instruction {keyword} is not supported by the local backend")
    return build


def read_reward(logs: Path) -> float | None:
    json_file, txt_file = logs / "verifier" / "reward.json", logs / "verifier" / "reward.txt"
    if json_file.exists():
        return float(json.loads(json_file.read_text())["reward"])
    if txt_file.exists() and txt_file.read_text().strip():
        return float(txt_file.read_text().strip())
    return None


def split_report(logs: Path) -> list[str]:
    """For unittest-graded tasks: problems with the FAIL_TO_PASS / PASS_TO_PASS split.

    On the untouched environment every FAIL_TO_PASS test must fail (else it tests nothing)
    and every PASS_TO_PASS test must pass (else the task is unsolvable as stated).
    """
    path = logs / "verifier" / "report.json"
    if not path.exists():
        return []
    report = json.loads(path.read_text())
    problems = [f"FAIL_TO_PASS {t} passes without the fix"
                for t, s in report.get("fail_to_pass", {}).items() if s == "passed"]
    problems += [f"PASS_TO_PASS {t} is {s} without the fix"
                 for t, s in report.get("pass_to_pass", {}).items() if s != "passed"]
    return problems


def trial(task: Path, root: Path, solve: bool) -> tuple[float | None, float, float, str]:
    """Build, optionally run solve.sh, then test.sh. Returns (reward, agent_s, verify_s, log)."""
    build = build_task(task, root)
    if solve:
        shutil.copytree(task / "solution", root / "solution", dirs_exist_ok=True)
    argv = bwrap_argv(build) + [
        "--setenv", "FARM_WORKDIR", build.workdir, "--setenv", "FARM_SOLVE", str(int(solve)),
        "/bin/bash", "-c", DRIVER,
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        agent_s = time.monotonic() - t0
        if line.strip() != "AGENT-DONE":
            raise CheckError(f"sandbox ended before the verifier phase: {line!r}")
        shutil.copytree(task / "tests", root / "tests", dirs_exist_ok=True)
        t1 = time.monotonic()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        proc.wait(timeout=HARD_TIMEOUT_S)
        verify_s = time.monotonic() - t1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    logs = root / "logs"
    text = ""
    for name in ("agent/oracle.txt", "verifier/test-stdout.txt"):
        if (logs / name).exists():
            text += f"--- {name}\n" + (logs / name).read_text(errors="replace")[-3000:]
    if not solve:
        text = "\n".join(split_report(logs)) + "\n" + text
        if split_report(logs):
            raise CheckError("bad FAIL_TO_PASS / PASS_TO_PASS split:\n" + text)
    return read_reward(logs), agent_s, verify_s, text


def check_metadata(task: Path) -> str:
    config = tomllib.loads((task / "task.toml").read_text())
    category = config["metadata"]["category"]
    if category not in ("swe", "terminal", "security"):
        raise CheckError(f"metadata.category {category!r} is not swe/terminal/security")
    for role in ("agent", "verifier"):
        if config[role].get("network_mode") != "no-network":
            raise CheckError(f"[{role}] network_mode must be no-network")
    if not (task / "instruction.md").read_text().strip():
        raise CheckError("instruction.md is empty")
    for required in ("tests/test.sh", "solution/solve.sh", "environment/Dockerfile"):
        if not (task / required).is_file():
            raise CheckError(f"{required} is missing")
    return category


def check_task(task: Path, keep: bool) -> dict:
    row = {"task": task.name, "category": "?", "nop": None, "oracle": None,
           "oracle_s": None, "verify_s": None, "ok": False, "problem": ""}
    scratch = Path(tempfile.mkdtemp(prefix=f"builtin-{task.name}-"))
    try:
        row["category"] = check_metadata(task)
        row["nop"], _, nop_verify_s, nop_log = trial(task, scratch / "nop", solve=False)
        row["oracle"], row["oracle_s"], row["verify_s"], log = trial(task, scratch / "oracle", solve=True)
        row["verify_s"] = max(row["verify_s"], nop_verify_s)
        problems = []
        if row["nop"] != 0:
            problems.append(f"untouched environment scored {row['nop']}\n{nop_log}")
        if row["oracle"] != 1:
            problems.append(f"oracle scored {row['oracle']}\n{log}")
        if row["oracle_s"] > ORACLE_LIMIT_S:
            problems.append(f"oracle took {row['oracle_s']:.1f}s > {ORACLE_LIMIT_S}s")
        if row["verify_s"] > VERIFY_LIMIT_S:
            problems.append(f"verifier took {row['verify_s']:.1f}s > {VERIFY_LIMIT_S}s")
        row["problem"] = "\n".join(problems)
        row["ok"] = not problems
    except (CheckError, KeyError, OSError, subprocess.SubprocessError, ValueError) as exc:
        row["problem"] = f"{type(exc).__name__}: {exc}"
    finally:
        if keep:
            print(f"kept {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append", help="task id (repeatable); default: all")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        print("bwrap (Debian package bubblewrap) is required", file=sys.stderr)
        return 2
    tasks = sorted(p for p in SUITE.iterdir() if (p / "task.toml").is_file())
    if args.task:
        unknown = set(args.task) - {t.name for t in tasks}
        if unknown:
            print(f"unknown task id(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        tasks = [t for t in tasks if t.name in args.task]
    # The unittest grader is copied into each task (tasks must be self-contained); copies
    # that drift apart would grade tasks differently.
    graders = {p.read_bytes() for p in SUITE.glob("*/tests/grade.py")}
    if len(graders) > 1:
        print("the copies of tests/grade.py differ between tasks", file=sys.stderr)
        return 1
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda t: check_task(t, args.keep), tasks))

    def fmt(v: object) -> str:
        return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))

    def reward(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    header = f"{'task':34} {'category':9} {'nop':>4} {'oracle':>6} {'oracle_s':>8} {'verify_s':>8}  result"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['task']:34} {r['category']:9} {reward(r['nop']):>4} {reward(r['oracle']):>6} "
              f"{fmt(r['oracle_s']):>8} {fmt(r['verify_s']):>8}  {'ok' if r['ok'] else 'FAIL'}")
    failed = [r for r in rows if not r["ok"]]
    counts = {c: sum(r["category"] == c for r in rows) for c in ("swe", "terminal", "security")}
    print(f"\n{len(rows) - len(failed)}/{len(rows)} tasks pass; by category: {counts}")
    for r in failed:
        print(f"\n== {r['task']}: {r['problem']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
