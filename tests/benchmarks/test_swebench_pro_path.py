"""The whole SWE-bench Pro path on an instance this test makes (issue 38 item 1): a row in the
dataset's fields, the repository in a mirror, base and instance Dockerfiles in the published shape
(tests/support/swebench_pro_instance.py); farm builds the instance stand-in from those Dockerfiles
under podman (its build.sh's pip going through pypi-timemachine, as of the recipe's date), and
``farm run`` grades it with the instance's parser: the gold patch resolves, the empty patch does not,
though the image holds only the base commit (the fix's test files come from test_patch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.swebench_pro_instance import PYTEST_AS_OF, make_pro_instance, pro_overrides, write_rows

from .standin import REPO, ensure_standins

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.tools("git")]


def _run(agent: str, overrides: list[str], tmp: Path, env: dict) -> dict:
    store = tmp / f"store-{agent}"
    cmd = [sys.executable, "-m", "farm.cli", "run", "-q", f"agent={agent}", *overrides, "sandbox=docker",
           "sandbox.docker.engine=podman", "sandbox.image_policy=build", "sandbox.docker.pull=never",
           f"store.uri={store}", "run.executor=local"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400, cwd=REPO)
    rows_out = pq.read_table(store / "trials").to_pylist() if (store / "trials").exists() else []
    assert res.returncode == 0 and len(rows_out) == 1, (res.returncode, res.stderr[-3000:], rows_out)
    verifier = next((store / "artifacts").rglob("verifier.txt")).read_text()
    return {"row": rows_out[0], "verifier": verifier}


def _inspect(image: str, fmt: str, env: dict) -> str:
    return subprocess.run(["podman", "image", "inspect", "--format", fmt, image], capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.mark.timeout(3000)
def test_gold_resolves_and_empty_does_not_on_a_made_pro_instance(tmp_path: Path):
    env = ensure_standins("python:3.11-slim")  # what the recipe's FROM python:3.11-slim gets
    row, mirror, scripts = make_pro_instance(tmp_path)
    overrides = pro_overrides(write_rows(row, tmp_path), mirror, scripts, tmp_path)

    gold = _run("oracle", overrides, tmp_path, env)
    r = gold["row"]
    assert r["status"] == "resolved", (r["status"], r["error_class"], r["error"], gold["verifier"][-2000:])
    assert (r["benchmark"], r["task_id"]) == ("swebench_pro", row["instance_id"])
    assert r["base_image_standin"] is True
    assert "[farm swebench-pro] resolved; 2 test statuses parsed" in gold["verifier"]

    image = f"docker.io/jefzda/sweap-images:{row['dockerhub_tag']}"
    diff = _inspect(image, '{{index .Labels "io.farm.standin.differences"}}', env)
    assert "one-commit clone of the base commit" in diff
    assert "qt5-default" in diff and "libxslt-dev->libxslt1-dev" in diff
    # the image holds the base commit and nothing after it; its pip resolved as of the recipe's date
    probe = subprocess.run(["podman", "run", "--rm", "--network=none", "--entrypoint", "/bin/sh", image, "-c",
                            "git -C /app rev-list --all | wc -l; python -m pytest --version 2>&1; "
                            "cat /root/.config/pip/pip.conf"], capture_output=True, text=True, env=env, timeout=300)
    lines = probe.stdout.split("\n")
    assert lines[0].strip() == "1", probe.stdout
    assert f"pytest {PYTEST_AS_OF}" in probe.stdout, probe.stdout
    assert "index-url = http://127.0.0.1:9876/" in probe.stdout  # as the recipe left it: dead at test time

    empty = _run("nop", overrides, tmp_path, env)
    r = empty["row"]
    assert r["status"] == "unresolved", (r["status"], r["error_class"], r["error"], empty["verifier"][-2000:])
    assert "1 required test(s) not PASSED: tests/test_calc.py::test_add" in empty["verifier"]


@pytest.mark.timeout(3000)
def test_the_gold_sitting_script_validates_the_made_instance_and_records_it(tmp_path: Path):
    # `make swebench-pro-gold` on the same made instance (its image is the one the test above built,
    # found by its recipe label): gold resolved and empty unresolved by the instance's parser, both
    # rules agreeing, one record per instance, and the valid one written to the ceiling as measured
    import importlib.util
    import json

    env = ensure_standins("python:3.11-slim")
    row, mirror, scripts = make_pro_instance(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "scripts/swebench_pro_gold.py", "--rows", str(write_rows(row, tmp_path)), "--repos",
           str(mirror), "--scripts", str(scripts), "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400, cwd=REPO)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 1 and recs[0]["built"] is True and recs[0]["image_bytes"] > 0, recs
    gold, empty = recs[0]["gold"], recs[0]["empty"]
    assert (gold["verdict"], gold["official"], empty["verdict"], empty["official"]) == (True, True, False, False)
    assert empty["failing"] == ["tests/test_calc.py::test_add"]
    assert "| farmtest/calc | 1 | 1 | 1 | 1 | 1 | 1 |" in res.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert "1 done before, 0 to run now" in again.stdout  # resumes: nothing runs twice
    spec = importlib.util.spec_from_file_location("pro_gold_under_test", REPO / "scripts" / "swebench_pro_gold.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    ceilings = tmp_path / "ceilings"
    ceilings.mkdir()
    shipped = REPO / "farm" / "tasks" / "ceilings" / "swebench_pro.json"
    (ceilings / shipped.name).write_text(shipped.read_text())
    mod.merge_ceiling(out, "abc1234", ceilings)
    doc = json.loads((ceilings / shipped.name).read_text())
    assert doc["tasks"][row["instance_id"]] == {"status": "pass", "provenance": "farm-swebench-pro-gold-abc1234"}
    assert doc["provenance"]["farm-swebench-pro-gold-abc1234"]["kind"] == "measured"
