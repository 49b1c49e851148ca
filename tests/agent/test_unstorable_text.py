"""No lone surrogate reaches Parquet (issue 13 item 5).

A file name that is not UTF-8 comes back from the OS as a str with lone surrogates
(surrogateescape). The model sees U+FFFD in its place, as under the vendor's transport, which
decodes the tool runner's output as UTF-8 with replacement; any lone surrogate that still
reaches a row (a model's own text, an error message) is stored as its ``\\uXXXX`` escape.
"""

from __future__ import annotations

import json

from agent_helpers import agent_cfg

from farm.agent import run_agent
from farm.store import BatchWriter, ResultStore, StepRow, TrialResult
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, to_table

NAME = "caf\ufffd.txt"  # what the model is shown for the bytes b"caf\xe9.txt"


async def test_a_non_utf8_file_name_reaches_the_store(sandbox, policy, llm_for, tmp_path):
    sb, task = sandbox
    srv = policy([
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "printf x > $'caf\\xe9.txt'; ls -b"}}]},
        {"tool_calls": [{"name": "Glob", "arguments": {"pattern": "*.txt"}}]},
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "ok.txt", "content": "y"}},
                        {"name": "Read", "arguments": {"file_path": NAME}}]},
        {"content": "Done."},
    ])
    traj = await run_agent(task, sb, llm_for(srv), agent_cfg(), session_id="sess-1")
    assert traj.exit_reason == "agent", traj.error
    tool_texts = [m["content"] for m in traj.messages if m["role"] == "tool"]
    # ls -b: under agent.compat=leaf-2609 (the default) raw non-UTF-8 output would be the vendor's
    # UnicodeDecodeError observation (tests/agent/test_leaf_differential.py)
    assert tool_texts[0] == "Exit code: 0\nSTDOUT:\ncaf\\351.txt\n\nSTDERR:\n"
    assert tool_texts[1] == NAME  # the Glob result: U+FFFD, not a lone surrogate
    assert tool_texts[3].startswith("FileNotFoundError")  # the shown name is not the file's name
    store = ResultStore.open(str(tmp_path / "store"))
    writer = BatchWriter(store, "r1", batch_rows=1)
    row = TrialResult(run_id="r1", trial_key="k", benchmark="b", task_id="t", seed=0, arm="a", attempt=1,
                      model="m", status="unresolved", error=tool_texts[3])
    writer.add(row, [s.to_row("r1", "k", 1) for s in traj.steps])
    writer.close()
    stored = store.read_steps("r1").to_pylist()
    messages = [m for s in sorted(stored, key=lambda s: s["step"]) for m in json.loads(s["messages_json"])]
    assert messages == traj.messages
    assert store.read_trials("r1").to_pylist()[0]["error"] == tool_texts[3]


def test_a_lone_surrogate_from_elsewhere_is_stored_as_its_escape(tmp_path):
    # an endpoint's JSON may carry "\udcff" (a model's own text); json.loads keeps it lone
    content = json.loads('"bad \\udcff name \\ud800"')
    step = StepRow("r1", "k", 1, 0, tool_names=["Gl\udcffob"],
                   messages_json=json.dumps([{"role": "assistant", "content": content}], ensure_ascii=False))
    row = TrialResult(run_id="r1", trial_key="k", benchmark="b", task_id="t", seed=0, arm="a", attempt=1,
                      model="m", status="model_error", error="FileNotFoundError: 'caf\udce9.txt'")
    store = ResultStore.open(str(tmp_path / "store"))
    store.write_rows("steps", "r1", to_table([step], STEPS_SCHEMA))
    store.write_rows("trials", "r1", to_table([row], TRIALS_SCHEMA))
    got = store.read_steps("r1").to_pylist()[0]
    assert json.loads(got["messages_json"]) == [{"role": "assistant", "content": content}]  # exact round trip
    assert got["tool_names"] == ["Gl\\udcffob"]
    assert store.read_trials("r1").to_pylist()[0]["error"] == "FileNotFoundError: 'caf\\udce9.txt'"
