"""The report keeps the model's own limits apart from the infrastructure (issue 40, item 4).

A sandbox the agent's commands took down is graded unresolved (``sandbox_limit:<limit>``) and
counts in the score; a loss nobody could attribute (``loss_cause`` unknown) is an infra error,
out of the graded-only rate, and counted where the reader sees it. Every run here is written to
a real result store and read back, as ``farm report`` reads it.
"""

from __future__ import annotations

import csv
from pathlib import Path

from rich.console import Console

from farm.report import build_report, load_run, summary_table
from farm.report.diff import diff_runs, print_diff
from farm.report.stats import BootstrapOptions
from farm.report.tables import ReportOptions
from farm.store import ResultStore
from farm.store.schema import TRIALS_SCHEMA, TrialResult, to_table
from farm.view import RunView
from farm.view.pages import trial_page

from .synth import meta, plan_table, run_data, trial

FAST = ReportOptions(bootstrap=50)
BENCH = "b"


def _store(tmp_path: Path, run_id: str, tasks: list[str], rows: list[TrialResult], arms: tuple[str, ...] = ("base",),
           drop: tuple[str, ...] = ()) -> ResultStore:
    """``rows`` of one run written through a local result store; ``drop``: columns left out of the
    Parquet file, as a farm version before them wrote it."""
    store = ResultStore.open(str(tmp_path / "store"))
    store.write_run_meta(run_id, meta(run_id))
    store.write_plan(run_id, plan_table(run_id, BENCH, tasks, [0], list(arms), "m").to_pylist())
    table = to_table(rows, TRIALS_SCHEMA)
    store.write_rows("trials", run_id, table.drop_columns(list(drop)) if drop else table)
    return store


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _terminal(run) -> str:
    console = Console(width=100, record=True)
    console.print(summary_table(run, options=FAST))
    return " ".join(console.export_text().split())  # the caption wraps at 100 columns


def _lost_pids(run_id: str, task: str, **kw) -> TrialResult:
    return trial(run_id, BENCH, task, 0, "unresolved", error_class="sandbox_limit:pids", exit_reason="sandbox_pids",
                 loss_cause="agent", sandbox_limits=["pids"], **kw)


def _lost_unknown(run_id: str, task: str, **kw) -> TrialResult:
    return trial(run_id, BENCH, task, 0, "infra_error", error_class="sandbox_lost", loss_cause="unknown", **kw)


def test_each_error_class_says_whose_it_is(tmp_path):
    rows = [
        _lost_pids("r", "t1"),
        _lost_unknown("r", "t2"),
        trial("r", BENCH, "t3", 0, "infra_error", error_class="sandbox_lost", loss_cause="infrastructure"),
        trial("r", BENCH, "t4", 0, "infra_error", error_class="sandbox_start"),  # no loss at all
        trial("r", BENCH, "t5", 0, "model_error", error_class="model_error"),
    ]
    run = load_run(_store(tmp_path, "r", ["t1", "t2", "t3", "t4", "t5"], rows), "r")
    paths = build_report([run], tmp_path / "out", options=FAST)
    whose = {(r["status"], r["error_class"], r["whose"]): int(r["count"]) for r in _csv(paths.csv["error_classes"])}
    assert whose == {
        ("unresolved", "sandbox_limit:pids", "model's own limit"): 1,
        ("infra_error", "sandbox_lost", "cause unknown"): 1,  # the same class splits by its loss cause
        ("infra_error", "sandbox_lost", "infrastructure"): 1,
        ("infra_error", "sandbox_start", "infrastructure"): 1,
        ("model_error", "model_error", "model"): 1,
    }
    md = paths.markdown.read_text()
    assert "| unresolved | sandbox_limit:pids | model's own limit | 1 |" in md
    assert "| infra_error | sandbox_lost | cause unknown | 1 |" in md
    assert "<td>sandbox_lost</td><td>cause unknown</td>" in paths.html.read_text()
    text = _terminal(run)
    assert "unresolved:sandbox_limit:pids=1 (model's own limit)" in text
    assert "infra_error:sandbox_lost=1 (cause unknown)" in text
    assert "infra_error:sandbox_start=1," in text  # the status already says whose: no label


def test_the_limits_table_counts_limits_met_losses_and_unknown_causes(tmp_path):
    rows = [
        trial("r", BENCH, "t1", 0, "resolved", sandbox_limits=["memory"]),  # met, and still solved
        _lost_pids("r", "t2"),
        # lost to memory although the counters read after the loss listed nothing
        trial("r", BENCH, "t3", 0, "unresolved", error_class="sandbox_limit:memory", exit_reason="sandbox_oom",
              loss_cause="agent"),
        # lost for an unknown cause, retried, solved: one attempt so lost, no trial
        _lost_unknown("r", "t4", attempt=1),
        trial("r", BENCH, "t4", 0, "resolved", attempt=2),
        _lost_unknown("r", "t5"),
        trial("r", BENCH, "t1", 0, "resolved", arm="other"),  # an arm that met nothing: no row
    ]
    run = load_run(_store(tmp_path, "r", ["t1", "t2", "t3", "t4", "t5"], rows, arms=("base", "other")), "r")
    paths = build_report([run], tmp_path / "out", options=FAST)
    (row,) = _csv(paths.csv["model_limits"])
    assert row["arm"] == "base"
    counts = {k: int(v) for k, v in row.items() if k.startswith(("met_", "lost_"))}
    assert counts == {"met_memory": 2, "lost_memory": 1, "met_pids": 1, "lost_pids": 1, "met_disk": 0,
                      "lost_disk": 0, "lost_unknown": 1, "lost_unknown_attempts": 2}
    md = paths.markdown.read_text()
    assert "## The model's own limits" in md
    assert "| memory: met (lost) | pids: met (lost) | disk: met (lost) | lost, cause unknown |" in md
    assert "| b | base | m | 2 (1) | 1 (1) | 0 (0) | 1 (2 attempts) |" in md


def test_no_limit_met_means_no_limits_table(tmp_path):
    rows = [trial("r", BENCH, "t1", 0, "resolved"),
            trial("r", BENCH, "t2", 0, "infra_error", error_class="sandbox_lost", loss_cause="infrastructure")]
    paths = build_report([load_run(_store(tmp_path, "r", ["t1", "t2"], rows), "r")], tmp_path / "out",
                         options=FAST)
    assert "model_limits" not in paths.csv
    md = paths.markdown.read_text()
    assert "The model's own limits" not in md and "cause unknown" not in md.split("## Error classes")[0]
    assert "Warning" not in md


def test_denominators_follow_the_attribution(tmp_path):
    rows = [trial("r", BENCH, "t1", 0, "resolved"), trial("r", BENCH, "t2", 0, "resolved"),
            _lost_pids("r", "t3"), _lost_unknown("r", "t4")]
    run = load_run(_store(tmp_path, "r", ["t1", "t2", "t3", "t4"], rows), "r")
    paths = build_report([run], tmp_path / "out", options=FAST)
    (res,) = _csv(paths.csv["results"])
    # the model's own limit is graded: 2 of 3; the unknown loss is out of the graded denominator
    assert (int(res["graded"]), round(float(res["graded_rate"]), 2)) == (3, 66.67)
    assert (int(res["unresolved"]), int(res["infra_error"])) == (1, 1)
    (main,) = _csv(paths.csv["main"])
    assert (float(main["avg_at_k"]), int(main["infra_errors"])) == (50.0, 1)  # 2 of 4 scheduled
    (out,) = _csv(paths.csv["outcomes"])
    assert int(out["sandbox_lost_cause_unknown"]) == 1
    md = paths.markdown.read_text()
    assert "| of them: sandboxes lost, cause unknown |" in md.split("## Outcomes per class")[1].split("##")[0]
    warning = "1 sandbox lost, cause unknown: 1 of 4 trials of run r"
    assert warning in md.split("## Runs")[0] and warning in paths.html.read_text()
    assert warning in _terminal(run)
    assert "66.7" in _terminal(run)  # the graded column of the terminal's main table


def test_old_rows_without_the_columns_still_report(tmp_path):
    rows = [trial("old", BENCH, "t1", 0, "resolved"),
            trial("old", BENCH, "t2", 0, "infra_error", error_class="sandbox_lost")]
    store = _store(tmp_path, "old", ["t1", "t2"], rows, drop=("sandbox_limits", "loss_cause"))
    run = load_run(store, "old")
    assert run.trials.column("sandbox_limits").to_pylist() == [None, None]  # read back as null
    paths = build_report([run], tmp_path / "out", options=FAST)
    (cls,) = _csv(paths.csv["error_classes"])
    assert (cls["error_class"], cls["whose"]) == ("sandbox_lost", "infrastructure")
    assert "model_limits" not in paths.csv
    assert "sandbox_lost=1" in _terminal(run)
    # a table handed to the report without the columns at all (an export, an older reader's table)
    bare = run.trials.drop_columns(["sandbox_limits", "loss_cause"])
    run.trials = bare
    assert "model_limits" not in build_report([run], tmp_path / "bare", options=FAST).csv


def test_the_trial_page_shows_the_limits_met_and_the_loss_cause(tmp_path):
    rows = [_lost_unknown("v", "t1", attempt=1, attempt_uid="u1"),
            _lost_pids("v", "t1", attempt=2, attempt_uid="u2"),
            trial("v", BENCH, "t2", 0, "resolved", attempt_uid="u3")]
    view = RunView.open(_store(tmp_path, "v", ["t1", "t2"], rows), "v")
    lost, plain = view.trials.to_pylist()
    page = trial_page(view, lost)
    latest, earlier = page.split("earlier attempts")
    assert "<dt>sandbox limits met</dt><dd>pids</dd>" in latest and "<dt>loss cause</dt><dd>agent</dd>" in latest
    assert "<dt>loss cause</dt><dd>unknown</dd>" in earlier  # the retried attempt says its own cause
    other = trial_page(view, plain)  # an empty list and a null cause are not shown
    assert "sandbox limits met" not in other and "loss cause" not in other


def test_diff_names_a_loss_the_attribution_moved_into_the_score():
    plan = plan_table("a", BENCH, ["t1"], [0], ["base"], "m")
    before = [_lost_unknown("a", "t1")]
    after = [_lost_pids("b", "t1")]
    diff = diff_runs(run_data("a", plan, before), run_data("b", plan, after), BootstrapOptions(samples=50))
    console = Console(width=200, record=True)
    print_diff(diff, console)
    assert ("infra_error (sandbox_lost, cause unknown) -> unresolved (sandbox_limit:pids)"
            in console.export_text())
    assert diff.arms[0].infra == 1  # an infra error on one side, as before
