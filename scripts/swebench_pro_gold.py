#!/usr/bin/env python3
"""Validate SWE-bench Pro instance stand-ins: build, gold patch, empty patch.

For every row (``--rows``; ``--only`` / ``--repo`` / ``--limit`` narrow it) this builds the
instance stand-in from its own Dockerfiles (farm/sandbox/images/swebench_pro/), writes the row's
task directory (farm/tasks/swebench_pro/task_dir.py) and runs, in a fresh container from the
instance image with no network, what farm's trial runs: the task Dockerfile's set-up lines, the
gold patch (``solution/solve.sh``) or none, and ``tests/test.sh``. The logs it leaves are graded
by the instance's own ``parser.py`` on the host with farm's rule (farm/grade/swebench_pro.py) and,
beside it, the official way: the parser run inside the container with the image's python, as
``swe_bench_pro_eval.py``'s entry script runs it, and its ``output.json`` read by that script's rule
(every fail_to_pass and pass_to_pass name PASSED); a disagreement is recorded. One JSON line per instance goes to
``<out>/results.jsonl`` (build seconds, image size, both verdicts, the failing tests); instances
there are skipped, so it resumes. ``--prune`` removes each instance image after its runs.

Usage: ``python scripts/swebench_pro_gold.py --rows FILE --repos DIR --scripts DIR [--out DIR]
[--only ID ...] [--repo OWNER/NAME ...] [--limit N] [--prune] [--jobs N]`` (``make swebench-pro-gold``;
not CI). Summary table: ``--out DIR --summary``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from farm.grade.swebench_pro import grade_logs  # noqa: E402
from farm.sandbox.images.swebench_pro.build import ensure_pro_instance  # noqa: E402
from farm.tasks.swebench.mirror import MirrorError, RepoMirror  # noqa: E402
from farm.tasks.swebench_pro.rows import read_rows  # noqa: E402
from farm.tasks.swebench_pro.scripts import ProScripts  # noqa: E402
from farm.tasks.swebench_pro.task_dir import EXIT_FILE, STDERR_LOG, STDOUT_LOG, materialize  # noqa: E402

RUN_TIMEOUT_S = 3000  # the task's verifier timeout (Harbor's adapter)


class EngineError(RuntimeError):
    """podman failed before the evaluation ran: not a result, not recorded."""


def setup_lines(row: dict) -> list[str]:
    """The task Dockerfile's set-up (every line of before_repo_set_cmd but the last)."""
    return [ln.strip() for ln in row["before_repo_set_cmd"].strip().split("\n")[:-1] if ln.strip()]


def run_eval(image: str, task_dir: Path, gold: bool) -> tuple[dict[str, str | None], float, bool]:
    """The run script's logs after set-up, the gold patch or none, and tests/test.sh, in a fresh
    container without network; (logs by name, seconds, timed out)."""
    cmd = " && ".join(["cd /app", *setup_lines(json.loads((task_dir / "tests" / "config.json").read_text()))])
    cmd += " && mkdir -p /logs/verifier && "
    if gold:
        cmd += ("{ bash /solution/solve.sh > /logs/verifier/solve.log 2>&1 "
                "|| echo FARM_GOLD_APPLY_FAILED >> /logs/verifier/solve.log; }; ")
    cmd += "bash /tests/test.sh > /logs/verifier/test_sh.log 2>&1; "
    # what the official entry script runs next, in the container with its python: the parser on the
    # same two files; its output.json is read by the official rule (official() below)
    cmd += (f"cd /app && python /tests/parser.py {STDOUT_LOG} {STDERR_LOG} /logs/verifier/output.json "
            "> /logs/verifier/parser.log 2>&1")
    task_dir = task_dir.resolve()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="farm-pro-gold-") as logs:
        try:
            res = subprocess.run(["podman", "run", "--rm", "--network=none", "--entrypoint", "/bin/bash",
                                  "-v", f"{task_dir}/tests:/tests:ro", "-v", f"{task_dir}/solution:/solution:ro",
                                  "-v", f"{logs}:/logs/verifier", image, "-c", cmd],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)
            timed_out = False
            if res.returncode == 125:
                raise EngineError(f"podman run failed: {res.stdout.decode(errors='replace')[-500:]}")
        except subprocess.TimeoutExpired:
            timed_out = True
        out = {}
        for name, path in (("stdout", STDOUT_LOG), ("stderr", STDERR_LOG), ("exit", EXIT_FILE),
                           ("solve", "/logs/verifier/solve.log"), ("test_sh", "/logs/verifier/test_sh.log"),
                           ("output_json", "/logs/verifier/output.json")):
            f = Path(logs) / Path(path).name
            out[name] = f.read_text(errors="replace") if f.is_file() else None
    return out, time.monotonic() - t0, timed_out


def official(row: dict, logs: dict) -> bool:
    """swe_bench_pro_eval.py's verdict: its rule on the output.json the parser wrote inside the
    container (the official pipeline); no output.json, or one it cannot read, is "not resolved"."""
    try:
        tests = json.loads(logs.get("output_json") or "")["tests"]
        passed = {t["name"] for t in tests if t["status"] == "PASSED"}
    except (ValueError, KeyError, TypeError):
        return False
    return (set(row["fail_to_pass"]) | set(row["pass_to_pass"])) <= passed


def judge(row: dict, parser: Path, logs: dict, timed_out: bool) -> dict:
    if timed_out:
        return {"verdict": None, "why": f"timeout after {RUN_TIMEOUT_S} s"}
    if "FARM_GOLD_APPLY_FAILED" in (logs.get("solve") or ""):
        return {"verdict": None, "why": "gold patch did not apply: " + (logs.get("solve") or "")[-300:]}
    v = grade_logs(row, parser, logs["stdout"], logs["stderr"], logs["exit"])
    out = {"verdict": v.resolved, "status": v.status, "summary": v.summary()[:400],
           "official": official(row, logs), "official_parser": "in the container"}
    out["failing"] = v.missing[:20]
    if "could not be made from test_patch" in (logs.get("test_sh") or ""):
        out["fix_commit"] = "not made"
    return out


def image_size(tag: str) -> int | None:
    res = subprocess.run(["podman", "image", "inspect", tag, "--format", "{{.Size}}"], capture_output=True, text=True)
    return int(res.stdout.strip()) if res.returncode == 0 and res.stdout.strip().isdigit() else None


async def one(row: dict, args: argparse.Namespace, scripts: ProScripts, tasks_root: Path) -> dict:
    iid = row["instance_id"]
    rec: dict = {"id": iid, "repo": row["repo"], "date": time.strftime("%Y-%m-%d")}
    t0 = time.monotonic()
    try:
        built = await ensure_pro_instance("podman", row, args.repos, args.scripts, pythons=args.pythons, timeout=3600)
    except Exception as exc:  # noqa: BLE001 - every failure is recorded with its message
        rec.update(built=False, build_s=round(time.monotonic() - t0, 1), error=str(exc)[-2500:])
        return rec
    rec.update(built=True, build_s=round(time.monotonic() - t0, 1), layers_built=len(built.built),
               image_bytes=image_size(built.tag))
    task_dir = materialize(row, scripts.scripts(iid), scripts.env_lines(iid), tasks_root)
    for name, gold in (("gold", True), ("empty", False)):
        logs, secs, timed_out = await asyncio.to_thread(run_eval, built.tag, task_dir, gold)
        rec[name] = judge(row, task_dir / "tests" / "parser.py", logs, timed_out) | {"s": round(secs, 1)}
        if name == "gold" and rec[name].get("verdict") is not True:
            keep = Path(args.out) / "logs"
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{iid}.gold.log").write_text("\n\n".join(f"===== {k}\n{v}" for k, v in logs.items()))
    if args.prune:
        subprocess.run(["podman", "rmi", "-f", built.tag], capture_output=True)
    return rec


def summary(out: Path) -> str:
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    per: dict[str, Counter] = defaultdict(Counter)
    for r in recs:
        c = per[r["repo"]]
        g, e = r.get("gold", {}), r.get("empty", {})
        c["attempted"] += 1
        c["built"] += bool(r.get("built"))
        c["gold resolved"] += g.get("verdict") is True
        c["empty unresolved"] += e.get("verdict") is False
        c["valid"] += g.get("verdict") is True and e.get("verdict") is False
        c["farm = official rule"] += all(x.get("verdict") is None or x.get("official") == x.get("verdict")
                                         for x in (g, e)) and bool(r.get("built"))
    cols = ["attempted", "built", "gold resolved", "empty unresolved", "valid", "farm = official rule"]
    lines = ["| repository | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for repo in sorted(per):
        lines.append(f"| {repo} | " + " | ".join(str(per[repo][c]) for c in cols) + " |")
    return "\n".join(lines)


def merge_ceiling(out: Path, commit: str, directory: Path | None = None) -> Path:
    """Record every instance whose gold resolved and empty did not as ``pass`` in SWE-bench Pro's
    ceiling file, with where it was measured; failures are not written (on stand-ins they say what
    this machine's images lack; docs/benchmarks.md lists them with their causes)."""
    from farm.tasks.ceiling import merge_gold_results

    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    valid = sorted(r["id"] for r in recs if r.get("gold", {}).get("verdict") is True
                   and r.get("empty", {}).get("verdict") is False)
    dates = sorted(r["date"] for r in recs if r["id"] in set(valid))
    prov = {"kind": "measured", "where": "make swebench-pro-gold (scripts/swebench_pro_gold.py)",
            "date": dates[-1] if dates else time.strftime("%Y-%m-%d"), "commit": commit,
            "machine": "2-core x86_64 VM, Debian 12, podman + runc, no GPU",
            "images": "farm stand-ins built from each instance's own Dockerfiles (farm/sandbox/images/swebench_pro/): "
                      "Debian bookworm, the repository at the base commit only, build.sh through pypi-timemachine",
            "notes": "gold resolved and empty unresolved by the instance's parser, verifier without network"}
    return merge_gold_results("swebench_pro", {i: "pass" for i in valid}, provenance=prov,
                              provenance_id=f"farm-swebench-pro-gold-{commit}", directory=directory)


async def main_async(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done = {json.loads(line)["id"] for line in results.read_text().splitlines() if line.strip()} \
        if results.exists() else set()
    scripts = ProScripts.at(args.scripts, "--scripts")
    mirror = RepoMirror.at(args.repos, "--repos")
    rows = [r for r in read_rows(Path(args.rows)) if r["instance_id"] not in done
            and (not args.only or r["instance_id"] in set(args.only)) and (not args.repo or r["repo"] in args.repo)]
    todo = []
    for r in sorted(rows, key=lambda r: (r["repo"], r["instance_id"])):
        try:
            mirror.require_commit(r["repo"], r["base_commit"])
            todo.append(r)
        except MirrorError as exc:
            with results.open("a") as f:  # a named cause, recorded once
                f.write(json.dumps({"id": r["instance_id"], "repo": r["repo"], "date": time.strftime("%Y-%m-%d"),
                                    "built": False, "build_s": 0, "error": str(exc)}) + "\n")
    todo = todo[: args.limit] if args.limit is not None else todo
    print(f"{len(done)} done before, {len(todo)} to run now", flush=True)
    sem, lock = asyncio.Semaphore(args.jobs), asyncio.Lock()

    async def run(row: dict) -> None:
        async with sem:
            try:
                rec = await one(row, args, scripts, out / "tasks")
            except EngineError as exc:
                print(f"{row['instance_id']}: not recorded: {exc}", flush=True)
                return
        async with lock:
            with results.open("a") as f:
                f.write(json.dumps(rec) + "\n")
        print(f"{rec['id']}: built={rec.get('built')} ({rec['build_s']} s) gold={rec.get('gold', {}).get('verdict')} "
              f"empty={rec.get('empty', {}).get('verdict')}", flush=True)

    await asyncio.gather(*(run(r) for r in todo))
    print(summary(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--rows", default="../shared/fixtures/swebench-pro/swebench-pro-python-204.jsonl")
    p.add_argument("--repos", help="repository mirrors named <owner>+<name>")
    p.add_argument("--scripts", help="a copy of scaleapi/SWE-bench_Pro-os (Dockerfiles, run scripts, parsers)")
    p.add_argument("--pythons", default=None, help="CPython prefixes named by version (default ~/.pyenv/versions)")
    p.add_argument("--out", default="build/swebench-pro-gold")
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--repo", nargs="*", default=[], help="only these repositories (owner/name)")
    p.add_argument("--limit", type=int)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--prune", action="store_true")
    p.add_argument("--summary", action="store_true")
    p.add_argument("--merge-ceiling", metavar="COMMIT", help="record the valid instances in the ceiling file")
    args = p.parse_args(argv)
    if args.merge_ceiling:
        print(merge_ceiling(Path(args.out), args.merge_ceiling))
        return 0
    if args.summary:
        print(summary(Path(args.out)))
        return 0
    if not args.repos or not args.scripts:
        p.error("--repos and --scripts are required")
    os.environ.setdefault("CONTAINERS_CONF", "/var/tmp/farm-images/containers.conf")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
