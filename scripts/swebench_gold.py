#!/usr/bin/env python3
"""Validate SWE-bench instance environments by the hundred: build, gold patch, empty patch.

For every instance whose repository the mirror has (``--repos``, named ``<owner>+<name>``), in
the order given by ``--order`` (repositories), this builds the instance stand-in
(farm/sandbox/images/swebench/), then runs the instance's evaluation script twice in it with no
network: after the gold patch (farm's task ``solution/solve.sh``) and with no patch. Each log is
graded by farm (farm/grade/swebench.py) and, separately, by the swebench package's own top-level
``get_eval_report``; a disagreement is recorded as one. One JSON line per instance goes to
``<out>/results.jsonl``; instances already there are skipped, so it resumes where it stopped
(images are cached too). ``--prune`` removes each instance image after its runs (the
environment images stay), to keep the disk bounded.

Usage: ``python scripts/swebench_gold.py --rows FILE --repos DIR [--out DIR] [--only ID ...]
[--order REPO ...] [--limit N] [--prune] [--jobs N]`` (``make swebench-gold``; not CI).
Summary table: ``python scripts/swebench_gold.py --out DIR --summary``.
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

from farm.grade.swebench import grade_log  # noqa: E402
from farm.sandbox.images.swebench.build import ensure_instance  # noqa: E402
from farm.tasks.swebench import spec  # noqa: E402
from farm.tasks.swebench.mirror import MirrorError, RepoMirror  # noqa: E402
from farm.tasks.swebench.rows import read_rows  # noqa: E402
from farm.tasks.swebench.task_dir import materialize  # noqa: E402

RUN_TIMEOUT_S = 1800  # the swebench harness's default per-instance timeout


class EngineError(RuntimeError):
    """The container engine failed before the instance's evaluation ran: not a result, not recorded
    (the next sitting tries the instance again)."""


def available(row: dict, mirror: RepoMirror) -> str | None:
    """Why the mirror cannot serve the row, or None."""
    try:
        mirror.require_commit(row["repo"], row["base_commit"])
        packages = spec.specs_of(row).get("packages", "")
        if packages in ("requirements.txt", "environment.yml"):
            mirror.require_commit(row["repo"], row["environment_setup_commit"], "environment_setup_commit")
    except (MirrorError, ValueError) as exc:
        return str(exc)
    return None


def official_verdict(row: dict, log: str) -> bool:
    """The package's own report function on the same log (what run_evaluation writes)."""
    from swebench.harness.grading import get_eval_report

    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(log)
    try:
        report = get_eval_report(spec.grading_spec(row), {"instance_id": row["instance_id"],
                                                          "model_patch": "x", "model_name_or_path": "gold"},
                                 f.name, include_tests_status=False)
    finally:
        os.unlink(f.name)
    return bool(report[row["instance_id"]]["resolved"])


def run_eval(image: str, task_dir: Path, gold: bool) -> tuple[str, float, bool]:
    """The evaluation script's log in a fresh container from ``image`` (no network)."""
    cmd = ("bash /solution/solve.sh > /tmp/solve.log 2>&1 || { cat /tmp/solve.log; echo FARM_GOLD_APPLY_FAILED; "
           "exit 3; }; " if gold else "") + "bash /tests/eval.sh 2>&1"
    t0 = time.monotonic()
    # absolute: podman reads a relative source as the name of a volume, and the run never starts
    task_dir = task_dir.resolve()
    try:
        res = subprocess.run(["podman", "run", "--rm", "--network=none", "-v", f"{task_dir}/tests:/tests:ro",
                              "-v", f"{task_dir}/solution:/solution:ro", image, "bash", "-c", cmd],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)
        text = res.stdout.decode("utf-8", errors="replace")
        if res.returncode == 125:  # podman's own failure: no container ran, so there is no verdict to record
            raise EngineError(f"podman run failed before the evaluation started: {text[-500:]}")
        return text, time.monotonic() - t0, False
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode("utf-8", errors="replace")
        return out, time.monotonic() - t0, True


def judge(row: dict, log: str, timed_out: bool) -> dict:
    if timed_out:
        return {"verdict": None, "why": f"timeout after {RUN_TIMEOUT_S} s"}
    if "FARM_GOLD_APPLY_FAILED" in log:
        return {"verdict": None, "why": "gold patch did not apply: " + log[-300:]}
    v = grade_log(row, log)
    out = {"verdict": v.resolved, "status": v.status, "summary": v.summary()}
    if v.resolved is not None:
        out["official"] = official_verdict(row, log)
        out["failing"] = sorted(set(v.report.get("FAIL_TO_PASS", {}).get("failure", []))
                                | set(v.report.get("PASS_TO_PASS", {}).get("failure", [])))[:20]
    return out


async def one(row: dict, args: argparse.Namespace, tasks_root: Path) -> dict:
    rec: dict = {"id": row["instance_id"], "repo": row["repo"], "version": row["version"],
                 "python": str(spec.specs_of(row)["python"]), "date": time.strftime("%Y-%m-%d")}
    t0 = time.monotonic()
    try:
        built = await ensure_instance("podman", row, args.repos, pythons=args.pythons, timeout=3600)
    except Exception as exc:  # noqa: BLE001 - every failure is recorded with its message
        rec.update(built=False, build_s=round(time.monotonic() - t0, 1), error=str(exc)[-2500:])
        return rec
    rec.update(built=True, build_s=round(time.monotonic() - t0, 1), layers_built=len(built.built))
    task_dir = materialize(row, tasks_root)
    for name, gold in (("gold", True), ("empty", False)):
        log, secs, timed_out = await asyncio.to_thread(run_eval, built.tag, task_dir, gold)
        rec[name] = judge(row, log, timed_out) | {"s": round(secs, 1)}
        if name == "gold" and rec[name].get("verdict") is not True:
            (Path(args.out) / "logs").mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "logs" / f"{row['instance_id']}.gold.log").write_text(log)
    if args.prune:
        subprocess.run(["podman", "rmi", "-f", built.tag], capture_output=True)
    return rec


def cause(rec: dict, out: Path) -> str | None:
    """Why an attempted instance is not a valid one (gold resolved, empty not), from its record and
    the kept gold log; None when it is valid."""
    gold, empty = rec.get("gold", {}), rec.get("empty", {})
    if not rec.get("built"):
        err = rec.get("error", "")
        if "has no commit" in err:
            return "not built: the mirror lacks a commit it needs"
        if "needs CPython" in err:
            return "not built: no CPython for the spec's version here"
        if "unable to read" in err or "repository corruption" in err:
            return "not built: the mirror snapshot lacks objects of this commit"
        if "unable to resolve host address" in err:
            return "not built: the recipe downloads from a host this machine cannot reach (" + \
                err.split("unable to resolve host address", 1)[1].split("\n", 1)[0].strip(" '") + ")"
        if "astropy_helpers" in err:
            return "not built: astropy_helpers (a git submodule its setup fetches at install time) is unavailable"
        if "Cythonizing" in err:
            return ("not built: compiling its Cython extensions failed (Cython 3 resolved where conda's "
                    "environment had 0.29: no date cut-off below Python 3.9)")
        if "numpy==1.19.2" in err:
            return "not built: numpy 1.19.2 has no wheel for this Python on PyPI (conda had a build)"
        step = "setup_env.sh" if "setup_env" in err else "setup_repo.sh" if "setup_repo" in err else "a layer"
        return f"not built: {step} failed (" + ("network lookups failed" if "name resolution" in err
                                                 else "see its build log") + ")"
    if gold.get("verdict") is not True:
        log = out / "logs" / f"{rec['id']}.gold.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        if gold.get("verdict") is None:
            return f"gold: no verdict ({gold.get('why') or gold.get('status')})"
        tests_part = text.partition(">>>>> Start Test Output")[2]
        if "name resolution" in tests_part or "Name or service not known" in tests_part:
            return "gold unresolved: the tests call a network service (the verifier has no network)"
        # offline, the evaluation script's re-install always fails to fetch its build requirements,
        # harmlessly where the package is installed editable; it is the cause only when the tests
        # then miss a module (a dependency the patch adds)
        if "Temporary failure in name resolution" in text and "No module named" in tests_part:
            return ("gold unresolved: a module the patch needs is not installed "
                    "(the eval's re-install needs the network)")
        failing = gold.get("failing") or []
        return f"gold unresolved: {len(failing)} test(s) fail, e.g. {failing[0] if failing else '?'}"
    if empty.get("verdict") is not False:
        return "empty: " + ("no verdict" if empty.get("verdict") is None else "resolved without a patch")
    return None


def failures(out: Path) -> str:
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    lines = [f"| {r['id']} | {r['version']} | {c} |" for r in sorted(recs, key=lambda r: r["id"])
             if (c := cause(r, out)) is not None]
    return "\n".join(["| instance | version | cause |", "|---|---|---|", *lines])


def merge_ceiling(out: Path, commit: str, directory: Path | None = None) -> Path:
    """Record every instance whose gold resolved (and empty did not) here as ``pass`` in SWE-bench
    Verified's ceiling file (farm/tasks/ceilings/), with where it was measured. Failures are not
    written: on stand-ins they say what this machine's environments lack, not what the benchmark
    allows (docs/benchmarks.md lists them with their causes)."""
    from farm.sandbox.images.swebench.recipe import RESOLVE_AS_OF
    from farm.tasks.ceiling import merge_gold_results

    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    valid = sorted(r["id"] for r in recs if cause(r, out) is None)
    dates = sorted(r["date"] for r in recs if r["id"] in set(valid))
    prov = {"kind": "measured", "where": "make swebench-gold (scripts/swebench_gold.py)",
            "date": dates[-1] if dates else time.strftime("%Y-%m-%d"), "commit": commit,
            "machine": "2-core x86_64 VM, Debian 12, podman + runc, no GPU",
            "images": f"farm stand-ins built from swebench {spec.SWEBENCH_VERSION}'s scripts, packages as uploaded "
                      f"before {RESOLVE_AS_OF} (Python >= 3.9)",
            "notes": "gold patch resolved and empty patch unresolved, verifier without network"}
    return merge_gold_results("swebench_verified", {i: "pass" for i in valid}, provenance=prov,
                              provenance_id=f"farm-swebench-gold-{commit}", directory=directory)


def summary(out: Path) -> str:
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    per = defaultdict(Counter)
    for r in recs:
        c = per[r["repo"]]
        c["attempted"] += 1
        c["built"] += bool(r.get("built"))
        c["gold resolved"] += r.get("gold", {}).get("verdict") is True
        c["empty unresolved"] += r.get("empty", {}).get("verdict") is False
        c["valid"] += r.get("gold", {}).get("verdict") is True and r.get("empty", {}).get("verdict") is False
        c["disagree"] += any(r.get(k, {}).get("verdict") is not None
                             and r[k].get("official") is not None and r[k]["official"] != r[k]["verdict"]
                             for k in ("gold", "empty"))
    cols = ["attempted", "built", "gold resolved", "empty unresolved", "valid", "disagree"]
    lines = ["| repository | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    total = Counter()
    for repo in sorted(per):
        total.update(per[repo])
        lines.append(f"| {repo} | " + " | ".join(str(per[repo][c]) for c in cols) + " |")
    lines.append("| **all** | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done = {json.loads(line)["id"] for line in results.read_text().splitlines() if line.strip()} \
        if results.exists() else set()
    mirror = RepoMirror.at(args.repos, "--repos")
    rows = read_rows(Path(args.rows))
    if args.only:
        rows = [r for r in rows if r["instance_id"] in set(args.only)]
    order = {repo: i for i, repo in enumerate(args.order or [])}
    rows.sort(key=lambda r: (order.get(r["repo"], len(order)), r["repo"], r["version"], r["instance_id"]))
    todo = []
    for r in rows:
        if r["instance_id"] in done:
            continue
        why = available(r, mirror)
        if why is None:
            todo.append(r)
        elif args.verbose:
            print(f"not run: {r['instance_id']}: {why}", flush=True)
    if args.interleave:  # one runnable instance of each repository in turn: breadth early
        by_repo: dict[str, list[dict]] = defaultdict(list)
        for r in todo:
            by_repo[r["repo"]].append(r)
        queues = list(by_repo.values())
        todo = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
    if args.limit is not None:
        todo = todo[: args.limit]
    print(f"{len(done)} done before, {len(todo)} to run now", flush=True)
    tasks_root = out / "tasks"
    sem = asyncio.Semaphore(args.jobs)
    lock = asyncio.Lock()

    async def run(row: dict) -> None:
        async with sem:
            try:
                rec = await one(row, args, tasks_root)
            except EngineError as exc:
                print(f"{row['instance_id']}: not recorded: {exc}", flush=True)
                return
        async with lock:
            with results.open("a") as f:
                f.write(json.dumps(rec) + "\n")
        g, e = rec.get("gold", {}).get("verdict"), rec.get("empty", {}).get("verdict")
        print(f"{rec['id']}: built={rec.get('built')} ({rec['build_s']} s) gold={g} empty={e}", flush=True)

    await asyncio.gather(*(run(r) for r in todo))
    print(summary(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="../shared/fixtures/swebench-verified/swebench-verified.jsonl")
    p.add_argument("--repos", help="repository mirrors named <owner>+<name>")
    p.add_argument("--pythons", default=None, help="CPython prefixes named by version (default ~/.pyenv/versions)")
    p.add_argument("--out", default="build/swebench-gold")
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--order", nargs="*", default=[], help="repositories first, in this order")
    p.add_argument("--limit", type=int)
    p.add_argument("--interleave", action="store_true", help="take the repositories in turn")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--prune", action="store_true")
    p.add_argument("--summary", action="store_true")
    p.add_argument("--failures", action="store_true", help="list each failing instance with its cause")
    p.add_argument("--merge-ceiling", metavar="COMMIT", help="record the valid instances in the ceiling file")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.merge_ceiling:
        print(merge_ceiling(Path(args.out), args.merge_ceiling))
        return 0
    if args.summary or args.failures:
        print(summary(Path(args.out)) if args.summary else failures(Path(args.out)))
        return 0
    if not args.repos:
        p.error("--repos is required (a directory of repository mirrors named <owner>+<name>)")
    os.environ.setdefault("CONTAINERS_CONF", "/var/tmp/farm-images/containers.conf")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
