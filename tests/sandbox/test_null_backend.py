"""sandbox.backend=none: the benchmark-only backend is refused unless a benchmark asked for it,
and when asked for, a real run through the driver ends graded with rows that say what ran."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from farm.config import load_config
from farm.errors import ConfigError
from farm.run.driver import run_experiment
from farm.sandbox.none.sandbox import GUARD_ENV
from farm.sandbox.registry import check_environment, open_sandbox
from farm.store import ResultStore
from tests.support.tasks import make_task


def _cfg(tmp_path: Path, *extra: str):
    task = tmp_path / "tasks" / "trivial"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text('[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n')
    (task / "instruction.md").write_text("Nothing to do.\n")
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump([
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "rm -rf / --no-preserve-root"}}]},
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "notes.txt", "content": "hi"}}]},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": "/app/notes.txt"}}]},
        {"content": "done"},
    ]))
    return load_config([f"benchmark.path={tmp_path / 'tasks'}", "agent=scripted", f"agent.script={script}",
                        "run.seeds=3", "run.executor=local", "run.max_attempts=1", "run.progress=false",
                        f"store.uri={tmp_path / 'store'}", "sandbox.backend=none", *extra])


def test_refused_outside_benchmarks_with_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GUARD_ENV, raising=False)
    cfg = _cfg(tmp_path)
    with pytest.raises(ConfigError, match=rf"sandbox.backend='none'.*{GUARD_ENV}=1.*{GUARD_ENV}=None"):
        check_environment(cfg.sandbox)
    with pytest.raises(ConfigError, match="benchmarking the orchestrator"):
        open_sandbox(make_task(), cfg.sandbox, run_id="r", trial_key="k")
    # farm run's path: the driver's backend check stops the run before any trial
    with pytest.raises(ConfigError, match=GUARD_ENV):
        asyncio.run(run_experiment(cfg))
    store = ResultStore.open(str(tmp_path / "store"))
    assert all(store.read_trials(r).num_rows == 0 for r in store.list_runs())
    monkeypatch.setenv(GUARD_ENV, "yes")  # only the exact value a benchmark sets counts
    with pytest.raises(ConfigError, match=GUARD_ENV):
        check_environment(cfg.sandbox)


def test_a_run_on_it_is_graded_and_its_rows_say_sandbox_none(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GUARD_ENV, "1")
    summary = asyncio.run(run_experiment(_cfg(tmp_path, "sandbox.none.reward=0")))
    assert summary.counts == {"unresolved": 3}  # the configured constant, not anything the agent did
    store = ResultStore.open(str(tmp_path / "store"))
    rows = store.read_trials(summary.run_id).to_pylist()
    assert {r["sandbox_backend"] for r in rows} == {"none"}
    assert all(r["agent_isolation"].startswith("none:") for r in rows)
    steps = store.read_steps(summary.run_id).to_pylist()
    assert len(steps) == 3 * 4
    # Write then Read in the same sandbox sees the file (the in-memory files of one trial)
    tool_answers = {str(m.get("content")) for s in steps for m in json.loads(s["messages_json"])
                    if m.get("role") == "tool"}
    assert any(a.strip().endswith("hi") for a in tool_answers), tool_answers


def test_each_chaos_token_fails_exactly_one_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from farm.sandbox.base import SandboxStartError
    from farm.sandbox.none.sandbox import FAIL_STARTS_ENV

    monkeypatch.setenv(GUARD_ENV, "1")
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for i in range(2):
        (tokens / f"{i}").touch()
    monkeypatch.setenv(FAIL_STARTS_ENV, str(tokens))
    cfg = _cfg(tmp_path)

    async def start() -> str:
        sb = open_sandbox(make_task(), cfg.sandbox, run_id="r", trial_key="k")
        try:
            await sb.start()
        except SandboxStartError:
            return "failed"
        await sb.close()
        return "started"

    async def main() -> list[str]:
        return [await start() for _ in range(3)]

    assert asyncio.run(main()) == ["failed", "failed", "started"]
    assert list(tokens.iterdir()) == []
