"""The cost table's two hit rates: the server's cached tokens and the TTFT-based estimate.

Steps are simulated from a server with a known cache: it serves a share ``h`` of each step's
reusable prefix from cache and spends prefill time only on the tokens it computes. An honest
server's counter and the timing estimate must then agree; a server whose counter reads 0
while it caches (vllm-ascend#16639) is caught by the estimate.
"""

from __future__ import annotations

import math
import random

import pytest

from farm.report.claims import ClaimsRegistry
from farm.report.cost import cost_rows
from farm.report.data import outcome_groups
from farm.report.tables import ReportOptions, compute
from farm.store.schema import StepRow

from .synth import key, plan_table, run_data, trial

PER_TOKEN_S = 2e-4  # prefill seconds per computed token
OVERHEAD_S = 0.03


def _simulated(h: float, *, report_cached: bool | None = True, streamed: bool = True, seed: int = 3):
    """Trials of 12 steps each; ``report_cached``: True an honest counter, False one that reads 0."""
    rng = random.Random(seed)
    trials, steps = [], []
    for t in range(4):
        sent_before = 0  # the previous step's prompt + answer: what a prefix cache could hold
        tot_prompt = tot_cached = 0
        for k in range(12):
            prompt = sent_before + rng.randint(50, 2500)  # tool results of very different sizes
            cached = int(h * sent_before)
            queue = rng.uniform(0, 0.5)
            ttft = queue + OVERHEAD_S + PER_TOKEN_S * (prompt - cached) * rng.uniform(0.97, 1.03)
            completion = rng.randint(20, 300)
            steps.append(StepRow(run_id="r", trial_key=key("r", "b", f"t{t}", 0, "base"), attempt=1, step=k,
                                 prompt_tokens=prompt, completion_tokens=completion,
                                 cached_tokens=cached if report_cached else 0,
                                 ttft_s=ttft if streamed else None, queue_s=queue if streamed else None))
            sent_before = prompt + completion
            tot_prompt += prompt
            tot_cached += cached
        trials.append(trial("r", "b", f"t{t}", 0, "resolved", prompt_tokens=tot_prompt,
                            cached_tokens=tot_cached if report_cached else 0))
    truth = sum(t.cached_tokens for t in trials) / sum(t.prompt_tokens for t in trials) if report_cached else None
    run = run_data("r", plan_table("r", "b", [f"t{t}" for t in range(4)], [0], ["base"], "m"), trials, steps)
    return run, truth


@pytest.mark.parametrize("h", [0.0, 0.5, 0.95])
def test_the_ttft_estimate_agrees_with_an_honest_servers_cached_tokens(h: float):
    run, truth = _simulated(h)
    (c,) = cost_rows(run, outcome_groups(run))
    assert c.prefix_cache_hit_rate == pytest.approx(truth, abs=1e-9)
    assert c.ttft_steps == 48
    assert c.ttft_hit_rate == pytest.approx(c.prefix_cache_hit_rate, abs=0.03)
    assert c.ttft_p50_s > OVERHEAD_S  # queue time excluded, prefill included


def test_a_counter_that_reads_zero_while_the_server_caches_is_caught_by_the_estimate():
    run, _ = _simulated(0.9, report_cached=False)
    _, truth = _simulated(0.9)
    (c,) = cost_rows(run, outcome_groups(run))
    assert c.prefix_cache_hit_rate == 0.0
    assert c.ttft_hit_rate == pytest.approx(truth, abs=0.03) and c.ttft_hit_rate > 0.5
    content = compute([run], ClaimsRegistry(), ReportOptions())
    (table,) = [t for t in content.tables if t.name == "cost"]
    (row,) = table.rows  # the table (and its CSV) carries both numbers side by side
    assert row["prefix_cache_hit_rate"] == 0.0 and row["ttft_hit_rate_estimate"] == c.ttft_hit_rate
    shown = {name: render(row) for name, render in table.display}
    assert shown["prefix-cache hits"] != shown["hits est. from TTFT"]


def test_unstreamed_or_old_steps_give_no_estimate_rather_than_zero():
    run, _ = _simulated(0.9, streamed=False)
    (c,) = cost_rows(run, outcome_groups(run))
    assert math.isnan(c.ttft_hit_rate) and math.isnan(c.ttft_p50_s) and c.ttft_steps == 0
    assert c.prefix_cache_hit_rate > 0.5  # the counter still speaks for itself
    bare = run_data("r", plan_table("r", "b", ["t0"], [0], ["base"], "m"), [trial("r", "b", "t0", 0, "resolved")])
    (c,) = cost_rows(bare, outcome_groups(bare))
    assert math.isnan(c.ttft_hit_rate)


NEW_STEP_COLUMNS = ["ttft_s", "decode_s", "queue_s", "request_attempts", "request_wait_s"]


def test_rows_from_before_streaming_read_back_and_report_no_estimate(tmp_path):
    """Parquet files written before these columns existed: read with nulls, reported as unknown."""
    from farm.report.data import load_run
    from farm.store import ResultStore
    from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, to_table

    from .synth import meta

    run, _ = _simulated(0.9)
    store = ResultStore.open(str(tmp_path / "store"))
    store.write_run_meta("r", meta("r"))
    store.write_plan("r", run.plan.to_pylist())
    trials = to_table([trial("r", "b", f"t{t}", 0, "resolved", prompt_tokens=100, cached_tokens=10)
                       for t in range(4)], TRIALS_SCHEMA)
    store.write_rows("trials", "r", trials.drop_columns(["run_id", "queue_s_total", "generation_s_total"]))
    steps = to_table([StepRow(**{k: v for k, v in row.items() if k not in NEW_STEP_COLUMNS})
                      for row in run.steps.to_pylist()], STEPS_SCHEMA)
    store.write_rows("steps", "r", steps.drop_columns(["run_id", *NEW_STEP_COLUMNS]))
    loaded = load_run(store, "r")
    assert {s["ttft_s"] for s in loaded.steps.to_pylist()} == {None}
    assert {t["queue_s_total"] for t in loaded.trials.to_pylist()} == {None}
    (c,) = cost_rows(loaded, outcome_groups(loaded))
    assert c.prefix_cache_hit_rate == pytest.approx(0.1)
    assert math.isnan(c.ttft_hit_rate) and math.isnan(c.totals["queue_s_total"])
