"""`farm export --format atif`: one ATIF document per trial of a real run, valid and lossless."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import jsonschema
import pytest

from farm.cli import main
from farm.report.atif import export_run, export_store_run, trajectory
from farm.report.data import ReportInputError, RunData, load_run
from farm.store import ResultStore
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, StepRow, to_table
from tests.shared import REPO, env_flag
from tests.support.demo_runs import REASONING, SOLVED, DemoRuns

from .synth import meta, plan_table, trial

DATA = Path(__file__).with_name("data")
SCHEMA = json.loads((DATA / "atif-trajectory.schema.json").read_text())
HARBOR_SCRIPT = REPO / "scripts" / "harbor_python.py"
REQUIRE_HARBOR_ENV = "FARM_REQUIRE_HARBOR"  # set by CI: a Harbor that is not built fails the round trip


def _export(demo_runs: DemoRuns, run_id: str, out: Path) -> list[dict]:
    assert main(["export", run_id, "--store", demo_runs.store, "--format", "atif", str(out)]) == 0
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def _rfc_rules(doc: dict) -> None:
    """What RFC 0001 requires beyond the JSON Schema (Harbor checks these in model validators)."""
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    for step in doc["steps"]:
        if step["source"] != "agent":
            assert not {"model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"} & set(step)
        ids = {c["tool_call_id"] for c in step.get("tool_calls", [])}
        for result in (step.get("observation") or {}).get("results", []):
            assert result.get("source_call_id") in ids


def test_every_trial_of_both_runs_validates_against_the_atif_schema(demo_runs: DemoRuns, tmp_path: Path) -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    store = ResultStore.open(demo_runs.store, create=False)
    for run_id in (demo_runs.run_a, demo_runs.run_b):
        docs = _export(demo_runs, run_id, tmp_path / run_id)
        trials = store.read_trials(run_id).to_pylist()
        assert len(docs) == len(trials) == 6
        assert {d["session_id"] for d in docs} == {t["trial_key"] for t in trials}
        for doc in docs:
            errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
            assert not errors, errors[:5]
            _rfc_rules(doc)
        index = [json.loads(line) for line in (tmp_path / run_id / "index.jsonl").read_text().splitlines()]
        assert sorted(e["file"] for e in index) == sorted(p.name for p in (tmp_path / run_id).glob("*.json"))
    broken = dict(docs[0], steps=[dict(docs[0]["steps"][0], tokens=3)])  # the schema can fail
    assert list(validator.iter_errors(broken))


def _messages(doc: dict) -> list[dict]:
    """The OpenAI-style conversation an ATIF document describes (the inverse of the export)."""
    out: list[dict] = []
    for step in doc["steps"]:
        if step["source"] != "agent":
            out.append({"role": step["source"], "content": step["message"]})
            continue
        if step["extra"].get("no_reply"):
            continue
        msg: dict = {"role": "assistant", "content": step["message"]}
        if step.get("reasoning_content"):
            msg["reasoning_content"] = step["reasoning_content"]
        if step.get("tool_calls"):
            msg["tool_calls"] = [
                {"id": c["tool_call_id"], "name": c["function_name"],
                 "arguments": c.get("extra", {}).get("raw_arguments", c["arguments"])}
                for c in step["tool_calls"]]
        out.append(msg)
        for r in (step.get("observation") or {}).get("results", []):
            out.append({"role": "tool", "tool_call_id": r["source_call_id"], "content": r.get("content")})
    return out


def _stored_messages(rows: list[dict]) -> list[dict]:
    out = []
    for row in sorted(rows, key=lambda r: r["step"]):
        for m in json.loads(row["messages_json"]):
            if m["role"] == "assistant":
                m = {"role": "assistant", "content": m.get("content") or "",
                     **({"reasoning_content": m["reasoning_content"]} if m.get("reasoning_content") else {}),
                     **({"tool_calls": [{"id": c["id"], "name": c["function"]["name"],
                                         "arguments": _maybe_json(c["function"]["arguments"])}
                                        for c in m["tool_calls"]]} if m.get("tool_calls") else {})}
            out.append(m)
    return out


def _maybe_json(text: str):
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def test_export_holds_messages_reasoning_tools_tokens_timing_and_reward(demo_runs: DemoRuns, tmp_path: Path) -> None:
    store = ResultStore.open(demo_runs.store, create=False)
    docs = {d["session_id"]: d for d in _export(demo_runs, demo_runs.run_a, tmp_path / "a")}
    steps = store.read_steps(demo_runs.run_a).to_pylist()
    for t in store.read_trials(demo_runs.run_a).to_pylist():
        doc, rows = docs[t["trial_key"]], [s for s in steps if s["trial_key"] == t["trial_key"]]
        assert _messages(doc) == _stored_messages(rows)
        agent_steps = [s for s in doc["steps"] if s["source"] == "agent"]
        assert len(agent_steps) == len(rows) == t["steps"]
        for step, row in zip(agent_steps, sorted(rows, key=lambda r: r["step"])):
            assert step["metrics"]["prompt_tokens"] == row["prompt_tokens"]
            assert step["metrics"]["completion_tokens"] == row["completion_tokens"]
            assert step["metrics"].get("cached_tokens") == row["cached_tokens"]
            assert step["extra"]["latency_s"] == row["latency_s"]
            assert [c["extra"]["duration_s"] for c in step.get("tool_calls", [])] == row["tool_durations_s"]
        assert doc["extra"]["reward"] == t["reward"] and doc["extra"]["status"] == t["status"]
        assert doc["final_metrics"]["total_prompt_tokens"] == t["prompt_tokens"]
        assert doc["final_metrics"]["extra"]["wall_s"] == t["wall_s"]
        assert doc["extra"]["farm_trial"]["attempt_uid"] == doc["trajectory_id"] == t["attempt_uid"]
        if t["arm"] == "changed":  # the scripted agent: reasoning, parallel calls, one malformed call
            survey = agent_steps[0]
            assert survey["reasoning_content"] == REASONING
            assert survey["metrics"]["cached_tokens"] == 7 and survey["metrics"]["extra"]["reasoning_tokens"] == 11
            assert [c["arguments"] for c in survey["tool_calls"]] == [{"pattern": "*"}, {}]
            assert survey["tool_calls"][1]["extra"]["raw_arguments"] == '{"pattern": '
            assert doc["extra"]["reward"] == (1.0 if t["task_id"] == SOLVED else 0.0)


def _harbor_python() -> str:
    """FARM_HARBOR_PYTHON, else the one scripts/harbor_python.py built (`make harbor-python`);
    none: a skip, or a failure under FARM_REQUIRE_HARBOR=1 (CI builds it first)."""
    python = os.environ.get("FARM_HARBOR_PYTHON")
    if python:
        return python
    done = subprocess.run([sys.executable, str(HARBOR_SCRIPT), "--check"], capture_output=True, text=True,
                          timeout=180)
    if done.returncode == 0:
        return done.stdout.strip().splitlines()[-1]
    message = (f"Harbor needs Python >= 3.12 (this venv is older) and none is built: "
               f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    if env_flag(REQUIRE_HARBOR_ENV):
        pytest.fail(f"{message}; {REQUIRE_HARBOR_ENV}=1 requires it", pytrace=False)
    pytest.skip(message)


def test_harbor_reads_the_export_back_unchanged(demo_runs: DemoRuns, tmp_path: Path) -> None:
    python = _harbor_python()
    out = tmp_path / "atif"
    docs = _export(demo_runs, demo_runs.run_b, out)
    done = subprocess.run([python, str(DATA / "harbor_roundtrip.py"), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["harbor"] == "0.26.0"
    assert result["read"] == len(docs) == 6 and result["failures"] == []
    # Harbor's reader can fail: a document it must refuse is refused
    broken = out / "broken"
    broken.mkdir()
    doc = json.loads(next(out.glob("*.json")).read_text())
    (broken / "bad.json").write_text(json.dumps(dict(doc, steps=[dict(doc["steps"][0], step_id=7)])))
    done = subprocess.run([python, str(DATA / "harbor_roundtrip.py"), str(broken)], capture_output=True, text=True,
                          timeout=300)
    bad = json.loads(done.stdout.strip().splitlines()[-1])
    assert bad["read"] == 1 and len(bad["failures"]) == 1 and bad["failures"][0].startswith("bad.json")


def test_a_missing_harbor_python_is_named_and_fails_under_farm_require_harbor(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("FARM_HARBOR_PYTHON", raising=False)
    monkeypatch.setenv("FARM_HARBOR_CACHE", str(tmp_path / "none"))
    monkeypatch.setenv(REQUIRE_HARBOR_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=r"holds no harbor-python\.json.*FARM_REQUIRE_HARBOR=1"):
        _harbor_python()
    monkeypatch.setenv(REQUIRE_HARBOR_ENV, "0")
    with pytest.raises(pytest.skip.Exception, match="build it with: python scripts/harbor_python.py"):
        _harbor_python()


def test_a_trial_the_agent_never_reached_is_listed_not_written(tmp_path: Path) -> None:
    lost = trial("r", "b", "t1", 0, "infra_error", error_class="sandbox_start")
    run = RunData(meta=meta("r"), plan=plan_table("r", "b", ["t1"], [0], ["base"], "m"),
                  trials=to_table([lost], TRIALS_SCHEMA), steps=STEPS_SCHEMA.empty_table())
    summary = export_run(run, tmp_path / "out")
    assert summary.written == [] and summary.without_steps == [lost.trial_key]
    assert json.loads((tmp_path / "out" / "index.jsonl").read_text())["file"] is None
    assert trajectory(lost.__dict__, []) is None


def test_unknown_run_is_one_line_naming_it(demo_runs: DemoRuns, tmp_path: Path, capsys) -> None:
    assert main(["export", "no-such-run", "--store", demo_runs.store, "--format", "atif", str(tmp_path)]) == 2
    assert "no-such-run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", demo_runs.run_a, "--store", demo_runs.store, "--format", "jsonl", str(tmp_path)])
    assert load_run(ResultStore.open(demo_runs.store, create=False), demo_runs.run_a).trials.num_rows == 6


def _step(step: int, messages: list[dict], **kw) -> dict:
    return asdict(StepRow(run_id="r", trial_key="r:b:t1:0:base", attempt=1, step=step,
                          messages_json=json.dumps(messages), **kw))


def test_a_model_call_without_a_reply_stays_an_agent_step_and_bad_rows_are_named() -> None:
    t = asdict(trial("r", "b", "t1", 0, "model_error", exit_reason="model_error"))
    call = {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}
    first = _step(0, [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"},
                      {"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}],
                  prompt_tokens=10, completion_tokens=3, tool_names=["Bash"], tool_durations_s=[0.5])
    doc = trajectory(t, [_step(1, []), first])  # any order: the step number orders them
    assert not list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc))
    _rfc_rules(doc)
    assert [s["source"] for s in doc["steps"]] == ["system", "user", "agent", "agent"]
    assert doc["steps"][2]["tool_calls"][0]["extra"]["duration_s"] == 0.5
    assert doc["steps"][3]["message"] == "" and doc["steps"][3]["extra"]["no_reply"] is True
    assert "metrics" not in doc["steps"][3]
    with pytest.raises(ReportInputError, match="step 0: unexpected message with role 'tool'"):
        trajectory(t, [_step(0, [{"role": "tool", "tool_call_id": "c1", "content": "x"}])])


def test_the_streamed_export_of_a_store_equals_the_in_memory_one(demo_runs: DemoRuns, tmp_path: Path) -> None:
    store = ResultStore.open(demo_runs.store, create=False)
    for run_id in (demo_runs.run_a, demo_runs.run_b):
        memory = export_run(load_run(store, run_id), tmp_path / "memory" / run_id)
        streamed = export_store_run(store, run_id, tmp_path / "streamed" / run_id)
        assert [p.name for p in sorted(memory.written)] == [p.name for p in sorted(streamed.written)]
        for a, b in zip(sorted(memory.written), sorted(streamed.written)):
            assert a.read_text() == b.read_text(), a.name
        assert (memory.out_dir / "index.jsonl").read_text() == (streamed.out_dir / "index.jsonl").read_text()
    with pytest.raises(ReportInputError, match="'no-such-run'"):
        export_store_run(store, "no-such-run", tmp_path / "none")


def _big_run(store: ResultStore, run_id: str, n: int, steps: int, per_file: int) -> dict[str, int]:
    """``n`` trials of ``steps`` model calls, committed ``per_file`` trials a file as the batch writer
    does; trial 1 was retried (attempt 1 in the first file, 2 in the last), trial 2's steps are
    split over two files, trial 3 never reached the agent. Returns {trial_key: latest attempt}."""
    store.write_run_meta(run_id, meta(run_id))
    rows = [trial(run_id, "b", f"t{i:05d}", 0, "unresolved") for i in range(n)]
    rows[3].status, rows[3].error_class = "infra_error", "sandbox_start"

    def steps_of(t, attempt: int) -> list[StepRow]:
        uid = f"{t.trial_key}-{attempt}"
        first = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"fix {t.task_id}"}]
        return [StepRow(run_id=run_id, trial_key=t.trial_key, attempt=attempt, step=j, attempt_uid=uid,
                        prompt_tokens=100 + j, completion_tokens=j,
                        messages_json=json.dumps((first if j == 0 else [])
                                                 + [{"role": "assistant", "content": f"{uid} step {j} " + "x" * 200}]))
                for j in range(steps)]

    from dataclasses import replace
    retried = replace(rows[1], attempt=2, attempt_uid=f"{rows[1].trial_key}-2")
    rows[1].attempt_uid, rows[1].status = f"{rows[1].trial_key}-1", "infra_error"
    for t in rows[2:]:
        t.attempt_uid = f"{t.trial_key}-1"
    batches = [rows[i:i + per_file] for i in range(0, n, per_file)]
    split = steps_of(rows[2], 1)
    for b, batch in enumerate(batches):
        st = [s for t in batch if t not in (rows[2], rows[3]) for s in steps_of(t, t.attempt)]
        if b == 0:
            st += split[: steps // 2]
        if b == 1:
            st += split[steps // 2:]
        store.write_rows("steps", run_id, to_table(st, STEPS_SCHEMA))
        store.write_rows("trials", run_id, to_table(batch, TRIALS_SCHEMA))
    store.write_rows("steps", run_id, to_table(steps_of(retried, 2), STEPS_SCHEMA))
    store.write_rows("trials", run_id, to_table([retried], TRIALS_SCHEMA))
    return {t.trial_key: (2 if t is rows[1] else 1) for t in rows}


def test_export_streams_the_steps_in_batches_with_bounded_memory(tmp_path: Path) -> None:
    n, steps, per_file = 640, 20, 64
    store = ResultStore.open(str(tmp_path / "store"))
    latest = _big_run(store, "big", n, steps, per_file)
    summary = export_store_run(store, "big", tmp_path / "out", batch_rows=256)
    total = n * steps  # + the retried trial's first attempt, never exported
    assert len(summary.written) == n - 1 and len(summary.without_steps) == 1
    scan = summary.scan
    assert scan.files == n // per_file + 1 and scan.batches >= total // 256
    # held at once: about one file's steps (64 trials x 20), not the run's 12,800 rows
    assert scan.peak_rows <= per_file * steps + steps and scan.peak_rows < total // 5
    assert scan.rows == total - steps  # every exported attempt's rows once; trial 3 has none
    docs = {json.loads(p.read_text())["session_id"]: json.loads(p.read_text()) for p in summary.written}
    for key, doc in docs.items():
        agent = [s for s in doc["steps"] if s["source"] == "agent"]
        assert [s["message"].split(" ")[0] for s in agent] == [f"{key}-{latest[key]}"] * steps
        assert [s["extra"]["farm_step"] for s in agent] == list(range(steps))
    index = [json.loads(line) for line in (tmp_path / "out" / "index.jsonl").read_text().splitlines()]
    assert [e["task_id"] for e in index] == sorted(e["task_id"] for e in index) and len(index) == n


def test_the_command_streams_and_never_loads_the_whole_run(demo_runs: DemoRuns, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # `farm export` must take the streamed path: loading a 10,000-trial run's steps table whole is
    # what it exists to avoid
    import farm.report.data as data

    def refuse(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("farm export loaded the whole run")

    monkeypatch.setattr(data, "load_run", refuse)
    docs = _export(demo_runs, demo_runs.run_a, tmp_path / "out")
    assert docs and all(d["steps"] for d in docs)
