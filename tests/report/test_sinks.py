"""`report.sinks=[wandb]` / `[mlflow]`: the report's own numbers, tables and plots go to the tracker."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from farm.cli import main
from tests.support.demo_runs import DemoRuns

from .wandb_records import records, summary_and_config

pytest.importorskip("wandb", reason="the trackers extra (wandb) is not installed")
pytest.importorskip("mlflow", reason="the trackers extra (mlflow) is not installed")


def _report(demo_runs: DemoRuns, out: Path, sink: str) -> dict[str, dict[str, str]]:
    """Run `farm report` with the sink; the results.csv it wrote, by benchmark/arm/model."""
    assert main(["report", demo_runs.run_a, "--store", demo_runs.store, "--out", str(out),
                 f"report.sinks=[{sink}]", "report.bootstrap=300"]) == 0
    rows = csv.DictReader((out / "results.csv").open())
    return {f"{r['benchmark']}/{r['arm']}/{r['model']}": r for r in rows}


def test_wandb_offline_run_holds_the_reports_metrics_config_tables_and_plots(
        demo_runs: DemoRuns, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    results = _report(demo_runs, tmp_path / "report", "wandb")
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    summary, config = summary_and_config(run_file)
    assert len(results) == 3
    for group, row in results.items():
        for name in ("avg_at_k", "ci_low", "ci_high", "graded_rate"):
            assert summary[f"{group}/{name}"] == pytest.approx(float(row[name]), abs=1e-6)
    assert config["experiment"]["name"] == "diffdemo" and [a["name"] for a in config["experiment"]["arms"]] == \
        ["same", "regraded", "changed"]
    history = [r.history for r in records(run_file) if r.WhichOneof("record_type") == "history"]
    logged = {item.key or item.nested_key[0] for h in history for item in h.item}
    assert {"tables/main", "tables/results", "plots/benchmarks"} <= logged
    assert list(run_file.parent.glob("files/media/images/plots/benchmarks_*.png"))
    (main_table,) = run_file.parent.glob("files/media/table/tables/main_*.table.json")
    shown = json.loads(main_table.read_text())
    main_csv = list(csv.DictReader((tmp_path / "report" / "main.csv").open()))
    assert len(shown["data"]) == len(main_csv) == 3
    col = shown["columns"].index("avg_at_k")
    assert sorted(r[col] for r in shown["data"]) == pytest.approx(sorted(float(r["avg_at_k"]) for r in main_csv))


def test_mlflow_file_store_run_holds_the_reports_metrics_config_tables_and_plots(
        demo_runs: DemoRuns, tmp_path: Path, monkeypatch) -> None:
    import mlflow

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this switch
    results = _report(demo_runs, tmp_path / "report", "mlflow")
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("diffdemo").experiment_id])
    assert run.info.run_name == demo_runs.run_a
    for group, row in results.items():
        for name in ("avg_at_k", "ci_low", "ci_high", "graded_rate"):
            assert run.data.metrics[f"{group}/{name}"] == pytest.approx(float(row[name]), abs=1e-6)
    assert run.data.params["experiment.name"] == "diffdemo"
    artifacts = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, tracking_uri=uri,
                                                         dst_path=str(tmp_path / "got")))
    assert json.loads((artifacts / "config.json").read_text())["experiment"]["name"] == "diffdemo"
    assert (artifacts / "tables" / "main.csv").read_text() == (tmp_path / "report" / "main.csv").read_text()
    assert (artifacts / "plots" / "benchmarks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_unknown_sink_is_one_line_naming_it(demo_runs: DemoRuns, capsys) -> None:
    assert main(["report", demo_runs.run_a, "--store", demo_runs.store, "report.sinks=[tensorboard]"]) == 2
    assert "'tensorboard'" in capsys.readouterr().err


def test_farm_run_with_the_wandb_sink_sends_its_report(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert main(["run", "-q", "agent=nop", "benchmark.task_ids=[term-dedupe-inbox]", "run.executor=local",
                 f"store.uri={tmp_path / 'store'}", "run.preflight=false", "report.sinks=[wandb]",
                 "report.bootstrap=100"]) == 0
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    summary, config = summary_and_config(run_file)
    assert summary["builtin/base/nop/avg_at_k"] == 0.0 and summary["builtin/base/nop/n_unresolved"] == 1.0
    assert config["report"]["sinks"] == ["wandb"]


def test_the_report_is_computed_once_for_the_terminal_the_files_and_the_sink(
        demo_runs: DemoRuns, tmp_path: Path, monkeypatch) -> None:
    """group_stats runs once per (benchmark, arm, model) group inside every report computation, and
    benchmark_bars once per set of figures: a second computation anywhere doubles the count."""
    import mlflow

    from farm.report import plots, tables

    calls = {"group_stats": 0, "benchmark_bars": 0}

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)

    counted(tables, "group_stats")
    counted(plots, "benchmark_bars")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    results = _report(demo_runs, tmp_path / "report", "mlflow")
    assert calls == {"group_stats": len(results), "benchmark_bars": 1}  # three groups, one computation
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("diffdemo").experiment_id])
    for group, row in results.items():  # and the sink holds that computation's numbers
        assert run.data.metrics[f"{group}/avg_at_k"] == pytest.approx(float(row["avg_at_k"]), abs=1e-6)
