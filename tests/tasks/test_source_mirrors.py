"""Pinned sources on a cluster without internet: mirrors, the cache, `farm tasks fetch`, names.

Each test makes its own git repositories (a bare "mirror" and a work tree); the registered
source is pointed at the test's pinned commit, since no test can create the real one.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from farm.cli import main
from farm.config import conf_dir, load_config
from farm.errors import ConfigError
from farm.tasks import catalog, fetch
from farm.tasks.benchmark import load_benchmark_report
from tests.support.tasks import make_task_files as make_task

ID = "instance_org__repo-" + "0123456789abcdef" * 4 + "-vnan"  # as long as SWE-bench Pro's ids


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A dataset repo: commit `pinned` (2 tasks under the subpath), then `later`; a bare mirror."""
    if shutil.which("git") is None:
        pytest.skip("git missing")
    work = tmp_path / "work"
    sub = work / "datasets" / "swebench-verified"
    make_task(sub, "django__django-1")
    make_task(sub, ID)
    (work / "other").mkdir()
    (work / "other" / "x").write_text("not part of the subpath\n")
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    git(work, "add", "-A")
    git(work, "commit", "-qm", "pinned")
    pinned = git(work, "rev-parse", "HEAD").strip()
    (sub / "django__django-1" / "instruction.md").write_text("later\n")
    git(work, "commit", "-qam", "later")
    bare = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    src = dataclasses.replace(catalog.get_source("swebench_verified"), revision=pinned,
                              url="https://github.invalid/laude-institute/harbor-datasets.git", image_lock=None)
    monkeypatch.setitem(catalog.SOURCES, "swebench_verified", src)
    cache = tmp_path / "farm-cache"
    monkeypatch.setenv("FARM_CACHE_DIR", str(cache))
    return {"work": work, "bare": bare, "pinned": pinned, "later": git(work, "rev-parse", "HEAD").strip(),
            "cache": cache, "src": src}


def test_list_through_a_local_bare_mirror_then_offline(repo, capsys) -> None:
    assert main(["tasks", "list", "benchmark=swebench-verified", f"benchmark.mirror={repo['bare']}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split("\t")[1] for ln in out[1:-1]] == ["django__django-1", ID]  # whole ids, not cut
    assert all(ln.split("\t")[0] == "swebench_verified" for ln in out[1:-1])
    # FARM_CACHE_DIR is where the checkout went, keyed by the upstream URL, at the pinned revision
    root = fetch.checkout_root(repo["src"])
    assert root.is_relative_to(repo["cache"] / "sources")
    assert git(root, "rev-parse", "HEAD").strip() == repo["pinned"] and not (root / "other").exists()
    shutil.rmtree(repo["bare"])
    # no mirror, no network: the verified cache serves it
    loaded = load_benchmark_report(load_config(["benchmark=swebench_verified"]).benchmark)
    assert [t.task_id for t in loaded.tasks] == ["django__django-1", ID]
    assert {t.source.revision for t in loaded.tasks} == {repo["pinned"]}
    assert "later" not in loaded.tasks[0].instruction


def test_fetch_materialises_the_source(repo, capsys) -> None:
    assert main(["tasks", "fetch", "benchmark=swebench_verified", f"benchmark.mirror=file://{repo['bare']}"]) == 0
    out = capsys.readouterr().out
    assert repo["pinned"] in out and "(2 task directories)" in out
    assert fetch.is_cached(repo["src"])
    assert main(["tasks", "fetch", "benchmark=builtin"]) == 2
    assert "needs a pinned source" in capsys.readouterr().err


def test_a_checkout_mirror_is_used_in_place_only_at_the_pinned_revision(repo) -> None:
    clone = repo["work"]  # at `later`
    with pytest.raises(ConfigError, match=rf"checked out at revision {repo['later']}, but benchmark swebench_verified "
                                          rf"is pinned to revision {repo['pinned']}"):
        fetch.materialize(repo["src"], mirror=str(clone))
    git(clone, "checkout", "-q", repo["pinned"])
    assert fetch.materialize(repo["src"], mirror=str(clone)) == clone / "datasets" / "swebench-verified"
    (clone / "datasets" / "swebench-verified" / "django__django-1" / "task.toml").write_text("edited = 1\n")
    with pytest.raises(ConfigError, match=r"at the pinned revision .* but has 1 local change\(s\)"):
        fetch.materialize(repo["src"], mirror=str(clone))
    plain = repo["work"].parent / "plain"
    plain.mkdir()
    with pytest.raises(ConfigError, match=r"'benchmark.mirror': not a git repository"):
        fetch.materialize(repo["src"], mirror=str(plain))


def test_a_marker_file_is_never_trusted(repo) -> None:
    root = fetch.checkout_root(repo["src"])
    shutil.copytree(repo["work"], root, ignore=shutil.ignore_patterns(".git"))
    (root / fetch.MARKER).write_text(json.dumps({"revision": repo["pinned"]}))
    assert not fetch.is_cached(repo["src"])
    with pytest.raises(ConfigError, match=r"is not a git checkout\) and offline mode is on; run `farm tasks fetch "
                                          r"benchmark=swebench_verified`"):
        fetch.materialize(repo["src"], offline=True)
    # a cached checkout moved to another revision is refetched, not used
    shutil.rmtree(root)
    fetch.materialize(repo["src"], mirror=str(repo["bare"]))
    git(root, "fetch", "-q", str(repo["bare"]), "main")
    git(root, "checkout", "-q", "FETCH_HEAD")
    assert "revision " + repo["later"] in fetch.checkout_problem(root, repo["src"])
    fetch.materialize(repo["src"], mirror=str(repo["bare"]))
    assert git(root, "rev-parse", "HEAD").strip() == repo["pinned"]


def test_a_mirror_without_the_revision_names_the_fix(repo, tmp_path: Path) -> None:
    empty = tmp_path / "empty.git"
    git(tmp_path, "init", "-q", "--bare", str(empty))
    pattern = rf"(?s)could not fetch revision {repo['pinned']} from file://.*farm tasks fetch"
    with pytest.raises(ConfigError, match=pattern):
        fetch.materialize(repo["src"], mirror=str(empty))


def test_a_local_copy_that_is_the_pinned_checkout_records_its_revision(repo) -> None:
    git(repo["work"], "checkout", "-q", repo["pinned"])
    path = repo["work"] / "datasets" / "swebench-verified"
    cfg = load_config(["benchmark=swebench-verified", f"benchmark.path={path}"]).benchmark
    assert {t.source.revision for t in load_benchmark_report(cfg).tasks} == {repo["pinned"]}
    git(repo["work"], "checkout", "-q", "main")
    assert {t.source.revision for t in load_benchmark_report(cfg).tasks} == {""}


@pytest.mark.parametrize("alias", ["swebench-verified", "swebench_verified", "swebench-pro", "swebench_pro",
                                   "terminal-bench-2", "terminal_bench_2", "terminal_bench_2_verified",
                                   "patcheval-verified", "patch_eval_verified"])
def test_every_documented_name_selects_a_source(alias: str) -> None:
    cfg = load_config([f"benchmark={alias}"])
    assert catalog.source_key(cfg.benchmark.name) == cfg.benchmark.name
    assert cfg.benchmark.path is None


def test_every_source_has_a_config_group() -> None:
    groups = {p.stem for p in (conf_dir() / "benchmark").glob("*.yaml")}
    assert set(catalog.SOURCES) <= groups
    for name in groups - {"builtin"}:
        assert catalog.source_key(load_config([f"benchmark={name}"]).benchmark.name) in catalog.SOURCES
