"""Reproduce the mutation score recorded in docs/testing.md (``make mutation``).

usage: python scripts/mutation.py [--max-children N] [--threshold PCT] [GROUP ...]

Runs mutmut 3 once per group, each in its own working directory under build/mutation/<group>
(links to farm/, tests/ and conf/ plus a pyproject.toml whose [tool.mutmut] table is the group's),
then prints the score per module and in total and fails below the threshold.

Groups:
  core    the [tool.mutmut] table of pyproject.toml as it is: grading, plan, store, agent loop
          and tool execution, report statistics and ablation. Its tests start real sandboxes.
  parsers the tool-call parser real models need (farm/serve/lenient_calls.py) and the report's
          cost rows (prefix-cache hit rate), with their pure tests: no vLLM, no sandbox.
  inside  the sandbox agent (farm/sandbox/inside), tested in-process only. It needs its own
          working directory: a mutated agent file imports mutmut, which a sandbox's interpreter
          (run with -I -S) cannot, so no sandbox may start from a tree holding one.

Score = (killed + timeout) / (every mutant that ran, including "no tests" and "suspicious").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")

GROUPS: dict[str, dict[str, list[str]]] = {
    "core": {},
    "parsers": {
        "only_mutate": ["farm/serve/lenient_calls.py", "farm/report/cost.py"],
        "pytest_add_cli_args_test_selection": [
            "tests/serve/test_real_model_parser.py", "tests/serve/test_parser_robustness.py",
            "tests/report/test_report_ablation.py",
        ],
    },
    "inside": {
        "only_mutate": ["farm/sandbox/inside/*.py"],
        "pytest_add_cli_args_test_selection": [
            "tests/sandbox/test_inside_server.py", "tests/sandbox/test_inside_procs.py",
            "tests/agent/test_leaf_tools.py", "tests/agent/test_leaf_tools_rules.py",
        ],
    },
}
CAUGHT = ("killed", "timeout")
NOT_RUN = ("skipped", "not checked")


def _toml_value(value: object) -> str:
    return json.dumps(value)  # lists of strings and numbers: JSON and TOML agree


def group_pyproject(overrides: dict[str, list[str]]) -> str:
    """The repository's pyproject.toml with the [tool.mutmut] table replaced by the group's."""
    text = (ROOT / "pyproject.toml").read_text()
    table = dict(tomllib.loads(text)["tool"]["mutmut"], **overrides)
    start = text.index("[tool.mutmut]")
    rest = text[start + len("[tool.mutmut]"):]
    nxt = re.search(r"^\[", rest, re.M)
    tail = rest[nxt.start():] if nxt else ""
    body = "".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items())
    return text[:start] + "[tool.mutmut]\n" + body + ("\n" + tail if tail else "")


def prepare(group: str) -> Path:
    work = ROOT / "build" / "mutation" / group
    work.mkdir(parents=True, exist_ok=True)
    for name in ("farm", "tests", "conf"):
        link = work / name
        if not link.is_symlink():
            link.symlink_to(ROOT / name)
    (work / "pyproject.toml").write_text(group_pyproject(GROUPS[group]))
    return work


def results(work: Path) -> dict[str, str]:
    out = subprocess.run([str(MUTMUT), "results", "--all", "true"], cwd=work, capture_output=True, text=True,
                         check=True).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            found[name] = status
    return found


def module_of(mutant: str) -> str:
    # farm.grade.harbor.x_parse_reward__mutmut_3, farm.store.writer.xǁBatchWriterǁflush__mutmut_1
    return re.sub(r"\.x[_ǁ].*$", "", mutant)


def score(statuses: dict[str, str]) -> tuple[dict[str, Counter], list[tuple[str, str]]]:
    per: dict[str, Counter] = defaultdict(Counter)
    survivors = []
    for name, status in sorted(statuses.items()):
        c = per[module_of(name)]
        if status in NOT_RUN:
            c["not_run"] += 1
            continue
        c["total"] += 1
        if status in CAUGHT:
            c["caught"] += 1
        else:
            survivors.append((name, status))
    return per, survivors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="*", metavar="GROUP", help=f"one of {', '.join(GROUPS)} (default: all)")
    ap.add_argument("--max-children", type=int, default=1)
    ap.add_argument("--threshold", type=float, default=90.0)
    ap.add_argument("--no-run", action="store_true", help="only report the results of the last run")
    args = ap.parse_args(argv)
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        ap.error(f"unknown group(s) {unknown}; choose from {list(GROUPS)}")
    args.groups = args.groups or list(GROUPS)
    per: dict[str, Counter] = {}
    survivors: list[tuple[str, str]] = []
    for group in args.groups:
        work = prepare(group)
        if not args.no_run:
            cmd = ["nice", "-n", "10", str(MUTMUT), "run", "--max-children", str(args.max_children)]
            print(f"== {group}: {' '.join(cmd)} (in {work.relative_to(ROOT)})", flush=True)
            rc = subprocess.run(cmd, cwd=work, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1")).returncode
            if rc != 0:
                print(f"mutmut run failed for group {group} (exit {rc})", file=sys.stderr)
                return rc
        p, s = score(results(work))
        per.update(p)
        survivors += s
    total = Counter()
    print(f"\n{'module':45s} {'caught':>7s} {'total':>6s} {'score':>7s} {'not run':>8s}")
    for module, c in sorted(per.items()):
        total.update(c)
        rate = 100.0 * c["caught"] / c["total"] if c["total"] else 0.0
        print(f"{module:45s} {c['caught']:7d} {c['total']:6d} {rate:6.1f}% {c['not_run']:8d}")
    pct = 100.0 * total["caught"] / total["total"] if total["total"] else 0.0
    print(f"{'TOTAL':45s} {total['caught']:7d} {total['total']:6d} {pct:6.1f}% {total['not_run']:8d}")
    if survivors:
        print("\nnot caught (see `mutmut show NAME` in build/mutation/<group>):")
        for name, status in survivors:
            print(f"  {status:12s} {name}")
    if pct < args.threshold:
        print(f"\nmutation score {pct:.1f}% is below {args.threshold:g}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
