"""Pinned benchmark sources: the registry, git materialisation into the cache, offline reads."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from farm.errors import ConfigError
from farm.tasks import fetch
from farm.tasks.benchmark import load_pinned_source
from farm.tasks.catalog import SOURCES, get_source
from farm.tasks.cli import task_row
from farm.tasks.fetch import materialize
from farm.tasks.image_lock import load_image_lock, resolve_image_registry
from tests.shared import shared_path, shared_root

HARBOR = shared_root() / "fixtures" / "harbor"  # third-party task directories: only in ../shared
needs_harbor = pytest.mark.shared("fixtures/harbor")


def test_pins_match_claims_yaml_and_the_reference() -> None:
    claims = yaml.safe_load(shared_path("reference", "claims.yaml").read_text())["benchmarks"]
    assert set(SOURCES) == {"swebench_verified", "swebench_pro", "terminal_bench_2_verified", "patch_eval_verified"}
    for key, claim in claims.items():
        src = get_source(key)  # claims.yaml says terminal_bench_2 for the verified set
        assert src.revision == claim["revision"] and len(src.revision) == 40
        assert src.subpath == claim["subpath"] and src.expected_tasks == claim["tasks"]
        repo = claim["source"].split(" ")[0]
        assert repo in src.url
    assert get_source("patch_eval_verified").file == "patcheval_verified.json"
    with pytest.raises(ConfigError, match="unknown value 'swebench'.*available"):
        get_source("swebench")


@needs_harbor
def test_harbor_fixtures_load_with_the_vendor_defaults() -> None:
    sv = load_pinned_source("swebench_verified", root=HARBOR / "swebench-verified")
    assert [t.task_id for t in sv] == ["django__django-13401", "django__django-14404"]
    lock = load_image_lock("sweb-v-20260904")
    for t in sv:
        # the digest lock applies: the image is pinned to what the vendor measured
        name = t.task_id.split("__")[1]
        assert t.environment.image == f"swebench/sweb.eval.x86_64.django_1776_{name}@{lock.digests[t.task_id]}"
        assert t.verifier.success_marker == "SWEBench results ends here"
        assert (t.agent_network, t.verifier_network) == ("public", "public")
        assert t.source.revision == "86723674f04e4209ac479d0fb75d9d9f44b4377e"
        assert t.workdir == "/testbed" and t.agent_timeout_s == 3000
    unlocked = load_pinned_source("swebench_verified", root=HARBOR / "swebench-verified", image_lock=False)
    assert unlocked[0].environment.image.endswith(":latest")

    (pro,) = load_pinned_source("swebench_pro", root=HARBOR / "swebench-pro")
    assert pro.verifier.success_marker is None and pro.require_git_patch
    assert pro.environment.resources.memory_mb == 4096 and pro.workdir == "/app"

    tb2 = load_pinned_source("terminal_bench_2", root=HARBOR / "terminal-bench-2")
    assert [t.task_id for t in tb2] == ["cancel-async-tasks", "fix-git", "regex-log"]
    for t in tb2:
        assert not t.require_git_patch  # TB2 tasks are not git repositories
        assert "canary" not in t.instruction.lower().split("\n", 1)[0]
        assert t.environment.build_steps == ()  # prebuilt docker_image: nothing is replayed
    assert tb2[1].environment.image == "alexgshaw/fix-git:20251031"


@needs_harbor
def test_registry_override_and_selection() -> None:
    tasks = load_pinned_source("swebench_verified", root=HARBOR / "swebench-verified",
                           image_registry="mirror.example:5000/hub", task_ids=["django__django-14404"])
    (t,) = tasks
    assert t.environment.image.startswith(
        "mirror.example:5000/hub/swebench/sweb.eval.x86_64.django_1776_django-14404@sha256:")
    with pytest.raises(ConfigError, match=r"\['nope'\] for 'benchmark.task_ids': not in benchmark"):
        load_pinned_source("swebench_verified", root=HARBOR / "swebench-verified", task_ids=["nope"])
    rows = [task_row(t) for t in tasks]
    assert rows[0]["task_id"] == "django__django-14404" and rows[0]["revision"].startswith("8672367")


def test_registry_rewriting_rules() -> None:
    assert resolve_image_registry("ubuntu:24.04", "mirror.io") == "mirror.io/library/ubuntu:24.04"
    assert resolve_image_registry("ghcr.io/patcheval-cve/p:cve-1", "mirror.io/x") == "mirror.io/x/patcheval-cve/p:cve-1"
    assert resolve_image_registry("mirror.io/a/b:1", "mirror.io") == "mirror.io/a/b:1"  # idempotent
    assert resolve_image_registry("ghcr.io/a/b:1", None, "default.io") == "ghcr.io/a/b:1"
    assert resolve_image_registry("a/b:1", None, "default.io") == "default.io/a/b:1"
    assert resolve_image_registry("a/b:1", None) == "a/b:1"
    with pytest.raises(ConfigError, match="hostname"):
        resolve_image_registry("a", "https://mirror.io")


def test_bad_lock_files_name_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "l.json"
    bad.write_text(json.dumps({"images": [{"task_id": "a", "digest": "sha256:xyz"}]}))
    with pytest.raises(ConfigError, match=r"images\[0\]\.digest: invalid value 'sha256:xyz'"):
        load_image_lock(str(bad))
    dup = {"images": [{"task_id": "a", "digest": "sha256:" + "0" * 64}] * 2}
    bad.write_text(json.dumps(dup))
    with pytest.raises(ConfigError, match="duplicate task id 'a'"):
        load_image_lock(str(bad))
    with pytest.raises(ConfigError, match="packaged locks: .*sweb-v-20260904"):
        load_image_lock("no-such-lock")
    assert len(load_image_lock("sweb-v-20260904").digests) == 500


# --- git materialisation against a real (local) remote --------------------------------------


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def remote(tmp_path: Path) -> tuple[str, str, str]:
    """A bare repository with a dataset subpath, an unrelated directory, and two commits."""
    if shutil.which("git") is None:
        pytest.skip("git missing")
    harbor = shared_path("fixtures", "harbor", "swebench-verified")
    work = tmp_path / "work"
    (work / "datasets" / "swebench-verified").mkdir(parents=True)
    (work / "other").mkdir()
    (work / "other" / "big.bin").write_bytes(b"\0" * 1000)
    for d in harbor.iterdir():
        shutil.copytree(d, work / "datasets" / "swebench-verified" / d.name)
    _git(work, "init", "-q", "-b", "main")
    _git(work, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    _git(work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "pinned")
    pinned = _git(work, "rev-parse", "HEAD").strip()
    (work / "datasets" / "swebench-verified" / "django__django-14404" / "instruction.md").write_text("later\n")
    _git(work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "later")
    bare = tmp_path / "remote.git"
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    _git(bare, "config", "uploadpack.allowFilter", "true")
    _git(bare, "config", "uploadpack.allowAnySHA1InWant", "true")
    return f"file://{bare}", pinned, _git(work, "rev-parse", "HEAD").strip()


@needs_harbor
def test_materialize_fetches_the_pinned_revision_sparsely_once(remote, tmp_path: Path, monkeypatch) -> None:
    url, pinned, latest = remote
    src = dataclasses.replace(get_source("swebench_verified"), url=url, revision=pinned)
    monkeypatch.setitem(SOURCES, "swebench_verified", src)
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match="offline"):
        materialize(src, cache, offline=True)
    d = materialize(src, cache)
    root = fetch.checkout_root(src, cache)
    assert d == root / "datasets" / "swebench-verified" and root.parent.parent == cache
    assert not (root / "other").exists(), "sparse checkout fetched more than the subpath"
    # git's own metadata stays: it, not a marker file, says which revision this is
    assert _git(root, "rev-parse", "HEAD").strip() == pinned
    assert _git(root, "status", "--porcelain") == ""
    # the pinned content, not the branch tip
    assert "later" not in (d / "django__django-14404" / "instruction.md").read_text()
    # offline from the cache: `farm tasks list benchmark=swebench_verified` needs no network
    shutil.move(url.removeprefix("file://"), tmp_path / "gone.git")
    tasks = load_pinned_source("swebench_verified", cache_dir=cache, offline=True)
    assert [t.task_id for t in tasks] == ["django__django-13401", "django__django-14404"]
    assert materialize(src, cache) == d  # cached: no fetch (the remote is gone)


def test_materialize_rejects_a_revision_the_remote_lacks(remote, tmp_path: Path) -> None:
    url, _, _ = remote
    src = dataclasses.replace(get_source("swebench_verified"), url=url, revision="1" * 40)
    with pytest.raises(ConfigError, match="git .*fetch.*failed"):
        materialize(src, tmp_path / "cache")
    assert not fetch.is_cached(src, tmp_path / "cache")
    leftovers = [p for p in (tmp_path / "cache").rglob("*") if ".tmp-" in p.name]
    assert leftovers == []
