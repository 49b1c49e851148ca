"""bench/routers.py: the router table from a run's Parquet rows, and the commands it would run.

The rows come from a real run (farm's scripted policy over HTTP, streamed, bubblewrap, the
Harbor verifier, the Parquet store): the policy server reports the script's cached tokens and
the agent measures each step's time to first token, as vLLM's answers would give them. The real
model is not run here (docs/performance.md has its numbers)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from farm.cli import main
from farm.report.data import load_run
from farm.store import ResultStore
from tests.support.tasks import CHECK_ANSWER, make_task_dir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "routers.py"
CACHED = (7, 20, 30)  # what the policy server reports per call, in turn order
SEEDS, TASKS = 2, ("one", "two")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_routers", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _scripted_run(tmp_path: Path, store: Path) -> str:
    for name in TASKS:
        make_task_dir(tmp_path / "tasks", name, CHECK_ANSWER, "echo fixed > /app/answer.txt\n")
    turns = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "echo fixed > /app/answer.txt"}}]},
             {"tool_calls": [{"name": "Bash", "arguments": {"command": "cat /app/answer.txt"}}]},
             {"content": "done"}]
    for turn, cached in zip(turns, CACHED):
        turn["usage"] = {"prompt_tokens_details": {"cached_tokens": cached}}
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump(turns))
    assert main(["run", "-q", f"benchmark.path={tmp_path / 'tasks'}", "agent=scripted", f"agent.script={script}",
                 "agent.tokenizer=bytes", "run.executor=local", f"store.uri={store}", f"run.seeds={SEEDS}",
                 "run.max_attempts=1", "run.max_in_flight=2", f"sandbox.local.root_dir={tmp_path / 'sb'}"]) == 0
    (run_id,) = ResultStore.open(str(store)).list_runs()
    return run_id


@pytest.mark.bwrap
def test_the_table_is_the_runs_rows_summed(tmp_path: Path, capsys) -> None:
    bench = _bench()
    out = tmp_path / "bench"
    store = out / "PrefixCacheAffinityRouter"  # where the benchmark puts this router's run
    run_id = _scripted_run(tmp_path, store)
    rs = ResultStore.open(str(store))
    trials, steps = rs.read_trials(run_id).to_pylist(), rs.read_steps(run_id).to_pylist()
    row = bench.aggregate(load_run(rs, run_id))

    n_calls = len(TASKS) * SEEDS * len(CACHED)
    assert (row["trials"], row["resolved"], row["model_calls"]) == (len(TASKS) * SEEDS, len(TASKS) * SEEDS, n_calls)
    assert row["cached_tokens"] == len(TASKS) * SEEDS * sum(CACHED)
    prompt = sum(s["prompt_tokens"] for s in steps)
    assert row["prompt_tokens"] == prompt == sum(t["prompt_tokens"] for t in trials) > row["cached_tokens"]
    assert row["hit_rate"] == pytest.approx(row["cached_tokens"] / prompt)
    ttft = [s["ttft_s"] for s in steps]
    assert row["ttft_steps"] == n_calls and all(t > 0 for t in ttft)  # every call was streamed
    assert (row["ttft_p50_s"], row["ttft_p95_s"]) == (pytest.approx(np.median(ttft)),
                                                      pytest.approx(np.percentile(ttft, 95)))
    assert row["ttft_p50_s"] <= row["ttft_p95_s"] <= max(ttft)
    assert row["wall_per_trial_p50_s"] == pytest.approx(np.median([t["wall_s"] for t in trials]))
    assert row["run_wall_s"] == pytest.approx(max(t["finished_at"] for t in trials)
                                              - min(t["started_at"] for t in trials))
    assert row["run_wall_s"] >= row["wall_per_trial_p50_s"]

    table = bench.render([{"router": "PrefixCacheAffinityRouter", **row}])
    (line,) = [ln for ln in table.splitlines() if ln.startswith("| PrefixCacheAffinityRouter")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:6] == ["PrefixCacheAffinityRouter", "4", "12", f"{prompt:,}", f"{row['cached_tokens']:,}",
                         f"{100 * row['cached_tokens'] / prompt:.1f} %"]
    assert cells[6] == f"{np.median(ttft):.2f} s" and cells[9] == f"{row['run_wall_s']:.0f} s"

    # the command itself, on the stores already written: the same row, as JSON
    capsys.readouterr()
    assert bench.main(["--table-only", "--json", "--out", str(out), "--routers", "PrefixCacheAffinityRouter"]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    assert printed["router"] == "PrefixCacheAffinityRouter" and printed["run_id"] == run_id
    assert {k: printed[k] for k in ("trials", "model_calls", "prompt_tokens", "cached_tokens")} == {
        k: row[k] for k in ("trials", "model_calls", "prompt_tokens", "cached_tokens")}


def test_dry_run_prints_one_farm_run_per_router_and_runs_nothing(tmp_path: Path, capsys) -> None:
    bench = _bench()
    out = tmp_path / "bench"
    assert bench.main(["--dry-run", "--out", str(out), "--model", "frognano-4b", "--tasks", "all",
                       "model.serving.engine_kwargs.max_num_seqs=64"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    routers = ["PowerOfTwoChoicesRouter", "PrefixCacheAffinityRouter", "ConsistentHashRouter"]
    assert len(lines) == len(routers)
    for line, router in zip(lines, routers):
        words = line.split()
        assert words[1:4] == ["-m", "farm.cli", "run"]
        assert f"model.serving.router={router}" in words and f"store.uri={out / router}" in words
        assert {"model=frognano-4b", "serve.enabled=true", "model.serving.num_replicas=2", "agent=leaf"} <= set(words)
        assert words[-1] == "model.serving.engine_kwargs.max_num_seqs=64"  # passed through, last
        assert not any(w.startswith("benchmark.task_ids=") for w in words)  # --tasks all: the whole suite
    assert not out.exists()

    with pytest.raises(SystemExit, match=r"unknown router 'RoundRobin'"):
        bench.main(["--dry-run", "--routers", "RoundRobin"])
    # an override the config refuses fails before any model starts, naming the router and the key
    with pytest.raises(SystemExit, match=r"^PowerOfTwoChoicesRouter: .*model.serving.no_such_key"):
        bench.main(["--dry-run", "model.serving.no_such_key=1"])
    assert capsys.readouterr().out == ""
