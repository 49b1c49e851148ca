"""Store faults: S3 throttling, 5xx, dropped connections and stalls through a fault-injecting
proxy in front of the real moto server; the retry budget running out; a local store on a full
filesystem (a 2 MiB tmpfs)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from farm.errors import StoreError, StoreWriteError
from farm.store import BatchWriter, ResultStore, StepRow, TrialResult
from farm.store.retry import transient, with_retries
from tests.support.s3faults import FaultPlan, FaultProxy

FARM = [sys.executable, "-m", "farm.cli"]


def _row(key: str, attempt: int = 1) -> TrialResult:
    return TrialResult(run_id="r1", trial_key=key, benchmark="b", task_id=key, seed=0, arm="main",
                       attempt=attempt, model="m", status="resolved", reward=1.0, finished_at=float(attempt))


# -- the retry loop, in this process ----------------------------------------------------------

def test_transient_errors_are_retried_until_they_pass():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise OSError("AWS Error SLOW_DOWN during PutObject operation: Please reduce your request rate.")
        return "done"

    slept: list[float] = []
    assert with_retries(flaky, budget_s=60, where="S3 bucket 'b'", what="write k", sleep=slept.append) == "done"
    assert len(calls) == 4 and len(slept) == 3
    assert all(0 <= s <= 5.0 for s in slept)


def test_past_the_budget_one_line_names_the_bucket_and_the_error():
    def always():
        raise OSError("AWS Error UNKNOWN (HTTP status 503) during PutObject operation:\nNo response body.")

    with pytest.raises(StoreWriteError) as err:
        with_retries(always, budget_s=0.3, where="S3 bucket 'results'", what="write k", sleep=lambda s: None)
    text = str(err.value)
    assert "\n" not in text and "S3 bucket 'results'" in text and "HTTP status 503" in text
    assert err.value.exit_code == 6


def test_client_errors_are_not_retried():
    calls = []

    def denied():
        calls.append(1)
        raise PermissionError("AWS Error ACCESS_DENIED during PutObject operation: Access Denied")

    with pytest.raises(StoreError) as err:
        with_retries(denied, budget_s=60, where="S3 bucket 'b'", what="write k", sleep=lambda s: None)
    assert not isinstance(err.value, StoreWriteError) and len(calls) == 1
    assert not transient(OSError("AWS Error NO_SUCH_BUCKET during PutObject operation"))
    assert transient(OSError("curlCode: 28, Timeout was reached"))


# -- a real S3 server behind a faulty proxy ---------------------------------------------------

@pytest.fixture
def faulty(s3_endpoint):
    proxies = []

    def make(plan: FaultPlan) -> FaultProxy:
        proxies.append(FaultProxy(s3_endpoint, plan))
        return proxies[-1]

    yield make
    for p in proxies:
        p.close()


def test_batches_land_exactly_once_through_throttling_5xx_drops_and_stalls(faulty, s3_endpoint, s3_bucket):
    plan = FaultPlan(seed=7, rates={"slowdown": 0.03, "500": 0.03, "drop": 0.03, "lost_answer": 0.03, "slow": 0.02},
                     burst=2, slow_s=1.2)
    proxy = faulty(plan)
    uri = f"s3://{s3_bucket}/faults"
    store = ResultStore.open(uri, proxy.endpoint, retry_budget_s=60, request_timeout_s=1.0, create=False)
    direct = ResultStore.open(uri, s3_endpoint, create=False)  # a reader that sees no faults
    stop, seen, problems = threading.Event(), [], []

    def reader() -> None:
        # farm report's view during the faults: every listed file parses, rows only grow
        while not stop.is_set():
            try:
                seen.append(direct.read_trials("r1", dedupe=False).num_rows)
            except Exception as exc:  # noqa: BLE001 - recorded for the assertion
                problems.append(repr(exc))
            stop.wait(0.2)

    t = threading.Thread(target=reader)
    t.start()
    try:
        writer = BatchWriter(store, "r1", batch_rows=3, flush_interval_s=3600)
        for i in range(12):
            key = f"t{i:02d}"
            store.write_artifact("r1", key, 1, "patch.diff", f"patch {i}\n".encode() * 50)
            writer.add(_row(key), [StepRow("r1", key, 1, 0)])
        writer.close()
    finally:
        stop.set()
        t.join()
    keys = direct.read_trials("r1", dedupe=False).column("trial_key").to_pylist()
    assert sorted(keys) == [f"t{i:02d}" for i in range(12)]  # every row once, none twice
    assert direct.read_steps("r1").num_rows == 12
    assert all(direct.read_artifact("r1", f"t{i:02d}", 1, "patch.diff") == f"patch {i}\n".encode() * 50
               for i in range(12))
    assert problems == [] and seen == sorted(seen)
    # the faults the test relies on really happened
    assert {"slowdown", "500", "drop", "lost_answer", "slow"} <= set(plan.injected), plan.injected


def test_a_permanent_fault_stops_with_one_line_and_leaves_nothing_half_written(faulty, s3_endpoint, s3_bucket):
    plan = FaultPlan()
    proxy = faulty(plan)
    uri = f"s3://{s3_bucket}/perm"
    store = ResultStore.open(uri, proxy.endpoint, retry_budget_s=1.5, request_timeout_s=1.0, create=False)
    direct = ResultStore.open(uri, s3_endpoint, create=False)
    writer = BatchWriter(store, "r1", batch_rows=1, flush_interval_s=3600)
    writer.add(_row("a"))  # steps-free batch: one write
    writer.add(_row("b"))
    plan.fail_writes()  # from here on every write is throttled
    with pytest.raises(StoreWriteError) as err:
        writer.add(_row("c"))
    text = str(err.value)
    assert "\n" not in text and f"S3 bucket {s3_bucket!r}" in text and "SLOW_DOWN" in text
    assert plan.injected["permanent"] >= 2  # it retried before giving up
    # the writer is broken: closing it raises at once instead of waiting out the budget again
    with pytest.raises(StoreWriteError):
        writer.close()
    assert sorted(direct.read_trials("r1", dedupe=False).column("trial_key").to_pylist()) == ["a", "b"]
    import boto3

    uploads = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").list_objects_v2(
        Bucket=s3_bucket, Prefix="perm/")
    assert len([o for o in uploads.get("Contents", []) if o["Key"].endswith(".parquet")]) == 2


# -- a local store on a full filesystem -------------------------------------------------------

@pytest.fixture
def small_fs(tmp_path: Path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path: Path) -> None:
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.mark.root
def test_full_disk_is_one_clear_error_and_nothing_half_visible(small_fs: Path):
    store = ResultStore.open(str(small_fs / "store"))
    store.write_rows("trials", "r1", _table([_row("a")]))
    _fill(small_fs / "ballast")
    with pytest.raises(StoreWriteError) as err:
        store.write_artifact("r1", "b", 1, "big.bin", os.urandom(256 * 1024))
    text = str(err.value)
    assert "\n" not in text and "No space left on device" in text and str(small_fs / "store") in text
    leftovers = [p for p in (small_fs / "store").rglob("*") if p.name.startswith(".tmp-")]
    assert leftovers == []  # the torn temp file is gone, so are its bytes
    assert store.read_artifact("r1", "b", 1, "big.bin") is None
    assert store.read_trials("r1").column("trial_key").to_pylist() == ["a"]


@pytest.mark.root
def test_farm_run_on_a_full_disk_exits_6_with_one_line(small_fs: Path, tmp_path: Path):
    from tests.support.tasks import CHECK_ANSWER, make_task_dir

    tasks = tmp_path / "tasks"
    make_task_dir(tasks, "t0", CHECK_ANSWER)
    (small_fs / "store").mkdir()
    _fill(small_fs / "ballast")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FARM_"))}
    done = subprocess.run(FARM + ["run", "--quiet", f"benchmark.path={tasks}", "agent=oracle", "run.executor=local",
                                  f"store.uri={small_fs / 'store'}"], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 6, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert [p for p in (small_fs / "store").rglob("*") if p.name.startswith(".tmp-")] == []


def _table(rows):
    from farm.store.schema import TRIALS_SCHEMA, to_table

    return to_table(rows, TRIALS_SCHEMA)
