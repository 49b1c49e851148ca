"""`farm plan`: the simulator against hand-worked schedules, the plan file's errors, the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from farm.cli import main
from farm.errors import ConfigError
from farm.forecast.model import PlanSpec, RunSpec, WorkloadSpec, forecast, full_run_trials, load_plan_spec
from farm.forecast.sim import Attempt, Cluster, LLMModel, SimTrial, Step, simulate


def trial(start=1.0, latency=2.0, tool=0.5, verify=1.0, other=0.5, steps=1, image="img", **step_kw) -> SimTrial:
    step = Step(latency_s=latency, tool_s=tool, **step_kw)
    return SimTrial((Attempt(start, verify, other, (step,) * steps),), image=image)


def test_waves_of_trial_slots():
    # each trial takes 1 + 2 + 0.5 + 1 + 0.5 = 5 s; 10 trials through 4 slots run in waves of 4, 4, 2
    r = simulate([trial() for _ in range(10)], Cluster(max_in_flight=4, startup_s=2.0))
    assert r.wall_s == pytest.approx(2.0 + 15.0)
    assert r.pod_s == pytest.approx(50.0)
    assert r.slot_wait_s == pytest.approx(4 * 5.0 + 2 * 10.0)
    assert r.mean_in_flight == pytest.approx(50.0 / 17.0)
    assert (r.llm_calls, r.attempts) == (10, 10)


def test_pod_slots_bind_before_max_in_flight():
    r = simulate([trial() for _ in range(10)], Cluster(max_in_flight=100, pod_slots=5))
    assert r.wall_s == pytest.approx(10.0)


def test_sandbox_starts_queue_at_the_gate():
    # one start at a time, 1 s each, 3 s after it: trial i ends at i + 3
    trials = [trial(start=1.0, latency=3.0, tool=0.0, verify=0.0, other=0.0) for _ in range(4)]
    r = simulate(trials, Cluster(max_in_flight=4, max_concurrent_starts=1))
    assert r.wall_s == pytest.approx(4.0 + 3.0)
    assert r.start_queue_s == pytest.approx(1.0 + 2.0 + 3.0)


def test_each_node_pulls_an_image_once():
    trials = [trial(image="a") for _ in range(6)]
    r = simulate(trials, Cluster(max_in_flight=2, pod_slots=2, nodes=2, image_pull_s=10.0))
    assert r.image_pulls == 2
    assert r.wall_s == pytest.approx(10.0 + 3 * 5.0)


def test_warm_up_is_paid_by_the_first_wave_only():
    r = simulate([trial() for _ in range(8)], Cluster(max_in_flight=4, warmup_s=3.0))
    assert r.wall_s == pytest.approx(5.0 + 3.0 + 5.0)


def test_a_retried_attempt_frees_its_slot_and_requeues_after_the_backoff():
    failed = Attempt(1.0, 0.0, 0.0, (), retried=True)
    ok = Attempt(1.0, 0.0, 0.0, ())
    r = simulate([SimTrial((failed, ok)), SimTrial((ok,))], Cluster(max_in_flight=1, retry_backoff_s=5.0))
    # t=1 the first attempt fails; the other trial runs 1-2; the retry is queued at 6 and ends at 7
    assert r.wall_s == pytest.approx(7.0)
    assert r.attempts == 3


def test_gpu_replica_shares_its_throughput():
    # alone a call decodes 1000 tokens at 100 tok/s (10 s); its work at full batch is 1000 / 1000 = 1 s,
    # so the n-th call admitted to a busy replica takes max(10, n · 1) s
    gpu = LLMModel(mode="gpu", replicas=1, decode_tok_s=1000.0, decode_tok_s_single=100.0, max_batch=64)
    trials = [trial(start=0.0, latency=0.0, tool=0.0, verify=0.0, other=0.0, completion_tokens=1000)
              for _ in range(20)]
    r = simulate(trials, Cluster(max_in_flight=20, max_concurrent_starts=20, llm=gpu))
    assert r.wall_s == pytest.approx(20.0)
    assert r.gpu_work_s == pytest.approx(20.0)
    assert r.llm_unloaded_s == pytest.approx(200.0)
    two = simulate(trials, Cluster(max_in_flight=20, max_concurrent_starts=20, llm=LLMModel(**{
        **gpu.__dict__, "replicas": 2})))
    assert two.wall_s == pytest.approx(10.0)  # 10 calls per replica: max(10, 10) s


def test_gpu_batch_limit_queues_calls():
    # max_batch 2, a call alone 1 s (prefill 0), work 1 s: t=0 a (1 s), b (n=2: 2 s); t=1 c starts
    # with n=2 and ends at 3; t=2 d starts with n=2 and ends at 4
    gpu = LLMModel(mode="gpu", replicas=1, decode_tok_s=1000.0, decode_tok_s_single=1000.0, max_batch=2)
    trials = [trial(start=0.0, latency=0.0, tool=0.0, verify=0.0, other=0.0, completion_tokens=1000)
              for _ in range(4)]
    r = simulate(trials, Cluster(max_in_flight=4, max_concurrent_starts=4, llm=gpu))
    assert r.wall_s == pytest.approx(4.0)
    assert r.llm_queue_s == pytest.approx(1.0 + 2.0)


def test_prefill_counts_only_uncached_prompt_tokens():
    gpu = LLMModel(mode="gpu", prefill_tok_s=1000.0, decode_tok_s=100.0, decode_tok_s_single=100.0)
    t = trial(start=0.0, latency=0.0, tool=0.0, verify=0.0, other=0.0, prompt_tokens=5000, cached_tokens=3000,
              completion_tokens=100)
    r = simulate([t], Cluster(max_in_flight=1, llm=gpu))
    assert r.wall_s == pytest.approx(2000 / 1000 + 100 / 100)


def test_endpoint_concurrency_limit_queues_calls():
    trials = [trial(start=0.0, latency=2.0, tool=0.0, verify=0.0, other=0.0) for _ in range(4)]
    r = simulate(trials, Cluster(max_in_flight=4, max_concurrent_starts=4, llm=LLMModel(max_concurrency=2)))
    assert r.wall_s == pytest.approx(4.0)


def test_stated_workload_plan_and_cost():
    spec = PlanSpec(run=RunSpec(benchmarks={"b": 10}, seeds=2, max_in_flight=5),
                    workload={"b": WorkloadSpec(steps=4, llm_latency_s=1.0, prompt_tokens=1000, cached_tokens=800,
                                                completion_tokens=50, tool_s=0.5, sandbox_start_s=2.0, verify_s=1.0)})
    spec.prices.pod_per_h = 3.6
    spec.prices.completion_per_mtok = 10.0
    fc = forecast(spec, None)
    # 20 trials of 2 + 4 · 1.5 + 1 = 9 s in 4 waves of 5
    assert fc.base.trials == 20 and fc.base.wall_h * 3600 == pytest.approx(36.0)
    assert fc.base.cost["pods"] == pytest.approx(20 * 9 / 3600 * 3.6)
    assert fc.base.cost["tokens"] == pytest.approx(20 * 4 * 50 * 10.0 / 1e6)
    assert fc.base.completion_tokens == 20 * 4 * 50
    assert fc.bottleneck.startswith("max_in_flight")
    assert {o.seeds: round(o.wall_h * 3600) for o in fc.by_seeds} == {1: 18, 3: 54, 5: 90}


def test_plan_spec_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="llm.mode"):
        load_plan_spec(None, ["llm.mode=tpu"])
    with pytest.raises(ConfigError, match="cluster.pod_slots"):
        load_plan_spec(None, ["cluster.pod_slots=-1"])
    with pytest.raises(ConfigError, match="cluster.pods"):
        load_plan_spec(None, ["cluster.pods=3"])
    with pytest.raises(ConfigError, match="llm.replicas"):
        load_plan_spec(None, ["llm.replicas=many"])
    bad = tmp_path / "plan.yaml"
    bad.write_text("workload:\n  b: {prompt_tokens: 10, cached_tokens: 20}\n")
    with pytest.raises(ConfigError, match="workload.b.cached_tokens"):
        load_plan_spec(bad)
    with pytest.raises(ConfigError, match="run.benchmarks.x"):
        full_run_trials(load_plan_spec(None, ["run.benchmarks.x=3"]), None)


def test_cli_prints_a_json_forecast(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text("run: {benchmarks: {b: 4}, seeds: 1, max_in_flight: 2}\n"
                    "workload: {b: {steps: 2, llm_latency_s: 1.0}}\nsensitivity: {enabled: false}\n")
    assert main(["plan", "--plan", str(plan), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["base"]["trials"] == 4
    assert out["base"]["wall_h"] * 3600 == pytest.approx(4.0)
    assert out["pilot"] is None and not math.isnan(out["base"]["mean_in_flight"])
    assert main(["plan", "--plan", str(plan)]) == 0
    assert "wall time" in capsys.readouterr().out


def write_pilot(tmp_path, rows, steps=(), max_in_flight=2, benchmark="b", tasks=("t1", "t2")):
    from farm.store import ResultStore
    from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, StepRow, TrialResult, to_table

    store = ResultStore.open(str(tmp_path / "store"))
    store.write_run_meta("p", {"run_id": "p", "config_hash": "h", "created_at": "2026-12-01T10:00:00Z",
                               "config": {"run": {"seeds": 2, "max_in_flight": max_in_flight, "executor": "local",
                                                  "max_concurrent_starts": 3, "retry_backoff_s": 0.5}}})
    store.write_plan("p", [{"trial_key": f"k{t}{s}", "benchmark": benchmark, "task_id": task, "seed": s,
                            "arm": "base", "model": "m"} for t, task in enumerate(tasks, 1) for s in (0, 1)])
    t0 = 1796119200.0  # 2026-12-01T10:00:00Z
    trials = [TrialResult(run_id="p", trial_key=k, benchmark=benchmark, task_id=task, seed=0, arm="base", attempt=a,
                          model="m", status=st, started_at=t0 + start, finished_at=t0 + start + wall, wall_s=wall,
                          sandbox_start_s=1.0, verify_s=1.0, llm_s=1.0, tool_s=0.0)
              for k, task, a, st, start, wall in rows]
    store.write_rows("trials", "p", to_table(trials, TRIALS_SCHEMA))
    step_rows = [StepRow(run_id="p", trial_key=k, attempt=a, step=i, latency_s=lat, prompt_tokens=100,
                         cached_tokens=60, completion_tokens=10, tool_s=0.0) for k, a, i, lat in steps]
    store.write_rows("steps", "p", to_table(step_rows, STEPS_SCHEMA))
    return store


def test_pilot_from_the_store_measures_startup_warm_up_and_retries(tmp_path):
    from farm.forecast.pilot import load_pilot

    # first wave (started at 2 s, before any finished) took 8 s; the later ones 4 s: warm-up 4 s
    rows = [("k10", "t1", 1, "resolved", 2.0, 8.0), ("k11", "t1", 1, "resolved", 2.0, 8.0),
            ("k20", "t2", 1, "infra_error", 10.0, 4.0), ("k20", "t2", 2, "resolved", 15.0, 4.0),
            ("k21", "t2", 1, "resolved", 10.0, 4.0)]
    store = write_pilot(tmp_path, rows, steps=[("k10", 1, 0, 0.4), ("k10", 1, 1, 0.6)])
    pilot = load_pilot(store, "p")
    assert pilot.startup_s == pytest.approx(2.0) and pilot.warmup_s == pytest.approx(4.0)
    assert (pilot.max_in_flight, pilot.max_concurrent_starts, pilot.retry_backoff_s) == (2, 3, 0.5)
    assert pilot.tasks == {"b": ["t1", "t2"]} and pilot.notes == []
    first = pilot.trials[("b", "t1")][0][1].attempts[0]
    assert [s.latency_s for s in first.steps] == [0.4, 0.6] and first.steps[0].uncached == 40
    assert first.other_s == pytest.approx(8.0 - 3.0 - 4.0)  # warm-up taken out of the first wave
    retried = next(t for _, t in pilot.trials[("b", "t2")] if len(t.attempts) == 2)
    assert [a.retried for a in retried.attempts] == [True, False]
    assert pilot.measured_wall_s == pytest.approx(19.0)


def test_a_one_wave_pilot_says_its_warm_up_is_unknown(tmp_path):
    from farm.forecast.pilot import load_pilot

    store = write_pilot(tmp_path, [("k10", "t1", 1, "resolved", 2.0, 8.0), ("k11", "t1", 1, "resolved", 2.0, 8.0)])
    pilot = load_pilot(store, "p")
    assert pilot.warmup_s == 0.0 and "one wave" in pilot.notes[0]
    with pytest.raises(ConfigError, match="pilot run 'nope'"):
        load_pilot(store, "nope")


# a pilot with a long tail: t1 takes 2 s, t2 10 s (each trial: 1 s start, 1 s LLM, 1 s verifier, the rest other)
TAIL = [("k10", "t1", 1, "resolved", 0.0, 2.0), ("k11", "t1", 1, "resolved", 0.0, 2.0),
        ("k20", "t2", 1, "resolved", 0.0, 10.0), ("k21", "t2", 1, "resolved", 2.0, 10.0)]


def test_the_plan_starts_trials_in_the_runs_order_and_shows_the_longest_tasks(tmp_path, capsys):
    from farm.forecast.pilot import load_pilot

    store = write_pilot(tmp_path, TAIL)
    pilot = load_pilot(store, "p")
    assert pilot.order == "dataset" and pilot.priors == {("b", "t1"): 2.0, ("b", "t2"): 10.0}
    spec = load_plan_spec(None, ["run.max_in_flight=3", "run.order=longest_first", "sensitivity.enabled=false"])
    # the same trials (same replayed pilot attempts), started longest expected first, seeds together
    assert [t.image for t in full_run_trials(spec, pilot)] == ["t2", "t2", "t1", "t1"]
    assert [t.image for t in full_run_trials(spec, pilot, order="dataset")] == ["t1", "t1", "t2", "t2"]
    fc = forecast(spec, pilot)
    assert (fc.order, fc.other_order) == ("longest_first", "dataset")
    assert [(t["task_id"], t["expected_s"]) for t in fc.longest] == [("t2", 10.0), ("t1", 2.0)]
    # three slots: dataset order starts t2's second seed only when a t1 frees one, so it ends last
    assert fc.base.wall_h < fc.other_order_wall_h
    assert main(["plan", "p", "--store", str(tmp_path / "store"), "run.max_in_flight=3",
                 "run.order=longest_first", "sensitivity.enabled=false"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("start order: run.order=longest_first (longest expected first); longest expected tasks: "
            "t2 (10.0 s), t1 (2.0 s); run.order=dataset would take") in out


def test_the_plan_takes_the_pilots_order_and_puts_tasks_without_a_prior_first(tmp_path):
    from farm.forecast.pilot import load_pilot

    store = write_pilot(tmp_path, TAIL)
    pilot = dataclasses.replace(load_pilot(store, "p"), order="longest_first")
    # four tasks planned, two of them unseen in the pilot: a run orders those by their timeouts
    spec = load_plan_spec(None, ["run.benchmarks.b=4", "run.seeds=1", "sensitivity.enabled=false"])
    fc = forecast(spec, pilot)
    assert fc.order == "longest_first"
    assert [(t["task_id"], t["expected_s"]) for t in fc.longest] == [("b#2", None), ("b#3", None), ("t2", 10.0),
                                                                     ("t1", 2.0)]
    assert forecast(load_plan_spec(None, ["run.order=dataset", "sensitivity.enabled=false"]), pilot).order == "dataset"
    with pytest.raises(ConfigError, match="run.order: expected one of"):
        load_plan_spec(None, ["run.order=shortest"])


@pytest.mark.tools("git")  # benchmark.path of a registered source asks git about the copy
def test_a_plan_names_a_benchmark_as_farm_does_and_counts_its_tasks(tmp_path, capsys):
    """A pilot of ``benchmark=patcheval`` stores its trials under patch_eval_verified; a plan that
    says ``patcheval`` (or the claims' spelling) replays them for every one of its tasks."""
    from farm.config import load_config
    from farm.forecast.pilot import load_pilot
    from farm.tasks.benchmark import load_benchmark_report
    from tests.shared import shared_path

    published = shared_path("fixtures", "patcheval-verified")
    cfg = load_config(["benchmark=patcheval", f"benchmark.path={published}", "benchmark.limit=2"])
    first, second = (t.task_id for t in load_benchmark_report(cfg.benchmark).tasks)  # a pilot of two records
    rows = [("k10", first, 1, "resolved", 0.0, 4.0), ("k11", first, 1, "resolved", 0.0, 4.0),
            ("k20", second, 1, "resolved", 0.0, 6.0), ("k21", second, 1, "unresolved", 4.0, 6.0)]
    store = write_pilot(tmp_path, rows, benchmark="patch_eval_verified", tasks=(first, second))
    pilot = load_pilot(store, "p")
    for name in ("patcheval", "patcheval-verified", "patch_eval_verified"):
        spec = load_plan_spec(None, [f"run.benchmarks.{name}=230", "run.seeds=1", "sensitivity.enabled=false"])
        fc = forecast(spec, pilot)
        assert fc.base.trials == 230 and fc.assumptions["tasks"] == {"patch_eval_verified": 230}
        # no workload is stated: every trial replays the pilot's, its own records' first
        assert [t.image for t in full_run_trials(spec, pilot)[:3]] == [first, second, "patch_eval_verified#2"]
    with pytest.raises(ConfigError, match="run.benchmarks.patch_eval_verified: the same benchmark as "
                                          "run.benchmarks.patcheval"):
        forecast(load_plan_spec(None, ["run.benchmarks.patcheval=1", "run.benchmarks.patch_eval_verified=1"]), pilot)
    assert main(["plan", "p", "--store", str(tmp_path / "store"), "run.benchmarks.patcheval=230",
                 "sensitivity.enabled=false"]) == 0
    assert "tasks per benchmark: patch_eval_verified 230" in " ".join(capsys.readouterr().out.split())
    # without run.benchmarks the plan is the pilot's own: its two records
    assert forecast(load_plan_spec(None, ["sensitivity.enabled=false"]), pilot).assumptions["tasks"] == {
        "patch_eval_verified": 2}
