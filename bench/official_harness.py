"""farm and the official SWE-bench harness on the same images and the same predictions, side by side.

    .venv/bin/python bench/official_harness.py PREDICTIONS... --rows ROWS.jsonl --repos /srv/mirrors/github \\
        [--pythons DIR] [--validated docs/data/swebench-verified-gold.jsonl] [--instances ID ...] \\
        [--sample 60 --seed 0] [--max-workers 2] [--out DIR] [--resume] [--json]

``PREDICTIONS`` are files ``farm grade`` reads (JSONL, JSON list, JSON by id; fields
``instance_id``, ``model_name_or_path``, ``model_patch``), e.g. the published submissions'
``<submission>/preds.jsonl``, or ``gold`` for the rows' own patches. The instances are those every
file and the rows hold whose repository mirror ``--repos`` has, narrowed to what a gold sitting
validated (``--validated``), to ``--instances``, or to a seeded ``--sample`` that takes one
instance of each repository in turn. Then:

1. ``farm images build`` makes every chosen instance's stand-in image present (not timed: both
   sides then start from the same cached images).
2. Per predictions file, farm grades it: ``farm grade`` on ``sandbox=docker`` (podman) at
   ``run.max_in_flight=--max-workers``; its rows land in ``OUT/<file>/farm-store``.
3. The ``swebench`` package's own ``run_evaluation`` grades the same file with ``--max_workers``
   the same and ``--namespace swebench`` (the image names farm's builder gives its stand-ins),
   talking to a podman API service this script starts on a socket of its own (``DOCKER_HOST``)
   and stops by its PID. The package is imported, never copied or patched on disk; two things
   are set around it in its own process: the requirement files it downloads from GitHub when it
   makes a test spec are answered from the mirror (farm/tasks/swebench/spec.py ``served_from``),
   and rows that carry their own ``spec`` (a made instance) are registered the way farm
   registers them. Its run report and logs land in ``OUT/<file>/harness``.
4. ``farm report --official``'s pairing (farm/report/official.py) sets both verdicts per instance
   side by side; per file the table and the agreement (and farm's agreement with the published
   ``results.json`` where one lies beside the file, the leaderboard's layout), then the totals,
   each side's wall time and their ratio are printed (``--json``: also as JSON). Exit 0 when every pair was compared
   and agreed, else 1.

Nothing else may be busy on the machine while it runs: the wall times are half the point.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from farm.agent.predictions import load_predictions  # noqa: E402
from farm.report.data import load_run  # noqa: E402
from farm.report.official import Agreement, agreement, agreement_lines, load_official  # noqa: E402
from farm.store.results import ResultStore  # noqa: E402

RUN_ID = "farm-beside"  # the harness's run id (its log directory and its report's name)


def read_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def choose(ids: list[str], rows: dict[str, dict[str, Any]], *, only: list[str] | None, sample: int | None,
           seed: int) -> list[str]:
    """The instances to grade: ``ids`` (the predictions') that the rows hold, narrowed to
    ``only``, or a seeded sample of ``sample`` taking one instance of each repository in turn, so
    that a small sample covers every repository before it takes a second from any."""
    held = [i for i in ids if i in rows]
    if only:
        missing = [i for i in only if i not in held]
        if missing:
            raise SystemExit(f"--instances: not in both the predictions and the rows: {missing[:10]}")
        return sorted(only)
    if not sample or sample >= len(held):
        return sorted(held)
    by_repo: dict[str, list[str]] = defaultdict(list)
    for i in sorted(held):
        by_repo[rows[i]["repo"]].append(i)
    rng = random.Random(seed)
    for members in by_repo.values():
        rng.shuffle(members)
    picked: list[str] = []
    while len(picked) < sample:
        for repo in sorted(by_repo):
            if by_repo[repo] and len(picked) < sample:
                picked.append(by_repo[repo].pop())
    return sorted(picked)


def write_inputs(work: Path, predictions: str, rows: dict[str, dict[str, Any]], chosen: list[str]) -> tuple[Path, Path]:
    """The chosen rows and their predictions as JSONL files both sides read."""
    if predictions == "gold":
        preds = [{"instance_id": i, "model_name_or_path": "gold", "model_patch": rows[i]["patch"]} for i in chosen]
    else:
        loaded = load_predictions(predictions).by_id
        preds = [{"instance_id": i, "model_name_or_path": loaded[i].model, "model_patch": loaded[i].patch}
                 for i in chosen]
    rows_path, preds_path = work / "rows.jsonl", work / "predictions.jsonl"
    rows_path.write_text("".join(json.dumps(rows[i]) + "\n" for i in chosen), encoding="utf-8")
    preds_path.write_text("".join(json.dumps(p) + "\n" for p in preds), encoding="utf-8")
    return rows_path, preds_path


def farm_overrides(args: argparse.Namespace, rows_path: Path, work: Path) -> list[str]:
    out = ["benchmark=swebench-verified", f"benchmark.path={rows_path}", f"benchmark.repos={args.repos}",
           f"benchmark.cache_dir={work / 'cache'}", "sandbox=docker", "sandbox.docker.engine=podman",
           "sandbox.image_policy=build", "sandbox.docker.pull=never", "run.executor=local"]
    if args.pythons:
        out.append(f"benchmark.pythons={args.pythons}")
    return out + list(args.farm_override)


def _run(cmd: list[str], what: str, env: dict[str, str], cwd: Path, ok: tuple[int, ...] = (0,)) -> float:
    """Seconds ``cmd`` took; an exit status outside ``ok`` ends the sweep with its output."""
    t0 = time.monotonic()
    res = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    took = time.monotonic() - t0
    if res.returncode not in ok:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"{what} failed ({res.returncode}): {' '.join(cmd[:6])} ...")
    return took


class PodmanService:
    """``podman system service`` on a socket of this run's own, stopped by its PID."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.socket = directory / "podman.sock"
        self.proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{self.socket}"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=(directory / "podman-service.log").open("wb"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"podman system service exited ({self.proc.returncode}); "
                                 f"see {directory / 'podman-service.log'}")
            if self.socket.exists() and self._answers():
                return
            time.sleep(0.1)
        self.stop()
        raise SystemExit("podman system service did not answer on its socket within 60 s")

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(self.socket))
                s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
                return b"OK" in s.recv(4096)
            except OSError:
                return False

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def harness_child(config: Path) -> int:
    """In a process of its own: the package's run_evaluation on the chosen predictions."""
    c = json.loads(config.read_text())
    from farm.tasks.swebench.mirror import RepoMirror
    from farm.tasks.swebench.spec import register, served_from

    rows = read_rows(Path(c["rows"]))
    for row in rows:
        register(row)  # a made instance's own spec; a Verified row is the package's already
    from swebench.harness.run_evaluation import main as run_evaluation

    with served_from(RepoMirror.at(c["repos"])):
        report = run_evaluation(dataset_name=c["rows"], split="test", instance_ids=[r["instance_id"] for r in rows],
                                predictions_path=c["predictions"], max_workers=c["max_workers"],
                                force_rebuild=False, cache_level="instance", clean=False, open_file_limit=4096,
                                run_id=RUN_ID, timeout=c["timeout"], namespace="swebench", rewrite_reports=False,
                                modal=False, report_dir=c["out"])
    Path(c["report_path"]).write_text(str(Path(report).resolve()))
    return 0


def run_harness(args: argparse.Namespace, work: Path, rows_path: Path, preds_path: Path,
                env: dict[str, str]) -> tuple[Path, float]:
    out = work / "harness"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report-path").unlink(missing_ok=True)
    config = out / "config.json"
    config.write_text(json.dumps({"rows": str(rows_path), "predictions": str(preds_path), "repos": str(args.repos),
                                  "max_workers": args.max_workers, "timeout": args.timeout, "out": str(out),
                                  "report_path": str(out / "report-path")}))
    service = PodmanService(out, env)
    try:
        took = _run([sys.executable, __file__, "--harness-child", str(config)], "the official harness",
                    {**env, "DOCKER_HOST": service.docker_host}, out)
    finally:
        service.stop()
    return Path((out / "report-path").read_text().strip()), took


def compare(store_dir: Path, report: Path) -> Agreement:
    store = ResultStore.open(str(store_dir), None, None, create=False)
    (run_id,) = store.list_runs()
    return agreement(load_run(store, run_id), load_official(report))


def table(a: Agreement) -> list[str]:
    lines = [f"{'instance':<48} {'farm':<12} {'official':<12} agree"]
    lines += [f"{p.instance_id:<48} {p.farm:<12} {p.official or '-':<12} "
              f"{'-' if p.agree is None else ('yes' if p.agree else 'NO')}" for p in a.pairs]
    return lines


def source_label(predictions: str) -> str:
    """A short name per predictions file: its folder's (the leaderboard's layout
    ``<submission>/preds.jsonl``) or its own stem."""
    if predictions == "gold":
        return "gold"
    p = Path(predictions)
    return p.parent.name if p.stem in ("preds", "all_preds", "predictions") else p.stem


def validated_ids(path: Path) -> set[str]:
    """Instances whose gold resolves and whose empty patch does not (a gold sitting's record,
    docs/data/swebench-verified-gold.jsonl)."""
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            if (r.get("gold") or {}).get("verdict") is True and (r.get("empty") or {}).get("verdict") is False:
                out.add(r["id"])
    return out


def grade_one(args: argparse.Namespace, source: str, rows: dict[str, dict[str, Any]], chosen: list[str],
              work: Path, env: dict[str, str]) -> dict[str, Any]:
    """Both sides on one predictions file; the agreement and both wall times."""
    work.mkdir(parents=True, exist_ok=True)
    rows_path, preds_path = write_inputs(work, source, rows, chosen)
    store = work / "farm-store"
    if not args.resume:  # each side grades from scratch: no resumed rows, wall times of the whole
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(work / "harness", ignore_errors=True)
    farm_s = _run([sys.executable, "-m", "farm.cli", "grade", "-q", str(preds_path),
                   *farm_overrides(args, rows_path, work), f"store.uri={store}",
                   f"run.max_in_flight={args.max_workers}"], "farm grade", env, REPO,
                  ok=(0, 4))  # 4: trials still infra_error; listed apart as "farm not graded", never dropped
    report, harness_s = run_harness(args, work, rows_path, preds_path, env)
    out = {"agreement": compare(store, report), "farm_s": farm_s, "harness_s": harness_s}
    published = Path(source).parent / "results.json"
    if source != "gold" and published.is_file():  # the leaderboard's layout: the official results beside
        out["published"] = compare(store, published)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("predictions", nargs="*", help="predictions files, or 'gold'")
    ap.add_argument("--rows", type=Path, help="SWE-bench rows (JSONL or a JSON list)")
    ap.add_argument("--repos", type=Path, help="repository mirrors named <owner>+<name>; instances of other "
                    "repositories are left out")
    ap.add_argument("--pythons", type=Path, help="CPython prefixes for the stand-ins (benchmark.pythons)")
    ap.add_argument("--validated", type=Path, help="only instances a gold sitting validated (its record, e.g. "
                    "docs/data/swebench-verified-gold.jsonl)")
    ap.add_argument("--instances", nargs="+", help="grade only these")
    ap.add_argument("--sample", type=int, help="a seeded sample of this many, every repository in turn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-workers", type=int, default=2, help="the harness's --max_workers and farm's "
                    "run.max_in_flight")
    ap.add_argument("--timeout", type=int, default=1800, help="the harness's per-instance timeout, seconds")
    ap.add_argument("--out", type=Path, help="where both sides write (default: a new temporary directory)")
    ap.add_argument("--farm-override", action="append", default=[], help="one more farm override (repeatable)")
    ap.add_argument("--resume", action="store_true", help="keep what an earlier run with the same --out graded "
                    "(both sides go on where they stopped; the wall times then cover this run only)")
    ap.add_argument("--json", action="store_true", help="also print the result as JSON")
    ap.add_argument("--harness-child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.harness_child:
        return harness_child(args.harness_child)
    if not (args.predictions and args.rows and args.repos):
        ap.error("PREDICTIONS, --rows and --repos are required")
    if shutil.which("podman") is None:
        raise SystemExit("podman is not installed (the harness talks to its API service)")

    rows = {r["instance_id"]: r for r in read_rows(args.rows)
            if (args.repos / r["repo"].replace("/", "+")).exists()}
    if args.validated:
        keep = validated_ids(args.validated)
        rows = {i: r for i, r in rows.items() if i in keep}
    ids: set[str] = set(rows)
    for source in args.predictions:  # every file grades the same instances: the sides compare alike
        if source != "gold":
            ids &= set(load_predictions(source).by_id)
    chosen = choose(sorted(ids), rows, only=args.instances, sample=args.sample, seed=args.seed)
    if not chosen:
        raise SystemExit("no instance is in every predictions file, the rows and the mirrors")
    work = args.out or Path(tempfile.mkdtemp(prefix="farm-official-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # the images first, untimed: both sides then start from the same cached images
    rows_path, _ = write_inputs(work, "gold", rows, chosen)
    _run([sys.executable, "-m", "farm.cli", "images", "build", *farm_overrides(args, rows_path, work)],
         "farm images build", env, REPO)

    results = {}
    for source in args.predictions:
        label = source_label(source)
        results[label] = grade_one(args, source, rows, chosen, work / label, env)
        a = results[label]["agreement"]
        print(f"== {label}")
        print("\n".join(table(a)))
        print("\n".join(agreement_lines(a)))
        if "published" in results[label]:  # no target: the truth, drift and network included
            print("\n".join(agreement_lines(results[label]["published"])))
    compared = sum(r["agreement"].compared for r in results.values())
    agreed = sum(r["agreement"].agreed for r in results.values())
    farm_s = sum(r["farm_s"] for r in results.values())
    harness_s = sum(r["harness_s"] for r in results.values())
    ratio = farm_s / harness_s if harness_s else float("nan")
    print(f"== all: {len(chosen)} instances x {len(results)} predictions files: agree on {agreed} of {compared} "
          f"pairs compared ({100.0 * agreed / compared if compared else 0:.1f}%)")
    print(f"wall time{' of this resumed run' if args.resume else ''} at {args.max_workers} at a time: "
          f"farm {farm_s:.1f} s, official harness {harness_s:.1f} s "
          f"(farm / harness {ratio:.2f})")
    print(f"outputs: {work}")
    if args.json:
        print(json.dumps({"instances": chosen, "max_workers": args.max_workers, "compared": compared,
                          "agreed": agreed, "farm_wall_s": round(farm_s, 2), "harness_wall_s": round(harness_s, 2),
                          "farm_over_harness": round(ratio, 3), "out": str(work),
                          "sources": {k: {**v["agreement"].to_json(), "farm_wall_s": round(v["farm_s"], 2),
                                          "harness_wall_s": round(v["harness_s"], 2),
                                          "published": v["published"].to_json() if "published" in v else None}
                                      for k, v in results.items()}},
                         indent=1))
    disagree = any(r["agreement"].disagreements for r in results.values())
    return 0 if compared == len(chosen) * len(results) and not disagree else 1


if __name__ == "__main__":
    raise SystemExit(main())
