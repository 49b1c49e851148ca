"""`experiment=frognano-vs-gemma` end to end with two local policies standing in for the two models.

The experiment file is the real one (its arms select the FrogNano and Gemma presets); the copy of
conf/ this test runs from only appends a stand-in policy to each arm: the oracle for FrogNano
(resolves every task) and the demo's scripted partial policy for Gemma (solves 8 of the 14 bundled
tasks, gives up on the rest). The report must then say Gemma − FrogNano = −6/14 and "worse".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from farm.cli import main
from farm.config import conf_dir, load_config
from farm.config.arms import arms_of
from farm.run.serving_facts import render_serving
from farm.store import ResultStore

STAND_INS = {
    "frognano-4b": ["agent.name=oracle"],
    "gemma-4-12b": ["agent.name=scripted", "agent.script=experiment/demo-partial-policy.yaml"],
}


def test_show_lists_both_arms_with_their_parsers(capsys):
    # an endpoint makes the arms leaf runs of their models (without one they would be oracle runs)
    url = "model.base_url=http://127.0.0.1:9/v1"
    assert main(["validate", "experiment=frognano-vs-gemma", url, "--show"]) == 0
    out = capsys.readouterr().out
    cfg = load_config(["experiment=frognano-vs-gemma", url])
    shown = render_serving(arms_of(cfg))
    assert shown in out
    lines = shown.splitlines()
    assert lines[1].startswith("  frognano-4b: model frognano-4b ")
    assert "parsers qwen3_coder / qwen3;" in lines[1] and "engine vllm" in lines[1]
    assert lines[2].startswith("  gemma-4-12b: model gemma-4-12b ")
    assert "parsers gemma4 / gemma4;" in lines[2]


@pytest.mark.integration
def test_frognano_vs_gemma_runs_paired_and_reports_the_difference(tmp_path: Path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(conf_dir(), conf)
    exp_file = conf / "experiment" / "frognano-vs-gemma.yaml"
    exp = yaml.safe_load(exp_file.read_text())
    assert [a["name"] for a in exp["experiment"]["arms"]] == list(STAND_INS)
    for arm in exp["experiment"]["arms"]:
        arm["overrides"] = [*arm["overrides"], *STAND_INS[arm["name"]]]
    exp_file.write_text(yaml.safe_dump(exp))
    monkeypatch.setenv("FARM_CONF_DIR", str(conf))

    store = tmp_path / "store"
    assert main(["run", "-q", "experiment=frognano-vs-gemma", "experiment.benchmarks=[]", "benchmark=builtin",
                 "run.executor=local", f"store.uri={store}", "run.seeds=1", "run.max_in_flight=6"]) == 0
    (run_id,) = ResultStore.open(str(store)).list_runs()
    rows = ResultStore.open(str(store)).read_trials(run_id).to_pylist()
    by_arm: dict[str, dict[str, str]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], {})[r["task_id"]] = r["status"]
    assert set(by_arm) == set(STAND_INS)
    # rows name what answered (the stand-in policy), never the preset's model id
    assert {r["arm"]: r["model"] for r in rows} == {"frognano-4b": "oracle", "gemma-4-12b": "scripted"}
    assert set(by_arm["frognano-4b"]) == set(by_arm["gemma-4-12b"])  # paired: the same tasks
    n = len(by_arm["frognano-4b"])
    lost = sum(by_arm["frognano-4b"][t] == "resolved" and by_arm["gemma-4-12b"][t] != "resolved"
               for t in by_arm["frognano-4b"])
    assert set(by_arm["frognano-4b"].values()) == {"resolved"} and lost == 6 and n == 14

    out = tmp_path / "report"
    assert main(["report", run_id, "--store", str(store), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    (gemma_line,) = [line for line in md.splitlines() if line.startswith("|") and "gemma-4-12b" in line
                     and "Ablation" not in line and "worse" in line]
    assert f"{-100 * lost / n:.1f}" in gemma_line  # the paired difference, Gemma − FrogNano, in points
    assert "6/0" in gemma_line  # McNemar: six tasks resolved by the baseline only
    assert "frognano-4b (baseline)" in md
