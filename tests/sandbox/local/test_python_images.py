"""The local backend under ``FROM python:*`` (pip works as in the official image) and a RUN
pipeline whose first command fails, against real bubblewrap sandboxes and the host's python."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from farm.sandbox.base import SandboxStartError
from farm.sandbox.local.policy import PYTHON_ENV
from farm.sandbox.local.sandbox import LocalSandbox
from tests.support.images import harbor_task

pytestmark = pytest.mark.bwrap

WHEEL = "farmdemo-1.0-py3-none-any.whl"


def _wheel(path: Path) -> None:
    """A pure-Python wheel made here, so that ``pip install`` needs no index and no network."""
    info = "farmdemo-1.0.dist-info"
    files = {
        "farmdemo/__init__.py": "ANSWER = 42\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: farmdemo\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: farm-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n")


async def test_pip_install_in_a_run_step_works_under_from_python(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, f"FROM python:3.11-slim\nWORKDIR /app\nCOPY {WHEEL} /app/\n"
                                 f"RUN pip install --no-index --no-deps /app/{WHEEL}\n")
    _wheel(tmp_path / "t" / "environment" / WHEEL)
    sb = LocalSandbox(task, root_dir=tmp_path / "sandboxes", limits=False)
    await sb.start()
    try:
        # what the step installed is importable by `python` (as the official image names it)
        r = await sb.exec("python -c 'import farmdemo; print(farmdemo.ANSWER)'; command -v pip python")
        assert r.exit_code == 0, r.output
        assert r.stdout.split() == ["42", f"{PYTHON_ENV}/bin/pip", f"{PYTHON_ENV}/bin/python"], r.output
        # and the agent may install more, as in the official image
        again = await sb.exec(f"pip install --no-index --no-deps --force-reinstall /app/{WHEEL} >/dev/null && echo ok")
        assert again.stdout.strip() == "ok", again.output
    finally:
        await sb.close()


async def test_a_debian_base_keeps_the_hosts_python_untouched(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "FROM debian:bookworm\nWORKDIR /app\n")
    sb = LocalSandbox(task, root_dir=tmp_path / "sandboxes", limits=False)
    await sb.start()
    try:
        r = await sb.exec(f"echo $PATH; test -e {PYTHON_ENV} && echo present || echo absent")
        assert PYTHON_ENV not in r.stdout.splitlines()[0] and r.stdout.split()[-1] == "absent", r.output
    finally:
        await sb.close()


async def test_a_failing_command_inside_a_run_pipeline_fails_the_replayed_step(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "FROM debian:bookworm\nWORKDIR /app\nRUN echo before\nRUN false | true\n")
    sb = LocalSandbox(task, root_dir=tmp_path / "sandboxes", limits=False)
    with pytest.raises(SandboxStartError) as e:
        await sb.start()
    assert e.value.reason == "build_step"
    assert "build step 3 (RUN false | true) exited with code 1" in str(e.value)
