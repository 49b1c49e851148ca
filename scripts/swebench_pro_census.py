#!/usr/bin/env python3
"""Census of SWE-bench Pro's image recipes: per repository, how many instances, which Python,
PyPI as of when, which hosts the builds download from that this machine cannot reach, and
whether the repository mirror holds each instance's commits.

Reads a copy of scaleapi/SWE-bench_Pro-os (``--scripts``: a checkout, a bare clone or a snapshot,
as ``benchmark.pro_scripts`` takes) and, optionally, the repository mirror (``--repos``, entries
named ``<owner>+<name>`` as ``benchmark.repos`` takes). Nothing is fetched, nothing is built.

Usage: ``python scripts/swebench_pro_census.py --scripts DIR [--repos DIR] [--repo OWNER/NAME ...]
[--reachable HOST ...] [--json FILE]``. Default repositories: the Python ones of the public set.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from farm.tasks.swebench.mirror import MirrorError, RepoMirror  # noqa: E402
from farm.tasks.swebench_pro.recipes import read_recipe, split_id, unreachable  # noqa: E402
from farm.tasks.swebench_pro.scripts import ProScripts  # noqa: E402

PYTHON_REPOS = ("ansible/ansible", "internetarchive/openlibrary", "qutebrowser/qutebrowser")
# what this machine reached when the census was written (docs/benchmarks.md, SWE-bench Pro)
REACHABLE = ("deb.debian.org", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org")


def _commits(mirror: RepoMirror | None, repo: str, commits: list[str | None]) -> bool | None:
    if mirror is None:
        return None
    try:
        for commit in commits:
            if commit:
                mirror.require_commit(repo, commit)
    except MirrorError:
        return False
    return True


def census(scripts: ProScripts, mirror: RepoMirror | None, repos: tuple[str, ...],
           reachable: set[str]) -> dict[str, dict[str, Any]]:
    """Per repository: counts and the instances' facts (see the module docstring)."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"instances": [], "python": Counter(), "dates": [],
                                                          "unreachable": Counter(), "npm": 0, "submodules": 0,
                                                          "commits_present": 0, "commits_absent": []})
    for iid in scripts.instances():
        parts = split_id(iid)
        if parts is None or parts[0] not in repos:
            continue
        repo, fix = parts
        recipe = read_recipe(iid, scripts.dockerfile(iid, "base_dockerfile") or "",
                             scripts.dockerfile(iid, "instance_dockerfile") or "")
        entry = out[repo]
        entry["instances"].append(asdict(recipe))
        entry["python"][recipe.python or "unknown"] += 1
        if recipe.resolve_as_of:
            entry["dates"].append(recipe.resolve_as_of)
        entry["unreachable"].update(unreachable(recipe, reachable))
        entry["npm"] += recipe.npm
        entry["submodules"] += recipe.submodules
        present = _commits(mirror, repo, [recipe.base_commit, fix, recipe.env_commit])
        if present:
            entry["commits_present"] += 1
        elif present is False:
            entry["commits_absent"].append(iid)
    return dict(out)


def table(result: dict[str, dict[str, Any]], with_mirror: bool) -> str:
    head = "| repository | instances | Python | PyPI as of | unreachable hosts (instances) | npm | submodules |"
    head += " commits in the mirror |" if with_mirror else ""
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for repo, e in sorted(result.items()):
        dates = sorted(e["dates"])
        row = (f"| {repo} | {len(e['instances'])} | "
               + ", ".join(f"{v} {n}" for v, n in e["python"].most_common())
               + f" | {dates[0] + ' … ' + dates[-1] if dates else '-'} | "
               + (", ".join(f"{h} {n}" for h, n in e["unreachable"].most_common()) or "none")
               + f" | {e['npm']} | {e['submodules']} |")
        if with_mirror:
            row += f" {e['commits_present']} |"
        lines.append(row)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scripts", required=True, help="a copy of scaleapi/SWE-bench_Pro-os")
    ap.add_argument("--repos", help="repository mirror, entries named <owner>+<name>")
    ap.add_argument("--repo", action="append", help="repositories to count (default: the Python ones)")
    ap.add_argument("--reachable", action="append", help="hosts this machine reaches (default: %(default)s)")
    ap.add_argument("--json", help="write every instance's facts here")
    args = ap.parse_args(argv)
    scripts = ProScripts.at(args.scripts, key="--scripts")
    mirror = RepoMirror.at(args.repos, key="--repos") if args.repos else None
    result = census(scripts, mirror, tuple(args.repo or PYTHON_REPOS), set(args.reachable or REACHABLE))
    print(table(result, mirror is not None))
    for repo, e in sorted(result.items()):
        for iid in e["commits_absent"]:
            print(f"{repo}: commits absent from the mirror: {iid}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=dict) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
