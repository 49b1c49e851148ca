"""The vendor's budgets benchmark by benchmark (issue 13 item 2): reproduce-frognano resolves,
for every arm on every benchmark, to the vendor's newest preset field by field; the card arm
holds 8,192 tokens per turn everywhere; a run applies the per-benchmark budget to its trials."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from farm.cli import main
from farm.config import load_config
from farm.config.arms import arms_of, budget_rows, for_benchmark
from farm.errors import ConfigError
from farm.run.driver import run_experiment
from farm.store import ResultStore
from tests.shared import BUNDLED

ENDPOINT = "model.base_url=http://127.0.0.1:9/v1"  # never called: nothing here runs a model
PRESET_ARMS = ("frognano-4b", "qwen3.5-4b")
# The saved swebench-verified.yaml is the vendor's older one-task smoke preset; the newest one
# is not public, and leaf-harness.md §7.3 gives it the budget of patch-eval-verified (8,192 / 5)
NEWEST = {"swebench_pro": "swebench-pro.yaml", "terminal_bench_2_verified": "terminal-bench-2-verified.yaml",
          "patch_eval_verified": "patch-eval-verified.yaml", "swebench_verified": "patch-eval-verified.yaml"}


def _farm_view(cfg) -> dict:
    """farm's resolved config under the preset's own key names."""
    m, a = cfg.model, cfg.agent
    return {
        "seeds_per_task": cfg.run.seeds, "max_attempts": cfg.run.max_attempts, "max_steps": a.max_steps,
        "max_context_tokens": a.max_context_tokens, "max_total_time_sec": a.max_total_time_s,
        "model": {"temperature": m.temperature, "max_tokens_per_turn": m.max_tokens_per_turn,
                  "timeout_sec": m.timeout_s, "max_retries": m.max_retries,
                  "parallel_tool_calls": m.parallel_tool_calls, "extra_body": m.extra_body},
    }


def _preset_view(preset: dict) -> dict:
    keys = ("seeds_per_task", "max_attempts", "max_steps", "max_context_tokens", "max_total_time_sec")
    model_keys = ("temperature", "max_tokens_per_turn", "timeout_sec", "max_retries", "parallel_tool_calls",
                  "extra_body")
    return {**{k: preset[k] for k in keys}, "model": {k: preset["model"][k] for k in model_keys}}


def test_reproduce_frognano_uses_the_vendors_presets_benchmark_by_benchmark():
    presets = BUNDLED / "leaf" / "presets"  # the vendor's files, copied (tests/fixtures/leaf/MANIFEST.md)
    old = yaml.safe_load((presets / "swebench-verified.yaml").read_text())
    assert old["num_tasks"] == 1  # the older smoke preset (see NEWEST): not the budget the vendor ran
    cfg = load_config(["experiment=reproduce-frognano", ENDPOINT])
    arms = dict(arms_of(cfg))
    assert sorted(cfg.experiment.per_benchmark) == sorted(cfg.experiment.benchmarks) == sorted(NEWEST)
    for bench, name in NEWEST.items():
        preset = yaml.safe_load((presets / name).read_text())
        if name != "patch-eval-verified.yaml" or bench == "patch_eval_verified":
            assert preset["dataset"] == bench
        for arm in PRESET_ARMS:
            got = _farm_view(for_benchmark(arms[arm], arm, bench))
            assert got == _preset_view(preset), (arm, bench)
    # the presets disagree by benchmark, so one model preset for all four could not match them
    assert {for_benchmark(arms["frognano-4b"], "frognano-4b", b).model.max_tokens_per_turn for b in NEWEST} \
        == {8192, 32000}


def test_the_card_arm_holds_8192_tokens_per_turn_everywhere_and_nothing_else_changes():
    cfg = load_config(["experiment=reproduce-frognano", ENDPOINT])
    arms = dict(arms_of(cfg))
    for bench in cfg.experiment.benchmarks:
        card = for_benchmark(arms["frognano-4b-card"], "frognano-4b-card", bench)
        presets = for_benchmark(arms["frognano-4b"], "frognano-4b", bench)
        assert card.model.max_tokens_per_turn == 8192
        assert _farm_view(card) == {**_farm_view(presets),
                                    "model": {**_farm_view(presets)["model"], "max_tokens_per_turn": 8192}}


def test_validate_show_prints_every_arms_budget_on_every_benchmark(capsys):
    assert main(["validate", "experiment=reproduce-frognano", ENDPOINT, "--show"]) == 0
    out = capsys.readouterr().out
    cfg = load_config(["experiment=reproduce-frognano", ENDPOINT])
    rows = budget_rows(arms_of(cfg), cfg.experiment.benchmarks)
    # 4 arms and their strict twins (experiment.strict_pair) on 4 benchmarks, and the timeout
    # arm on Terminal-Bench alone, without a twin (benchmarks: [...], strict: false)
    names = [name for name, _ in arms_of(cfg)]
    assert len(names) == 9 and "frognano-4b-timeouts-4x-strict" not in names
    assert len(rows) == 8 * len(cfg.experiment.benchmarks) + 1 == 33
    lines = {line.split(":", 1)[0].strip(): line for line in out.splitlines() if " / " in line}
    shown = [key for key, line in lines.items() if key.startswith("frognano-4b-timeouts-4x") and "max_steps=" in line]
    assert shown == ["frognano-4b-timeouts-4x / terminal_bench_2_verified"]
    # the pair differs in the multiplier alone: the vendor's 10,800 s against four times it
    one, four = lines["frognano-4b / terminal_bench_2_verified"], lines[shown[0]]
    assert "max_total_time_s=10800.0 timeout_multiplier=1.0 " in one
    assert four == one.replace("frognano-4b /", "frognano-4b-timeouts-4x /").replace(
        "timeout_multiplier=1.0 ", "timeout_multiplier=4.0 ")
    for row in rows:
        line = lines[f"{row.arm} / {row.benchmark}"]
        assert f"max_tokens_per_turn={row.values['max_tokens_per_turn']} " in line
        assert f"max_retries={row.values['max_retries']} " in line and "max_steps=150 " in line
    assert "max_tokens_per_turn=32000" in lines["qwen3.5-4b / terminal_bench_2_verified"]
    assert "max_tokens_per_turn=8192" in lines["frognano-4b-card / terminal_bench_2_verified"]
    # a strict twin runs its arm's budgets: strictness changes the sandbox and the grading only
    by = {(r.arm, r.benchmark): r.values for r in rows}
    for (arm, bench), values in by.items():
        if not arm.endswith("-strict") and arm != "frognano-4b-timeouts-4x":
            assert by[(arm + "-strict", bench)] == values


@pytest.mark.parametrize("item", ["run.seeds=5", "model.max_retries"])
def test_per_benchmark_overrides_may_only_set_agent_or_model_values(item, tmp_path):
    conf = tmp_path / "exp.yaml"
    conf.write_text(yaml.safe_dump({"experiment": {"per_benchmark": {"builtin": [item]}}}))
    with pytest.raises(ConfigError, match=r"experiment.per_benchmark.builtin.*only agent"):
        load_config([], config_file=conf)


@pytest.mark.bwrap
def test_a_run_gives_each_trial_its_benchmarks_budget(tmp_path: Path):
    conf = tmp_path / "exp.yaml"
    conf.write_text(yaml.safe_dump({"experiment": {
        "per_benchmark": {"builtin": ["agent.max_steps=1"]},
        "arms": [{"name": "budget"}, {"name": "unbounded", "last_overrides": ["agent.max_steps=150"]}]}}))
    cfg = load_config(["run.executor=local", f"store.uri={tmp_path / 'store'}", "run.progress=false",
                       f"sandbox.local.root_dir={tmp_path / 'sandboxes'}",
                       "benchmark.task_ids=[swe-paginate-off-by-one]"],
                      config_file=conf)
    summary = asyncio.run(run_experiment(cfg))
    rows = {r["arm"]: r for r in ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()}
    assert (rows["budget"]["exit_reason"], rows["budget"]["steps"]) == ("max_turns", 1)
    assert rows["unbounded"]["steps"] > 1 and rows["unbounded"]["status"] == "resolved"


def test_a_per_benchmark_budget_for_a_benchmark_the_run_lacks_is_refused(tmp_path):
    conf = tmp_path / "exp.yaml"
    conf.write_text(yaml.safe_dump({"experiment": {"benchmarks": ["swebench_pro"],
                                                   "per_benchmark": {"swebench-verified": ["agent.max_steps=3"]}}}))
    with pytest.raises(ConfigError, match=r"'swebench-verified' in 'experiment.per_benchmark'.*\['swebench_pro'\]"):
        load_config([], config_file=conf)
    # a spelling of the same benchmark is that benchmark: the tasks carry the source's own name
    conf.write_text(yaml.safe_dump({"experiment": {"benchmarks": ["swebench-pro"],
                                                   "per_benchmark": {"swebench-pro": ["agent.max_steps=3"]}}}))
    cfg = load_config([], config_file=conf)
    assert for_benchmark(cfg, "base", "swebench_pro").agent.max_steps == 3


def test_an_arm_limited_to_a_benchmark_the_run_lacks_is_refused(tmp_path):
    conf = tmp_path / "exp.yaml"
    conf.write_text(yaml.safe_dump({"experiment": {"benchmarks": ["swebench_pro"], "arms": [
        {"name": "a"}, {"name": "tb2-only", "benchmarks": ["terminal-bench-2"]}]}}))
    with pytest.raises(ConfigError, match=r"^invalid value 'terminal-bench-2' in 'experiment.arms\[tb2-only\]"
                                          r"\.benchmarks': the run's benchmarks are \['swebench_pro'\]$"):
        load_config([], config_file=conf)
