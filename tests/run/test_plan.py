from __future__ import annotations

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
    assert [(s.task_id, s.seed, s.arm) for s in plan][:4] == [
        ("t1", 0, "a"), ("t1", 0, "b"), ("t1", 1, "a"), ("t1", 1, "b")]
    assert len(plan) == 8


def test_an_arm_is_planned_only_on_the_benchmarks_it_runs_on():
    tasks = [Task(benchmark=b, task_id="t", instruction="", environment=Environment(), verifier=VerifierSpec())
             for b in ("swe", "tb2")]
    plan = build_plan("r", tasks, 2, [("a", "m"), ("tb2-only", "m")], runs_on=lambda arm, bench: arm == "a"
                      or bench == "tb2")
    assert [(s.benchmark, s.seed, s.arm) for s in plan] == [
        ("swe", 0, "a"), ("swe", 1, "a"), ("tb2", 0, "a"), ("tb2", 0, "tb2-only"), ("tb2", 1, "a"),
        ("tb2", 1, "tb2-only")]


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


def test_trial_key_depends_on_every_field():
    base = ("r", "b", "t", 0, "a")
    key = trial_key(*base)
    assert len(key) == 24 and int(key, 16) >= 0
    for i, other in enumerate(["r2", "b2", "t2", 1, "a2"]):
        changed = list(base)
        changed[i] = other
        assert trial_key(*changed) != key, f"field {i} does not enter the key"


def test_trial_key_fields_are_separated():
    # without a separator these pairs would hash the same text
    assert trial_key("r", "b", "t1", 1, "a") != trial_key("r", "b", "t", 11, "a")
    assert trial_key("ab", "c", "t", 0, "a") != trial_key("a", "bc", "t", 0, "a")
    assert trial_key("r", "b", "t", 0, "a") != trial_key("r", "bt", "", 0, "a")


def test_plan_carries_identity_model_and_keys():
    plan = build_plan("run-1", [Task(benchmark="swe", task_id="t1", instruction="", environment=Environment(),
                                     verifier=VerifierSpec())], 1, [("arm-x", "model-y")])
    (spec,) = plan
    assert (spec.run_id, spec.benchmark, spec.task_id, spec.seed, spec.arm, spec.model) == (
        "run-1", "swe", "t1", 0, "arm-x", "model-y")
    assert spec.trial_key == trial_key("run-1", "swe", "t1", 0, "arm-x")
    assert spec.plan_row() == {"trial_key": spec.trial_key, "benchmark": "swe", "task_id": "t1", "seed": 0,
                               "arm": "arm-x", "model": "model-y"}
    assert build_plan("r", [], 3, [("a", "m")]) == [] and build_plan("r", [_task("t")], 0, [("a", "m")]) == []


def test_resume_of_an_empty_store_runs_everything_as_attempt_one():
    plan = build_plan("r", [_task("t1"), _task("t2")], 1, [("a", "m")])
    state = resume(plan, TRIALS_SCHEMA.empty_table())
    assert state.todo == plan and state.finished == 0
    assert state.next_attempt == {s.trial_key: 1 for s in plan}


def test_resume_uses_the_highest_attempt_whatever_the_row_order():
    plan = build_plan("r", [_task("t1"), _task("t2")], 1, [("a", "m")])
    k = [s.trial_key for s in plan]
    # k0: a finished attempt 2 read before the infra error of attempt 1 -> finished
    # k1: a re-committed attempt 1 (same attempt twice): the later commit's status counts
    table = _rows((k[0], 2, "resolved"), (k[0], 1, "infra_error"), (k[1], 1, "infra_error"), (k[1], 1, "unresolved"))
    state = resume(plan, table)
    assert state.todo == [] and state.finished == 2
    state = resume(plan, _rows((k[0], 3, "infra_error"), (k[0], 2, "resolved"), (k[0], 1, "resolved")))
    assert [s.trial_key for s in state.todo] == [k[0], k[1]]
    assert state.next_attempt == {k[0]: 4, k[1]: 1}
