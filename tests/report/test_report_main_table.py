"""The main table (farm/report/main_table.py) and the 100-column terminal table, against numbers
computed here by hand from the synthetic rows."""

from __future__ import annotations

import csv
import itertools
import math
import re

import numpy as np
import pytest
from rich.console import Console

from farm.report import build_report, summary_table
from farm.report.claims import load_claims
from farm.report.stats import pass_hat_k
from farm.report.tables import ReportOptions

from .synth import plan_table, run_data, trial

FAST = ReportOptions(bootstrap=300)
MODEL = "microsoft/FrogNano-4B-2609"  # has a claim on swebench_verified (61.5, avg@3)
BENCH = "swebench_verified"
# task -> one letter per seed: R resolved, U unresolved, I infra error, X refused by the backend
# (task_unsupported), F resolved but flagged by the hack scan, '.' no row at all
OUTCOMES = {
    "t01": "RRR", "t02": "RRU", "t03": "RUU", "t04": "UUU", "t05": "RIR", "t06": "XXX",
    "t07": "FRR", "t08": "R.U", "t09": "RRR", "t10": "UIU", "t11": "FFR", "t12": "RRR",
}
K = 3


def outcome_run(run_id: str = "main", arm: str = "base"):
    plan = plan_table(run_id, BENCH, list(OUTCOMES), list(range(K)), [arm], MODEL)
    rows = []
    for task, letters in OUTCOMES.items():
        for seed, ch in enumerate(letters):
            kw = {"arm": arm, "model": MODEL}
            if ch == "R":
                rows.append(trial(run_id, BENCH, task, seed, "resolved", **kw))
            elif ch == "U":
                rows.append(trial(run_id, BENCH, task, seed, "unresolved", **kw))
            elif ch == "I":
                rows.append(trial(run_id, BENCH, task, seed, "infra_error", error_class="sandbox_start", **kw))
            elif ch == "X":
                rows.append(trial(run_id, BENCH, task, seed, "infra_error", error_class="task_unsupported:gpu",
                                  error="the backend has no GPU", **kw))
            elif ch == "F":
                rows.append(trial(run_id, BENCH, task, seed, "resolved", hack_flags=["git_history@2"], **kw))
    return run_data(run_id, plan, rows, model=MODEL)


def expected() -> dict[str, float]:
    """Every main-table number, straight from the letters above."""
    n = len(OUTCOMES)
    solved = {t: [ch in "RF" for ch in row] for t, row in OUTCOMES.items()}
    clean = {t: [ch == "R" for ch in row] for t, row in OUTCOMES.items()}
    avg = 100 * sum(sum(solved[t][s] for t in OUTCOMES) / n for s in range(K)) / K
    p = avg / 100
    letters = "".join(OUTCOMES.values())
    return {
        "avg": avg,
        "se": 100 * math.sqrt(p * (1 - p) / n),
        "clean": 100 * sum(sum(clean[t][s] for t in OUTCOMES) / n for s in range(K)) / K,
        "pass_at_k": 100 * sum(any(v) for v in solved.values()) / n,
        "pass_hat_k": 100 * sum(all(v) for v in solved.values()) / n,
        "infra": letters.count("I"),
        "infra_share": 100 * letters.count("I") / (n * K),
        "refused": letters.count("X"),
        "missing": letters.count("."),
    }


def read_csv(path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_the_main_table_holds_every_number_of_the_question(tmp_path) -> None:
    exp = expected()
    paths = build_report([outcome_run()], tmp_path, options=FAST)
    (row,) = read_csv(paths.csv["main"])
    assert (row["benchmark"], row["arm"], row["model"]) == (BENCH, "base", MODEL)
    assert (int(row["tasks"]), int(row["k"]), int(row["scheduled"])) == (12, 3, 36)
    assert float(row["avg_at_k"]) == pytest.approx(exp["avg"], abs=1e-5)
    assert float(row["ci_low"]) <= exp["avg"] <= float(row["ci_high"])
    assert float(row["stderr"]) == pytest.approx(exp["se"], abs=1e-5)
    assert float(row["clean_avg_at_k"]) == pytest.approx(exp["clean"], abs=1e-5)
    assert float(row["clean_ci_low"]) <= exp["clean"] <= float(row["clean_ci_high"])
    assert float(row["pass_at_k"]) == pytest.approx(exp["pass_at_k"], abs=1e-5)
    assert float(row["pass_hat_k"]) == pytest.approx(exp["pass_hat_k"], abs=1e-5)
    assert int(row["infra_errors"]) == exp["infra"]
    assert float(row["infra_share"]) == pytest.approx(exp["infra_share"], abs=1e-5)
    assert (int(row["not_run_refused"]), int(row["not_run_missing"])) == (exp["refused"], exp["missing"])
    # the vendor's claim, and 6 of 36 trials infra / not run (> 5 %): the verdict is incomplete
    assert (float(row["claim"]), row["claim_metric"], row["verdict"]) == (61.5, "avg@3", "incomplete")
    assert (row["run_id"], row["config_hash"]) == ("main", "cfg-main")

    md = paths.markdown.read_text()
    sections = re.findall(r"^## (.+)$", md, flags=re.M)
    assert sections[0] == "Results" and sections[1] == "Runs"  # the main table comes first
    header = next(line for line in md.splitlines() if line.startswith("| benchmark | arm | model (policy"))
    for col in ("tasks × k", "Avg@k %", "95% CI", "± SE", "claim", "verdict", "clean Avg@k % [CI]",
                "infra errors", "not run", "pass@k %", "pass^k %"):
        assert f"| {col} |" in header, col
    line = next(line for line in md.splitlines() if line.startswith(f"| {BENCH} | base |"))
    for text in (f"{exp['avg']:.1f}", f"{exp['se']:.1f}", f"{exp['clean']:.1f}", f"{exp['pass_hat_k']:.1f}",
                 f"{exp['infra']} ({exp['infra_share']:.1f}%)", f"{exp['refused'] + exp['missing']} (1 missing)",
                 "61.5 (avg@3)", "incomplete ("):
        assert text in line, text
    html = paths.html.read_text()
    assert html.index("<h2 id=\"main\">Results</h2>") < html.index("<h2>Runs</h2>")


def test_pass_hat_k_is_the_unbiased_all_k_estimator_when_there_are_more_attempts_than_k() -> None:
    # enumerate every k-subset of each task's attempts: the share of subsets all resolved
    attempts = {"a": [1, 1, 0, 1, 0], "b": [1, 1, 1, 1, 1], "c": [0, 0, 0, 0, 1], "d": [1, 0, 1, 1, 1]}
    n = np.array([len(v) for v in attempts.values()])
    c = np.array([sum(v) for v in attempts.values()])
    for k in (1, 2, 3, 5):
        shares = [np.mean([all(sub) for sub in itertools.combinations(v, k)]) for v in attempts.values()]
        assert pass_hat_k(n, c, k) == pytest.approx(100 * np.mean(shares))
    assert math.isnan(pass_hat_k(n, c, 6))  # no task has 6 attempts


def test_a_claim_inside_the_ci_is_reproduced_and_a_model_without_claim_says_so(tmp_path) -> None:
    run = run_data("ok", plan_table("ok", BENCH, [f"t{i}" for i in range(20)], [0, 1, 2], ["base"], MODEL),
                   [trial("ok", BENCH, f"t{i}", s, "resolved" if (i + s) % 5 < 3 else "unresolved", model=MODEL)
                    for i in range(20) for s in range(3)], model=MODEL)
    other = run_data("x", plan_table("x", BENCH, ["t"], [0], ["base"], "my-model"),
                     [trial("x", BENCH, "t", 0, "resolved", model="my-model")], model="my-model")
    rows = {r["run_id"]: r for r in read_csv(build_report([run, other], tmp_path, options=FAST).csv["main"])}
    assert float(rows["ok"]["avg_at_k"]) == pytest.approx(60.0)  # 3 of 5 residues resolve
    assert rows["ok"]["verdict"] == "reproduced"  # 61.5 lies inside the CI around 60
    assert rows["x"]["verdict"] == "" and rows["x"]["verdict_text"] == "no claim" and rows["x"]["claim"] == ""


def _terminal(run, width: int = 100) -> str:
    console = Console(width=width, record=True, color_system=None)
    # crop=False: a table wider than the console shows as a long line instead of being cut off
    console.print(summary_table(run, load_claims(), FAST), crop=False)
    return console.export_text()


def test_the_widest_numbers_still_fit() -> None:
    # every trial resolved (CI: Wilson on 40 tasks, "[91.2, 100.0]") under a claim far below:
    # "above by 52.7 pts"
    tasks = [f"t{i}" for i in range(40)]
    run = run_data("all", plan_table("all", "patch_eval_verified", tasks, list(range(10)), ["base"], MODEL),
                   [trial("all", "patch_eval_verified", t, s, "resolved", model=MODEL)
                    for t in tasks for s in range(10)], model=MODEL)
    text = _terminal(run)
    assert max(len(line) for line in text.splitlines()) <= 100 and "…" not in text
    assert "[91.2, 100.0]" in text and "40×10" in text and "0 (0.0%)" in text and "47.3 (avg@3)" in text
    assert "above by 52.7" in text


def test_the_terminal_table_fits_100_columns_with_every_key_number_whole() -> None:
    exp = expected()
    text = _terminal(outcome_run())
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "…" not in text
    for number in (f"{exp['avg']:.1f}", f"{exp['se']:.1f}", f"{exp['clean']:.1f}", f"{exp['pass_at_k']:.1f}",
                   f"{exp['pass_hat_k']:.1f}", f"{exp['infra']} ({exp['infra_share']:.1f}%)", "12×3", "61.5"):
        assert number in text, number
    assert re.search(r"\[\d+\.\d, \d+\.\d\]", text)  # a whole CI
    assert "incomplete" in text and BENCH in text
    assert "infra_error:sandbox_start=2" in text and "infra_error:task_unsupported:gpu=3" in text


def test_the_terminal_table_wraps_long_names_instead_of_cutting_them() -> None:
    long_model = "some-organisation/a-rather-long-model-name-for-a-checkpoint-step-000200"
    arm = "parallel-tools-concurrent-execution"
    run = run_data("w", plan_table("w", "patch_eval_verified", ["t1", "t2"], [0, 1], [arm], long_model),
                   [trial("w", "patch_eval_verified", t, s, st, arm=arm, model=long_model)
                    for t, s, st in (("t1", 0, "resolved"), ("t1", 1, "resolved"), ("t2", 0, "unresolved"),
                                     ("t2", 1, "infra_error"))], model=long_model)
    text = _terminal(run)
    assert max(len(line) for line in text.splitlines()) <= 100 and "…" not in text
    assert "50.0" in text and "patch_eval_verified" in text  # Avg@k (1/2 + 1/2) / 2 = 50 %
    assert "1 (25.0%)" in text  # one infra error of 4 trials
    # the model cell is folded over lines, never cut: read its column back line by line
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "some-organisation" in line)
    col = lines[first].index("some-organisation")
    width = len(lines[first][col:].split("  ")[0])
    row = itertools.takewhile(lambda line: not line.startswith("benchmark"), lines[first:])  # to section 2
    assert "".join(line[col:col + width].strip() for line in row) == long_model


def test_model_cell_names_what_answered_once() -> None:
    from farm.report.main_table import model_cell

    assert model_cell("frognano-4b", "leaf · microsoft/FrogNano-4B-2609") == \
        "frognano-4b (leaf · microsoft/FrogNano-4B-2609)"
    assert model_cell("qwen-x.bf16", "leaf · qwen-x.bf16") == "qwen-x.bf16 (leaf)"
    assert model_cell("frognano-4b", "oracle") == "frognano-4b (oracle)"  # never under a model's name alone
    assert model_cell("m", "leaf · no answer") == "m (leaf · no answer)"
    assert model_cell("m", "–") == "m" and model_cell("m", "m") == "m"
