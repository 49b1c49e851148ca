"""The verifier cache (farm/grade/verifier_cache.py): what it holds, that its python runs where
the image has none, and how it is staged into a sandbox."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from farm.config import VerifierCacheConfig
from farm.grade import verifier_cache as vc
from farm.grade.harbor import home_tools, run_harbor_verifier
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.model import Environment, Task, VerifierSpec
from tests.shared import shared_path
from tests.support.verifier_cache import ensure_cache

REPO = Path(__file__).resolve().parents[2]
BARE_IMAGE = "localhost/farm-test-base:bookworm"  # tests/support/podman.py makes it: Debian, no python


@pytest.fixture(scope="session")
def verifier_cache() -> Path:
    return ensure_cache()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_scan_pins_finds_uvx_and_pip_pins_across_continuation_lines(tmp_path: Path) -> None:
    (tmp_path / "a" / "tests").mkdir(parents=True)
    (tmp_path / "a" / "tests" / "test.sh").write_text(
        "uvx \\\n  -p 3.13 \\\n  -w pytest==8.4.1 \\\n  -w torch==2.7.1 \\\n  --with numpy==2.3.3 pytest /tests\n")
    (tmp_path / "b" / "tests").mkdir(parents=True)
    (tmp_path / "b" / "tests" / "test.sh").write_text(
        "pip install pytest==8.4.2 requests==2.32.5 --break-system-packages\nuv pip install mailman==3.3.8\n")
    assert vc.scan_pins([tmp_path]) == ["mailman==3.3.8", "numpy==2.3.3", "pytest==8.4.1", "pytest==8.4.2",
                                        "requests==2.32.5"]
    assert "torch==2.7.1" in vc.scan_pins([tmp_path], exclude=())


def test_scan_pins_on_terminal_bench_2_holds_the_test_runner_pins() -> None:
    tb2 = shared_path("fixtures/terminal-bench-2.0")
    pins = vc.scan_pins([tb2])
    assert {"pytest==8.4.1", "pytest-json-ctrf==0.3.5", "psutil==7.0.0", "pytest==8.4.2"} <= set(pins)
    assert not any(p.startswith(("torch==", "git+")) for p in pins)
    assert set(vc.TOOL_REQUIREMENTS) - {"requests==2.32.4"} <= set(pins) | {"requests==2.32.4"}


def test_a_directory_without_a_manifest_is_refused_naming_the_make_target(tmp_path: Path) -> None:
    with pytest.raises(vc.CacheError, match=r"holds no manifest.json: build it with `make verifier-cache`"):
        vc.load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 1, "stage_dir": "/elsewhere"}))
    with pytest.raises(vc.CacheError, match="stage_dir '/elsewhere'"):
        vc.load_manifest(tmp_path)


def test_the_manifest_names_every_tool_with_its_version_and_true_sha256(verifier_cache: Path) -> None:
    man = vc.load_manifest(verifier_cache)
    assert man.uv_version == vc.UV_VERSION and man.python_version.startswith("3.13.")
    tools = {t["tool"]: t for t in man.data["tools"]}
    assert tools["python3.13"]["sha256"] == _sha(verifier_cache / "python" / "bin" / "python3.13")
    for w in man.data["wheels"]:
        assert _sha(verifier_cache / "wheels" / w["file"]) == w["sha256"]
    names = {w["file"] for w in man.data["wheels"]}
    assert {"pytest-8.4.1-py3-none-any.whl", "pytest_json_ctrf-0.3.5-py3-none-any.whl"} <= names
    assert {d["package"] for d in man.data["python"]["debs"]} >= {"python3.13-minimal", "libc6"}
    assert all(len(d["sha256"]) == 64 for d in man.data["python"]["debs"])
    # no absolute symlink: the sandbox agent's untar refuses them, and they would point into the image
    assert not [p for p in verifier_cache.rglob("*") if p.is_symlink() and os.readlink(p).startswith("/")]


def test_a_second_build_with_the_same_inputs_does_nothing(verifier_cache: Path) -> None:
    man = vc.load_manifest(verifier_cache)
    again = vc.build(verifier_cache, man.data["requirements"], pythons=tuple(man.data["pythons"]))
    assert again.data["built_at"] == man.data["built_at"]


def _podman(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", "/var/tmp/farm-k8s/containers.conf")}
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.engine
@pytest.mark.root
def test_the_relocated_python_runs_pytest_offline_in_an_image_without_python(verifier_cache: Path,
                                                                              tmp_path: Path) -> None:
    if _podman("image", "exists", BARE_IMAGE).returncode != 0:
        pytest.skip(f"{BARE_IMAGE} is absent (tests/support/podman.py makes it)")
    (tmp_path / "test_x.py").write_text(
        "import ssl, sqlite3, ctypes, lzma\n\ndef test_ok():\n    assert ssl.OPENSSL_VERSION\n")
    script = (
        "command -v python3 python3.13 && exit 3; ldd --version | head -1; "
        f"export PATH=$PATH:{vc.STAGE_DIR}/python/bin UV_OFFLINE=1 UV_PYTHON_DOWNLOADS=never "
        f"UV_FIND_LINKS={vc.STAGE_DIR}/wheels; "
        f"{vc.STAGE_DIR}/bin/uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /tmp/c.json "
        "-p no:cacheprovider /t/test_x.py -rA && test -s /tmp/c.json"
    )
    res = _podman("run", "--rm", "--network=none", "-v", f"{verifier_cache}:{vc.STAGE_DIR}:ro",
                  "-v", f"{tmp_path}:/t:ro", BARE_IMAGE, "bash", "-c", script)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "GLIBC 2.36" in res.stdout  # bookworm's glibc: older than the trixie python was built for
    assert "platform linux -- Python 3.13" in res.stdout and "1 passed" in res.stdout


def _task(tmp_path: Path, test_sh: str) -> Task:
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "test.sh").write_text(test_sh)
    return Task(benchmark="b", task_id="t", instruction="", environment=Environment(workdir="/app"),
                verifier=VerifierSpec(tests_dir=tests), verifier_timeout_s=120,
                agent_network="no-network", verifier_network="no-network")


@pytest.mark.bwrap
async def test_staging_places_uv_only_where_absent_and_appends_python_to_the_end_of_path(
        verifier_cache: Path, tmp_path: Path) -> None:
    sh = ('source "$HOME/.local/bin/env"; command -v uv; uv --version; echo "PATH=$PATH"; '
          'command -v python3.13; env | grep -E "^(UV|PIP)_" | sort; echo 1 > /logs/verifier/reward.txt\n')
    task = _task(tmp_path, sh)
    sb = LocalSandbox(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        res = await run_harbor_verifier(task, sb, VerifierCacheConfig(dir=str(verifier_cache), offline=True))
        # an image (or an earlier download) that already has uv, or its own python3.13, keeps them
        await sb.exec('printf "#!/bin/sh\\necho image-uv\\n" > /root/.local/bin/uv; chmod +x /root/.local/bin/uv; '
                      'mkdir -p /app/bin; printf "#!/bin/sh\\n" > /app/bin/python3.13; chmod +x /app/bin/python3.13',
                      cwd="/")
        own = dataclasses.replace(task, verifier=dataclasses.replace(
            task.verifier, env={"PATH": "/app/bin:/usr/local/bin:/usr/bin:/bin"}))
        kept = await run_harbor_verifier(own, sb, VerifierCacheConfig(dir=str(verifier_cache), offline=False))
    finally:
        await sb.close()
    header, *lines = res.output.splitlines()
    man = vc.load_manifest(verifier_cache)
    n = len(vc.wheels_for(man, sh))
    staged = (f"[farm verifier-cache] staged {verifier_cache} ({n} of {len(man.data['wheels'])} wheels "
              f"(the pins test.sh names), bin, python) at {vc.STAGE_DIR} in ")
    assert header.startswith(staged)
    assert "uv=placed uvx=placed env=placed" in header and "UV_OFFLINE=1" in header
    assert lines[:2] == ["/root/.local/bin/uv", f"uv {vc.UV_VERSION}"]
    path = next(ln for ln in lines if ln.startswith("PATH="))
    assert path.startswith("PATH=/root/.local/bin:") and path.endswith(f":{vc.STAGE_DIR}/python/bin")
    assert f"{vc.STAGE_DIR}/python/bin/python3.13" in lines
    assert {"UV_OFFLINE=1", "PIP_RETRIES=0", "UV_PYTHON_DOWNLOADS=never",
            f"UV_FIND_LINKS={vc.STAGE_DIR}/wheels", f"PIP_FIND_LINKS={vc.STAGE_DIR}/wheels"} <= set(lines)
    assert res.resolved and res.stage_s is not None and 0 < res.stage_s < 60
    kept_header, *kept_lines = kept.output.splitlines()
    assert "uv=kept uvx=kept env=kept" in kept_header and "(the pins test.sh names)) at" in kept_header
    assert "the image's own python3.13 (bundle not staged)" in kept_header
    assert "image-uv" in kept_lines and "/app/bin/python3.13" in kept_lines and "UV_OFFLINE=1" not in kept.output
    assert "UV_NATIVE_TLS=1" in kept_header and "UV_NATIVE_TLS=1" not in header  # online: the image's CA store
    assert not next(ln for ln in kept_lines if ln.startswith("PATH=")).endswith("/python/bin")


@pytest.mark.bwrap
async def test_what_the_agent_wrote_in_local_bin_is_replaced_and_what_the_image_had_is_kept(
        verifier_cache: Path, tmp_path: Path) -> None:
    sh = (f'source "$HOME/.local/bin/env"; uv; cmp "$HOME/.local/bin/uvx" {vc.STAGE_DIR}/bin/uvx && echo cache-uvx; '
          'echo "PATH=$PATH"; echo 1 > /logs/verifier/reward.txt\n')
    task = _task(tmp_path, sh)
    sb = LocalSandbox(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        # the image's own uv, recorded before the agent's first step (farm/run/trial.py)
        await sb.exec('mkdir -p /root/.local/bin && printf "#!/bin/sh\\necho image-uv\\n" > /root/.local/bin/uv && '
                      'chmod +x /root/.local/bin/uv', cwd="/")
        before = await home_tools(sb)
        # the agent: a uvx that passes everything, reached through a link, and an env of its own
        await sb.exec('mkdir -p /app && printf "#!/bin/sh\\necho agent-uvx\\n" > /app/fake && chmod +x /app/fake && '
                      'ln -s /app/fake /root/.local/bin/uvx && '
                      'printf "echo agent-env\\n" > /root/.local/bin/env', cwd="/")
        res = await run_harbor_verifier(task, sb, VerifierCacheConfig(dir=str(verifier_cache)), image_tools=before)
        fake = (await sb.exec("cat /app/fake", cwd="/")).stdout
    finally:
        await sb.close()
    assert set(before) == {"uv"}
    header, *lines = res.output.splitlines()
    assert "~/.local/bin: uv=kept uvx=placed env=placed (replaced what the agent wrote: env uvx);" in header
    assert "image-uv" in lines and "cache-uvx" in lines
    assert "agent-env" not in lines and "agent-uvx" not in lines
    assert next(ln for ln in lines if ln.startswith("PATH=")).startswith("PATH=/root/.local/bin:")
    assert fake == "#!/bin/sh\necho agent-uvx\n"  # the link was removed, not written through
    assert res.resolved


@pytest.mark.bwrap
async def test_offline_pip_takes_pins_from_the_cache_and_still_obeys_a_tests_own_index_url(
        verifier_cache: Path, tmp_path: Path) -> None:
    # no network: PyPI is unreachable, but pins come from the staged wheels; a test that names
    # its own index (a server the agent started) must get that index, not only the cache
    sh = ("/usr/bin/python3 -m pip download -q --no-deps -d /tmp/d pytest==8.4.1 && echo from-cache; "
          "/usr/bin/python3 -m pip download --no-deps -d /tmp/e --index-url http://127.0.0.1:9/simple "
          "pytest==8.4.1 2>&1 | grep -c 'Looking in indexes: http://127.0.0.1:9/simple'; "
          "echo 1 > /logs/verifier/reward.txt\n")
    task = _task(tmp_path, sh)
    sb = LocalSandbox(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        res = await run_harbor_verifier(task, sb, VerifierCacheConfig(dir=str(verifier_cache), offline=True))
    finally:
        await sb.close()
    assert res.output.splitlines()[1:3] == ["from-cache", "1"], res.output


def test_staging_sends_the_wheels_of_the_tool_pins_and_of_the_pins_test_sh_names(verifier_cache: Path) -> None:
    man = vc.load_manifest(verifier_cache)
    closure = man.data["closure"]
    base = set(vc.wheels_for(man, "bash run-tests.sh\n"))
    assert base == {f for req in vc.TOOL_REQUIREMENTS for f in closure[req]}
    assert "pytest-8.4.1-py3-none-any.whl" in base and "pluggy" in " ".join(base)
    # a pin the cache does not hold adds nothing (uv then reports it missing: verifier_setup)
    assert set(vc.wheels_for(man, "uvx -w pytest==8.4.1 -w nosuch==1.0 pytest\n")) == base
    assert vc.wheels_for(man, "pip install -r /tests/requirements.txt\n") is None  # unknown: send all
    whole = dict(man.data)
    del whole["closure"]
    assert vc.wheels_for(vc.Manifest(man.root, whole), "uvx pytest\n") is None  # an older cache: all


@pytest.mark.bwrap
async def test_a_cache_dir_that_is_no_cache_is_an_infra_error_naming_it_not_a_reward(tmp_path: Path) -> None:
    task = _task(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")
    sb = LocalSandbox(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        res = await run_harbor_verifier(task, sb, VerifierCacheConfig(dir=str(tmp_path / "nothing")))
    finally:
        await sb.close()
    assert (res.error_class, res.reward, res.resolved) == ("verifier_cache", None, False)
    assert res.error == (f"grade.verifier_cache.dir={str(tmp_path / 'nothing')!r} holds no manifest.json: "
                         "build it with `make verifier-cache`")


def _sdist(where: Path, name: str, version: str, requires: list[str], compiled: bool = False) -> None:
    """A real sdist of a tiny project (setuptools), in a local find-links directory."""
    src = where / f"src-{name}"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text(f"VERSION = {version!r}\n")
    ext = ("from setuptools.dist import Distribution\n"
           "class D(Distribution):\n    def has_ext_modules(self):\n        return True\n") if compiled else ""
    (src / "setup.py").write_text(
        "from setuptools import setup\n" + ext
        + f"setup(name={name!r}, version={version!r}, packages=[{name!r}], install_requires={requires!r}"
        + (", distclass=D" if compiled else "") + ")\n")
    subprocess.run([str(REPO / ".venv/bin/python") if (REPO / ".venv/bin/python").exists() else "python3",
                    "setup.py", "-q", "sdist", "-d", str(where)], cwd=src, check=True, capture_output=True)
    shutil.rmtree(src)


def _target_flags(py: str) -> list[str]:
    flags = ["--python-version", py, "--implementation", "cp", "--abi", "cp" + py.replace(".", "")]
    for plat in vc.WHEEL_PLATFORMS:
        flags += ["--platform", plat]
    return flags


@pytest.fixture()
def sdist_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip sees only a local directory of sdists (no index, no build isolation: offline)."""
    index = tmp_path / "index"
    index.mkdir()
    _sdist(index, "farmpuredep", "2.0", [])
    _sdist(index, "farmpure", "1.0", ["farmpuredep==2.0"])
    _sdist(index, "farmnative", "1.0", [], compiled=True)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # pip's spelling of "do not isolate"
    return index


def test_an_sdist_only_pin_and_its_sdist_only_dependency_are_built_as_pure_wheels_for_every_python(
        sdist_index: Path, tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip"]
    built = tmp_path / "built"
    for py in ("3.12", "3.13"):
        dest = tmp_path / f"got-{py}"
        ok, made = vc.download_closure(pip, dest, "farmpure==1.0", _target_flags(py), built)
        assert ok, py
        assert sorted(p.name for p in dest.iterdir()) == ["farmpure-1.0-py3-none-any.whl",
                                                           "farmpuredep-2.0-py3-none-any.whl"]
        # built once, then found by --find-links for the second interpreter
        assert made == (["farmpure==1.0", "farmpuredep==2.0"] if py == "3.12" else [])


def test_an_sdist_that_builds_a_platform_wheel_is_not_offered_to_other_interpreters(
        sdist_index: Path, tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip"]
    built = tmp_path / "built"
    assert vc.build_pure_wheel(pip, "farmnative==1.0", built) is None
    assert list(built.iterdir()) == []
    ok, made = vc.download_closure(pip, tmp_path / "got", "farmnative==1.0", _target_flags("3.13"), built)
    assert (ok, made) == (False, [])
