"""Provenance that cannot lie: every row says which policy ran and which model id answered.

Real parts: bubblewrap sandboxes, farm's policy servers and a test endpoint over real HTTP on
127.0.0.1, the openai client, a local Parquet store, and the `farm` command itself.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from rich.console import Console

from farm.report import load_run
from farm.report.data import outcome_groups
from farm.report.render import build_report
from farm.report.summary import summary_table
from farm.run.driver import run_experiment
from farm.run.endpoint import PreflightError
from farm.store import ResultStore
from tests.support.config import local_run_config
from tests.support.endpoints import EndpointServer

pytestmark = pytest.mark.bwrap
FARM = str(Path(sys.executable).with_name("farm"))
NEW_COLUMNS = ("policy", "model_preset", "endpoint", "endpoint_origin")


def _cfg(tmp_path: Path, tasks: Path, *extra: str):
    return local_run_config(tmp_path, tasks, "benchmark.task_ids=[write-answer]", *extra)


def _rows(tmp_path: Path, run_id: str) -> list[dict]:
    return ResultStore.open(str(tmp_path / "store")).read_trials(run_id, dedupe=False).to_pylist()


def test_a_model_preset_without_an_endpoint_is_refused_in_one_line_naming_the_fix(tmp_path: Path) -> None:
    proc = subprocess.run([FARM, "run", "-q", "model=frognano-4b", f"store.uri={tmp_path / 'store'}"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "frognano-4b" in lines[0] and "model.base_url=" in lines[0] and "serve.enabled=true" in lines[0]
    assert not (tmp_path / "store").exists()  # nothing ran, nothing was stored


@pytest.mark.parametrize("policy", ["oracle", "nop", "scripted"])
def test_policy_runs_say_so_in_every_row_and_never_claim_the_preset_model(
        tmp_path: Path, task_dir: Path, policy: str) -> None:
    extra = ["run.seeds=2", "model=frognano-4b", f"agent={policy}"]
    if policy == "scripted":
        script = tmp_path / "turns.yaml"
        script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {
            "command": "echo fixed > /app/answer.txt"}}]}, {"content": "done"}]))
        extra.append(f"agent.script={script}")
    cfg = _cfg(tmp_path, task_dir, *extra)
    summary = asyncio.run(run_experiment(cfg))
    rows = _rows(tmp_path, summary.run_id)
    assert len(rows) == 2
    for row in rows:
        assert row["policy"] == policy
        assert row["model"] == policy  # the id the policy server answered with
        assert row["model_preset"] == "frognano-4b"
        assert row["endpoint_origin"] == "farm-policy"
        assert row["endpoint"].startswith("127.0.0.1:")
    assert {r["status"] for r in rows} == ({"unresolved"} if policy == "nop" else {"resolved"})
    # the report groups and labels them by the policy, so no claim of frognano-4b is matched
    run = load_run(ResultStore.open(str(tmp_path / "store")), summary.run_id)
    assert [g.model for g in outcome_groups(run)] == [policy]
    console = Console(record=True, width=200)
    console.print(summary_table(run))
    text = console.export_text()
    assert "frognano" not in text and policy in text


def test_a_model_run_records_the_id_the_endpoint_answered_with(tmp_path: Path, task_dir: Path) -> None:
    # the endpoint serves the preset's id as an alias and answers under its full id
    with EndpointServer(listed=["frognano-4b", "frognano-4b-2609"], answers_as="frognano-4b-2609") as ep:
        cfg = _cfg(tmp_path, task_dir, "model=frognano-4b", f"model.base_url={ep.base_url}")
        summary = asyncio.run(run_experiment(cfg))
        port = ep.base_url.split(":")[2].split("/")[0]
    (row,) = _rows(tmp_path, summary.run_id)
    assert row["status"] == "resolved"
    assert (row["policy"], row["model"], row["model_preset"]) == ("leaf", "frognano-4b-2609", "frognano-4b")
    assert (row["endpoint"], row["endpoint_origin"]) == (f"127.0.0.1:{port}", "external")
    assert summary.served == {"base": "frognano-4b-2609"}
    run = load_run(ResultStore.open(str(tmp_path / "store")), summary.run_id)
    (group,) = outcome_groups(run)
    assert group.served_by == "leaf · frognano-4b-2609"
    paths = build_report([run], tmp_path / "report")
    markdown = paths.markdown.read_text()
    assert "leaf · frognano-4b-2609" in markdown and "leaf · frognano-4b-2609" in paths.html.read_text()


@pytest.mark.parametrize("listed, answers_as, needles", [
    (["qwen3.5-4b"], "qwen3.5-4b", ("'frognano-4b'", "qwen3.5-4b", "does not serve")),
    (["frognano-4b"], "qwen3.5-4b", ("'frognano-4b'", "'qwen3.5-4b'", "answered")),
])
def test_a_served_model_id_mismatch_is_refused_at_preflight_naming_both_ids(
        tmp_path: Path, task_dir: Path, listed: list[str], answers_as: str, needles: tuple[str, ...]) -> None:
    with EndpointServer(listed=listed, answers_as=answers_as) as ep:
        cfg = _cfg(tmp_path, task_dir, "model=frognano-4b", f"model.base_url={ep.base_url}")
        with pytest.raises(PreflightError) as info:
            asyncio.run(run_experiment(cfg))
        calls = ep.chat_calls
    message = str(info.value)
    assert ep.base_url in message
    for needle in needles:
        assert needle in message, message
    assert calls <= 1  # the probe at most: no trial talked to the wrong model
    assert _rows(tmp_path, cfg.run.id or _run_id(cfg)) == []


@pytest.mark.parametrize("server, needle", [
    ({"tool_call": False}, "answered without a tool call"),
    ({"raw_arguments": "{not json"}, "does not parse"),
])
def test_an_endpoint_that_cannot_call_tools_is_refused_at_preflight(
        tmp_path: Path, task_dir: Path, server: dict, needle: str) -> None:
    with EndpointServer(listed=["frognano-4b"], answers_as="frognano-4b", **server) as ep:
        cfg = _cfg(tmp_path, task_dir, "model=frognano-4b", f"model.base_url={ep.base_url}")
        with pytest.raises(PreflightError, match=needle) as info:
            asyncio.run(run_experiment(cfg))
        assert ep.base_url in str(info.value) and ep.chat_calls == 1  # the probe only
        # a model that cannot call tools by construction (random weights) may opt out
        cfg = _cfg(tmp_path, task_dir, "model=frognano-4b", f"model.base_url={ep.base_url}",
                   "model.preflight_tool_call=false")
        summary = asyncio.run(run_experiment(cfg))
    assert summary.counts and "infra_error" not in summary.counts


def _run_id(cfg) -> str:
    from farm.run.driver import derive_run_id

    return derive_run_id(cfg)


def test_runs_stored_without_provenance_columns_still_load_in_the_report(tmp_path: Path, task_dir: Path) -> None:
    cfg = _cfg(tmp_path, task_dir, "agent=oracle")
    summary = asyncio.run(run_experiment(cfg))
    trials_dir = tmp_path / "store"
    files = [p for p in trials_dir.rglob("*.parquet") if "trials" in p.parts]
    assert files
    for path in files:  # rewrite the run as an older farm stored it: no provenance columns
        table = pq.read_table(path)
        table = table.drop_columns([c for c in NEW_COLUMNS if c in table.column_names])
        pq.write_table(table, path)
    run = load_run(ResultStore.open(str(trials_dir)), summary.run_id)
    assert run.trials.column("policy").null_count == run.trials.num_rows  # missing columns read as null
    (group,) = outcome_groups(run)
    assert group.model == "oracle" and group.count("resolved") == 1
    assert run.served_by() == "oracle (policy not recorded)"
    paths = build_report([run], tmp_path / "report")
    assert "policy not recorded" in paths.markdown.read_text()
    assert "policy not recorded" in paths.html.read_text()


def test_validate_and_run_agree_a_preset_needs_an_endpoint(tmp_path: Path) -> None:
    proc = subprocess.run([FARM, "validate", "model=frognano-4b"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "model.base_url=" in proc.stderr
