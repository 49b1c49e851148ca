from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.shared import shared_path
from tests.support.endpoints import free_port
from tests.support.podman import prepare_podman
from tests.support.requirements import marked_needs, missing, skip_message
from tests.support.tiers import is_unit


# tryfirst: before `-m` deselects, which reads the `unit` marker set here
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``@pytest.mark.bwrap`` / ``root`` / ``engine`` / ``tools("git")``: skip, with one line naming
    what is missing, a test whose machine requirements are not met (tests/support/requirements.py).
    ``unit``: set on every in-process test (tests/support/tiers.py), selected by ``make test-unit``."""
    gaps_for: dict[tuple[str, ...], list[str]] = {}
    for item in items:
        if is_unit(item):
            item.add_marker(pytest.mark.unit)
        needs = tuple(marked_needs(item))
        if not needs:
            continue
        if needs not in gaps_for:
            gaps_for[needs] = missing(*needs)
        if gaps_for[needs]:
            item.add_marker(pytest.mark.skip(reason=skip_message(gaps_for[needs])))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.shared("fixtures/harbor", ...)``: the test reads those paths under ../shared."""
    for mark in item.iter_markers("shared"):
        for rel in mark.args:
            shared_path(*rel.split("/"))


@pytest.fixture(autouse=True)
def _unit_tests_stay_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test classified ``unit`` that starts a process or listens on a socket fails, naming the
    list to fix (tests/support/tiers.py). The classification is by module name and measured once;
    without this a new test that starts a sandbox in a 'unit' module would slip into
    ``make test-unit`` and fail only on a machine without bubblewrap."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(what: str):
        def call(*args: object, **kwargs: object) -> None:
            raise AssertionError(
                f"{request.node.nodeid} is in the unit tier but {what}: mark it (bwrap/root/engine/"
                "tools/integration) or list its module in tests/support/tiers.py PROCESS_MODULES")
        return call

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("starts a process"))
    for name in ("fork", "posix_spawn", "posix_spawnp"):
        monkeypatch.setattr(os, name, refuse("starts a process"))
    monkeypatch.setattr(socket.socket, "listen", refuse("listens on a socket"))


@pytest.fixture
def harbor_dir() -> Path:
    """The real Harbor task directories (third-party, not bundled): ../shared/fixtures/harbor."""
    return shared_path("fixtures", "harbor")


@pytest.fixture(scope="module")
def podman_env() -> dict[str, str]:
    """podman as root with its containers.conf and images (tests/support/podman.py); here because
    tests in tests/sandbox and tests/agent both use it."""
    return prepare_podman()


# -- a real S3 server on loopback ------------------------------------------------------------

@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server process on 127.0.0.1 (real HTTP + S3 wire protocol, no AWS)."""
    pytest.importorskip("moto")
    port = free_port()
    creds = {"AWS_ACCESS_KEY_ID": "farmtest", "AWS_SECRET_ACCESS_KEY": "farmtest", "AWS_REGION": "us-east-1",
             "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("moto S3 server did not start")
    yield endpoint
    proc.terminate()
    proc.wait(10)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def s3_bucket(s3_endpoint):
    import boto3

    name = f"farm-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def store_uri(request, tmp_path):
    """The same store tests run against a local directory and a real S3 server."""
    if request.param == "local":
        return str(tmp_path / "store"), None
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/results", endpoint
