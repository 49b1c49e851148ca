"""The report warns when trials ran on stand-in base images or with allow_any_image."""

from __future__ import annotations

from rich.console import Console

from farm.report import build_report, summary_table
from farm.report.caveats import image_caveats
from farm.report.tables import ReportOptions

from .synth import matrix_run, plan_table, run_data, trial

FAST = ReportOptions(bootstrap=50)


def _console_text(table) -> str:
    console = Console(width=400, record=True)
    console.print(table)
    return console.export_text()


def test_standin_rows_put_a_warning_in_every_output(tmp_path):
    run = matrix_run("tb2", "terminal_bench_2", {"a": "R", "b": "U", "c": "R"}, base_image_standin=True,
                     image="farm-build/a:1")
    paths = build_report([run], tmp_path, options=FAST)
    md = paths.markdown.read_text()
    assert md.index("## Warnings") < md.index("## Runs")
    assert "Stand-in base images: 3 of 3 trials of run tb2" in md
    assert "not comparable with published numbers" in md
    assert "Unfaithful" not in md
    html = paths.html.read_text()
    assert '<p class="warning">' in html and "Stand-in base images: 3 of 3 trials" in html
    assert "Stand-in base images: 3 of 3 trials of run tb2" in _console_text(summary_table(run))


def test_unfaithful_counts_only_marked_latest_attempts():
    bench, plan = "b", plan_table("r", "b", ["t1", "t2", "t3"], [0], ["base"], "m")
    rows = [
        trial("r", bench, "t1", 0, "unresolved", image_unfaithful=True, image="img-1"),
        # t2's first attempt was unfaithful, its retry was not: the score comes from the retry
        trial("r", bench, "t2", 0, "infra_error", attempt=1, image_unfaithful=True, image="img-2"),
        trial("r", bench, "t2", 0, "resolved", attempt=2, image_unfaithful=False, image="img-2"),
        trial("r", bench, "t3", 0, "resolved"),
    ]
    caveats = image_caveats([run_data("r", plan, rows)])
    assert [(c.kind, c.trials, c.of, c.tasks) for c in caveats] == [("unfaithful", 1, 3, ("t1",))]
    assert "sandbox.local.allow_any_image=true" in caveats[0].text
    assert "(tasks: t1)" in caveats[0].text


def test_faithful_runs_have_no_warning_section(tmp_path):
    run = matrix_run("clean", "b", {"a": "R", "b": "U"}, base_image_standin=False, image_unfaithful=False)
    assert image_caveats([run]) == []
    paths = build_report([run], tmp_path, options=FAST)
    assert "Warning" not in paths.markdown.read_text()
    assert 'class="warning"' not in paths.html.read_text()
    assert "warning" not in _console_text(summary_table(run)).lower()


def test_each_run_of_a_comparison_is_named_and_many_tasks_are_cut():
    tasks = {f"t{i}": "R" for i in range(7)}
    standin = run_data("s", plan_table("s", "b", list(tasks), [0], ["base"], "m"),
                       [trial("s", "b", t, 0, "resolved", base_image_standin=True, image=f"img-{t}") for t in tasks])
    both = matrix_run("u", "b", {"x": "U"}, base_image_standin=True, image_unfaithful=True)
    caveats = image_caveats([standin, both])
    assert [(c.run_id, c.kind) for c in caveats] == [("s", "standin"), ("u", "standin"), ("u", "unfaithful")]
    assert "(tasks: t0, t1, t2, t3, t4, … (7 in all))" in caveats[0].text
    assert "(tasks: x)" in caveats[1].text
