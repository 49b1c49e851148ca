"""Build a farm report from the result store; the entry point for `ray job submit`.

    ray job submit --working-dir . -- python jobs/report.py RUN_ID \\
        --store s3://bucket/farm --compare OTHER_RUN --out reports/RUN_ID

It only reads Parquet (no Ray tasks are needed: a report is seconds of numpy), so the same
command also runs on a laptop against a local store directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="jobs/report.py", description=__doc__.split("\n\n")[0])
    p.add_argument("run_id", help="run to report on")
    p.add_argument("--compare", nargs="*", default=[], metavar="RUN", help="more runs shown side by side")
    p.add_argument("--store", default="./farm-results", help="store URI: a directory or s3://bucket/prefix")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (SeaweedFS, MinIO, ...)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: ./reports/<run_id>)")
    p.add_argument("--claims-dir", type=Path, default=None, help="directory of claims YAML (default: conf/claims)")
    p.add_argument("--bootstrap", type=int, default=None,
                   help="bootstrap resamples (default: report.bootstrap of the run)")
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (default: report.seed of the run)")
    p.add_argument("--incomplete-threshold", type=float, default=None,
                   help="share of infra-error/missing trials above which a claim is 'incomplete'")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from dataclasses import replace

    from rich.console import Console

    from farm.errors import FarmError
    from farm.report import ReportOptions, build_report, load_run, summary_table
    from farm.store import ResultStore

    args = parse_args(argv)
    console = Console()
    try:
        store = ResultStore.open(args.store, endpoint_url=args.endpoint_url, create=False)
        runs = [load_run(store, rid) for rid in [args.run_id, *args.compare]]
        options = ReportOptions.from_config(runs[0].config)
        for field, value in (("bootstrap", args.bootstrap), ("seed", args.seed),
                             ("incomplete_threshold", args.incomplete_threshold)):
            if value is not None:
                options = replace(options, **{field: value})
        out = args.out or Path("reports") / args.run_id
        paths = build_report(runs, out, claims_dir=args.claims_dir, options=options)
    except FarmError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    for run in runs:
        console.print(summary_table(run))
    console.print(f"report: {paths.html}  ({paths.markdown.name}, {len(paths.csv)} CSV tables, "
                  f"{len(paths.figures)} figures in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
