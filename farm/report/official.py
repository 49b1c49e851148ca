"""farm's verdicts beside the official SWE-bench harness's: ``farm report RUN --official results.json``.

Two shapes of ``results.json`` are read, told apart by their keys:

* the leaderboard's (SWE-bench/experiments ``evaluation/<split>/<submission>/results/results.json``):
  lists of instance ids, ``resolved`` among them (``no_generation``, ``no_logs``, ... are not
  resolved);
* the harness's run report (``run_evaluation`` writes ``<model>.<run_id>.json``):
  ``resolved_ids``, ``unresolved_ids``, ``error_ids``, ``empty_patch_ids``, ``incomplete_ids``,
  ``submitted_ids``; an incomplete instance has no official verdict.

Each trial of the run (latest attempt) is paired with the official verdict of its instance.
The verdicts agree when both are resolved or both are not; a trial farm could not grade
(``infra_error``) or an instance the file gives no verdict for is listed apart, never counted
as agreement or disagreement.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from farm.errors import ConfigError
from farm.report.data import GRADED, RunData, latest_attempts

# the per-run report's id lists: which official verdict each stands for (None: no verdict)
REPORT_LISTS = {"resolved_ids": "resolved", "unresolved_ids": "unresolved", "error_ids": "unresolved",
                "empty_patch_ids": "unresolved", "incomplete_ids": None}


FARM_VERDICTS = GRADED  # the statuses that are a verdict on the patch


@dataclass(frozen=True)
class Official:
    """The official verdicts one results.json gives: instance id -> resolved / unresolved, and
    the list each id was found in (its reason)."""

    path: str
    form: str  # leaderboard | run_report
    verdict: dict[str, str | None]
    reason: dict[str, str]

    def of(self, instance_id: str) -> tuple[str | None, str]:
        """The verdict and its reason; the leaderboard's lists name every graded instance that is
        not resolved only when it had no generation or no logs, so any other id is unresolved."""
        if instance_id in self.verdict:
            return self.verdict[instance_id], self.reason[instance_id]
        if self.form == "leaderboard":
            return "unresolved", "not in 'resolved'"
        return None, "not in the report"


def load_official(path: str | Path) -> Official:
    """Raises ConfigError naming the file and what is wrong with it."""
    p = Path(path).expanduser()
    where = f"--official {str(p)!r}"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object (the harness's results.json), got {type(data).__name__}")
    verdict: dict[str, str | None] = {}
    reason: dict[str, str] = {}
    if "resolved_ids" in data:
        form, lists = "run_report", {k: v for k, v in REPORT_LISTS.items() if k in data}
        # submitted but in no other list: the harness never finished it (no verdict)
        for iid in _ids(data, "submitted_ids", where) if "submitted_ids" in data else []:
            verdict[iid], reason[iid] = None, "submitted_ids only"
    elif "resolved" in data:
        form = "leaderboard"
        lists = {k: ("resolved" if k == "resolved" else "unresolved") for k, v in data.items()
                 if isinstance(v, list) or k == "resolved"}
    else:
        raise ConfigError(f"{where}: neither a leaderboard results.json (a 'resolved' list) nor a harness run "
                          f"report ('resolved_ids'); keys: {sorted(data)[:10]}")
    # resolved last, so an id in two lists ends resolved only when the file says so
    for key in sorted(lists, key=lambda k: lists[k] == "resolved"):
        for iid in _ids(data, key, where):
            verdict[iid], reason[iid] = lists[key], key
    return Official(str(p), form, verdict, reason)


def _ids(data: dict[str, Any], key: str, where: str) -> list[str]:
    value = data.get(key)
    if not isinstance(value, list) or not all(isinstance(i, str) for i in value):
        raise ConfigError(f"{where}: invalid value for {key!r}: expected a list of instance ids")
    return value


@dataclass(frozen=True)
class Pair:
    instance_id: str
    seed: int
    farm: str  # the trial's status
    official: str | None
    official_reason: str
    farm_reason: str  # error_class or exit reason: why farm decided so

    @property
    def comparable(self) -> bool:
        return self.farm in FARM_VERDICTS and self.official is not None

    @property
    def agree(self) -> bool | None:
        if not self.comparable:
            return None
        return (self.farm == "resolved") == (self.official == "resolved")


@dataclass
class Agreement:
    run_id: str
    official: str
    form: str
    pairs: list[Pair] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for p in self.pairs:
            if not p.comparable:  # farm's own failure first: it is the one to act on
                c["farm not graded" if p.farm not in FARM_VERDICTS else "no official verdict"] += 1
            else:
                c[f"farm {'resolved' if p.farm == 'resolved' else 'unresolved'}, "
                  f"official {p.official}"] += 1
        return dict(sorted(c.items()))

    @property
    def compared(self) -> int:
        return sum(1 for p in self.pairs if p.comparable)

    @property
    def agreed(self) -> int:
        return sum(1 for p in self.pairs if p.agree)

    @property
    def disagreements(self) -> list[Pair]:
        return [p for p in self.pairs if p.agree is False]

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "official": self.official, "form": self.form, "compared": self.compared,
                "agreed": self.agreed, "counts": self.counts,
                "disagreements": [p.instance_id for p in self.disagreements],
                "pairs": [{**asdict(p), "agree": p.agree} for p in self.pairs]}

    def write(self, out_dir: Path) -> list[Path]:
        """official-agreement.csv (one line per trial) and official-agreement.json in ``out_dir``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        csv_path, json_path = out_dir / "official-agreement.csv", out_dir / "official-agreement.json"
        with csv_path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["instance_id", "seed", "farm", "official", "agree", "farm_reason", "official_reason"])
            for p in self.pairs:
                w.writerow([p.instance_id, p.seed, p.farm, p.official or "", "" if p.agree is None else p.agree,
                            p.farm_reason, p.official_reason])
        json_path.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        return [csv_path, json_path]


def agreement(run: RunData, official: Official) -> Agreement:
    """Each trial of ``run`` (latest attempt, in instance order) beside the official verdict."""
    out = Agreement(run.run_id, official.path, official.form)
    for row in sorted(latest_attempts(run.trials.to_pylist()), key=lambda r: (r["task_id"], r["seed"])):
        verdict, why = official.of(row["task_id"])
        out.pairs.append(Pair(row["task_id"], int(row["seed"]), row["status"], verdict, why,
                              row.get("error_class") or row.get("exit_reason") or ""))
    return out


def agreement_lines(a: Agreement) -> list[str]:
    """The terminal's account: the counts, the agreement, every disagreement."""
    share = f"{100.0 * a.agreed / a.compared:.1f}%" if a.compared else "n/a"
    lines = [f"official verdicts ({a.form}, {a.official}) for run {a.run_id}: agree on {a.agreed} of "
             f"{a.compared} compared ({share})"]
    lines += [f"  {k}: {v}" for k, v in a.counts.items()]
    if a.disagreements:
        lines.append(f"disagreements ({len(a.disagreements)}):")
        lines += [f"  {p.instance_id} (seed {p.seed}): farm {p.farm}"
                  f"{f' [{p.farm_reason}]' if p.farm_reason else ''}, official {p.official} [{p.official_reason}]"
                  for p in a.disagreements]
    return lines
