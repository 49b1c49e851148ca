from __future__ import annotations

import pyarrow as pa

from farm.run.plan import build_plan, resume, trial_key
from farm.store.schema import TRIALS_SCHEMA, TrialResult, to_table
from farm.tasks.model import Environment, Task, VerifierSpec


def _task(tid: str) -> Task:
    return Task(benchmark="b", task_id=tid, instruction="", environment=Environment(), verifier=VerifierSpec())


def test_trial_key_is_stable_and_distinct():
    assert trial_key("r", "b", "t", 0, "base") == trial_key("r", "b", "t", 0, "base")
    keys = {trial_key("r", "b", "t", s, a) for s in range(3) for a in ("x", "y")}
    assert len(keys) == 6
    assert trial_key("r2", "b", "t", 0, "base") != trial_key("r", "b", "t", 0, "base")


def test_plan_is_task_major_cartesian_product():
    plan = build_plan("r", [_task("t1"), _task("t2")], 2, [("a", "m"), ("b", "m")])
    assert [(s.task_id, s.seed, s.arm) for s in plan][:4] == [("t1", 0, "a"), ("t1", 0, "b"), ("t1", 1, "a"), ("t1", 1, "b")]
    assert len(plan) == 8


def _rows(*items):
    return to_table([TrialResult(run_id="r", trial_key=k, benchmark="b", task_id="t", seed=0, arm="a",
                                 attempt=att, model="m", status=st) for k, att, st in items], TRIALS_SCHEMA)


def test_resume_skips_finished_and_reruns_infra_errors_and_missing():
    plan = build_plan("r", [_task(f"t{i}") for i in range(4)], 1, [("a", "m")])
    k = [s.trial_key for s in plan]
    table = _rows((k[0], 1, "resolved"), (k[1], 1, "unresolved"), (k[2], 1, "infra_error"),
                  (k[2], 2, "infra_error"), (k[1], 2, "infra_error"))
    # k[1]: latest attempt is an infra error -> re-run; k[2]: infra twice -> re-run; k[3]: missing
    state = resume(plan, table)
    assert [s.trial_key for s in state.todo] == [k[1], k[2], k[3]]
    assert state.finished == 1
    assert state.next_attempt == {k[1]: 3, k[2]: 3, k[3]: 1}


def test_model_errors_are_final():
    plan = build_plan("r", [_task("t")], 1, [("a", "m")])
    state = resume(plan, _rows((plan[0].trial_key, 1, "model_error")))
    assert state.todo == []
