"""Rendering: files, traceability, self-contained HTML, a real store round trip, Chromium."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from farm.report import build_report, load_run, summary_table
from farm.report.data import ReportInputError
from farm.report.tables import ReportOptions
from farm.store import STEPS_SCHEMA, TRIALS_SCHEMA, ResultStore, StepRow
from farm.store.schema import to_table

from .synth import ablation_run, matrix_run, plan_table, run_data, trial

FAST = ReportOptions(bootstrap=300)


def frognano_run(run_id: str = "run-a"):
    outcomes = {f"task-{i:02d}": ("RRU", "RUU", "UUU", "RRR", "RIR")[i % 5] for i in range(30)}
    outcomes["task-07"] = "R.U"
    run = matrix_run(run_id, "swebench_verified", outcomes, model="microsoft/FrogNano-4B-2609",
                     exit_reason="agent", prompt_tokens=5000, cached_tokens=3000, completion_tokens=400,
                     llm_s=20.0, sandbox_cpu_s=7.0)
    run.meta["gpu_seconds"] = 1234.0
    return run


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_report_files_and_traceability(tmp_path):
    runs = [frognano_run(), ablation_run()]
    paths = build_report(runs, tmp_path, options=FAST)
    assert paths.markdown.exists() and paths.html.exists()
    assert {"verdicts", "results", "outcomes", "error_classes", "exit_reasons", "ablation", "cost",
            "per_seed", "pass_at_k"} <= set(paths.csv)
    for name, path in paths.csv.items():
        rows = read_csv(path)
        assert rows, name
        for row in rows:
            assert row["run_id"] in ("run-a", "r") and row["config_hash"] == "cfg-" + row["run_id"], (name, row)
    results = {(r["run_id"], r["arm"]): r for r in read_csv(paths.csv["results"])}
    assert float(results[("r", "parallel")]["avg_at_k"]) == pytest.approx(87.5)
    verdicts = read_csv(paths.csv["verdicts"])
    measured = [v for v in verdicts if v["benchmark"] == "swebench_verified"]
    assert len(measured) == 1 and measured[0]["verdict"] == "incomplete"  # 7 of 90 infra/missing
    assert {v["benchmark"] for v in verdicts if v["verdict"] == "not_run"} == {
        "swebench_pro", "terminal_bench_2", "patch_eval_verified"}
    md = paths.markdown.read_text()
    assert "run-a" in md and "cfg-run-a" in md and "Ablation" in md
    # every attempt had 3000 of 5000 prompt tokens from the prefix cache
    cost_a = next(r for r in read_csv(paths.csv["cost"]) if r["run_id"] == "run-a")
    assert float(cost_a["prefix_cache_hit_rate"]) == pytest.approx(0.6)
    assert "prefix-cache hits" in md and "| 60 % |" in md
    for stem in paths.figures:
        assert f"plots/{stem}.png" in md
    assert {"benchmarks", "ablation", "outcomes", "stop_reasons", "ladder_frognano-4b-2609_rl"} <= set(paths.figures)


def test_html_is_self_contained(tmp_path):
    html = build_report([frognano_run(), ablation_run()], tmp_path, options=FAST).html.read_text()
    assert "<script" not in html and "<link" not in html
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", html)
    assert len(re.findall(r'src="data:image/png;base64,', html)) >= 5
    assert "cfg-run-a" in html and "FrogNano" in html


def test_incomplete_threshold_comes_from_the_run_config(tmp_path):
    run = frognano_run()
    run.meta["config"]["report"] = {"incomplete_threshold": 0.5, "bootstrap": 200, "seed": 3}
    paths = build_report([run], tmp_path)
    (v,) = [v for v in read_csv(paths.csv["verdicts"]) if v["verdict"] != "not_run"]
    assert v["verdict"] in ("below", "above", "reproduced")
    assert "B=200, seed=3" in paths.markdown.read_text()


def test_round_trip_through_the_parquet_store(tmp_path):
    store = ResultStore.open(str(tmp_path / "store"))
    src = frognano_run("run-s")
    src.meta["config"]["report"] = {"bootstrap": 300}
    store.write_run_meta("run-s", src.meta)
    store.write_plan("run-s", src.plan.to_pylist())
    # one extra, earlier attempt that the latest attempt supersedes
    retry = trial("run-s", "swebench_verified", "task-00", 0, "infra_error", model="microsoft/FrogNano-4B-2609",
                  attempt=0, prompt_tokens=999)
    store.write_rows("trials", "run-s", to_table([retry], TRIALS_SCHEMA))
    store.write_rows("trials", "run-s", src.trials)
    step = StepRow(run_id="run-s", trial_key="k", attempt=1, step=0)
    store.write_rows("steps", "run-s", to_table([step], STEPS_SCHEMA))
    loaded = load_run(store, "run-s")
    assert loaded.trials.num_rows == src.trials.num_rows + 1  # every attempt, for cost
    a = build_report([loaded], tmp_path / "from-store")
    b = build_report([src], tmp_path / "in-memory")
    assert (a.csv["results"].read_text() == b.csv["results"].read_text())
    cost_a = read_csv(a.csv["cost"])[0]
    assert int(cost_a["attempts"]) == int(read_csv(b.csv["cost"])[0]["attempts"]) + 1
    with pytest.raises(ReportInputError, match="'nope'"):
        load_run(store, "nope")


def test_bad_metadata_and_tables_name_the_field():
    run = frognano_run()
    with pytest.raises(ReportInputError, match="config_hash"):
        run_data_meta = dict(run.meta)
        run_data_meta.pop("config_hash")
        type(run)(meta=run_data_meta, plan=run.plan, trials=run.trials)
    with pytest.raises(ReportInputError, match="status 'weird'"):
        bad = run_data("x", plan_table("x", "b", ["t"], [0], ["base"], "m"), [trial("x", "b", "t", 0, "weird")])
        build_report([bad], Path("/tmp/never-written"), options=FAST)


def test_summary_table_shows_infra_errors_apart():
    console = Console(record=True, width=100)
    console.print(summary_table(frognano_run(), options=FAST))
    text = console.export_text()
    score, trust = [line.split() for line in text.splitlines() if line.startswith("swebench_verified")]
    # score: benchmark, model (folded), Avg@k, CI low, CI high, SE, claim, (metric), verdict…
    assert score[2] == "54.4"  # 49 of the 90 cells resolved
    # trust: benchmark, tasks×k, clean, clean CI (2), infra errors "6 (6.7%)", not run (1 missing), …
    assert trust[1] == "30×3" and trust[5:8] == ["6", "(6.7%)", "1"]
    assert "error classes, swebench_verified · base: infra_error:-=6, missing=1" in text


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


# CSS colours of report.html (farm/report/render.py): table header cells, an "incomplete" verdict
TH_BACKGROUND = (0xF2, 0xF4, 0xF7)
INCOMPLETE = (0x6A, 0x1B, 0x9A)


def _near(pixels, colour: tuple[int, int, int], tol: int) -> int:
    """Pixels of an (h, w, 3) array within ``tol`` of ``colour`` on every channel."""
    import numpy as np

    return int((np.abs(pixels.astype(int) - np.array(colour)) <= tol).all(axis=-1).sum())


@pytest.mark.integration  # a browser start: 4-7 s on a loaded 2-core machine
def test_report_renders_in_headless_chromium(tmp_path):
    """A real browser draws the page: the main table (header cells, the coloured verdict) sits at
    the top of a non-blank screenshot."""
    from PIL import Image

    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (apt package chromium; make test-setup installs it)")
    paths = build_report([frognano_run()], tmp_path / "report", options=FAST)
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         f"--screenshot={shot}", "--window-size=1280,900", paths.html.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.exists(), proc.stderr[-2000:]
    assert "Uncaught" not in proc.stderr and "Failed to load resource" not in proc.stderr
    keep = os.environ.get("FARM_REPORT_SCREENSHOT")  # set it to look at the page yourself
    if keep:
        shutil.copy(shot, keep)
    with Image.open(shot) as img:
        assert img.format == "PNG" and img.size == (1280, 900)
        import numpy as np

        pixels = np.asarray(img.convert("RGB"))
    top = pixels[:300]  # title + the main table (the runs table comes after it)
    inked = float((pixels != 255).any(axis=-1).mean())
    assert 0.02 < inked < 0.6, f"{inked:.1%} of the pixels are not white: a blank or broken page"
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # anti-aliased text: many shades
    assert _near(top, TH_BACKGROUND, 2) > 5_000  # the main table's header row is drawn at the top
    assert _near(top, INCOMPLETE, 40) > 30  # ...with its verdict cell in the verdict colour


def test_report_options_validate_and_name_the_field():
    from farm.errors import ConfigError

    with pytest.raises(ConfigError, match="report.bootstrap.*0"):
        ReportOptions(bootstrap=0)
    with pytest.raises(ConfigError, match="report.incomplete_threshold.*'lots'"):
        ReportOptions.from_config({"report": {"incomplete_threshold": "lots"}})
    assert ReportOptions.from_config({"report": {"bootstrap": 50, "seed": None}}) == ReportOptions(bootstrap=50)


def test_job_entry_point_reads_the_store(tmp_path):
    import sys

    store = ResultStore.open(str(tmp_path / "store"))
    src = frognano_run("run-j")
    store.write_run_meta("run-j", src.meta)
    store.write_plan("run-j", src.plan.to_pylist())
    store.write_rows("trials", "run-j", src.trials)
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(root / "jobs" / "report.py"), "run-j", "--store", str(tmp_path / "store"),
         "--out", str(out), "--bootstrap", "100", "--incomplete-threshold", "0.5"],
        capture_output=True, text=True, timeout=120, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert (out / "report.html").exists() and "report:" in proc.stdout
    assert "B=100" in (out / "report.md").read_text()
    proc = subprocess.run(
        [sys.executable, str(root / "jobs" / "report.py"), "missing-run", "--store", str(tmp_path / "store")],
        capture_output=True, text=True, timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 2 and "'missing-run'" in proc.stdout and "Traceback" not in proc.stderr


def test_ladder_places_known_checkpoints_on_their_point():
    from farm.report.claims import load_claims
    from farm.report.plots import ladder_positions
    from farm.report.tables import compute

    base = matrix_run("q", "swebench-verified", {"a": "RU", "b": "UU"}, model="Qwen/Qwen3.5-4B")
    other = matrix_run("o", "swebench_verified", {"a": "RR", "b": "UU"}, model="my-ckpt-step-200")
    reg = load_claims()
    content = compute([frognano_run(), base, other], reg, FAST)
    lad = next(lad for lad in reg.ladders if lad.name == "rl")
    labels, placed = ladder_positions(lad, content)
    at = {s.run_id: pos for pos, s in placed}
    assert at == {"run-a": 5, "q": 0, "o": 6}
    assert labels == ["base", "rl1", "rl2", "rl3", "rl4", "rl5", "my-ckpt-step-200"]
