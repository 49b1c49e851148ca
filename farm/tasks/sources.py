"""The four benchmarks at the exact revisions the vendor measured, and how they are fetched.

Each source is a git URL, a full commit SHA and a subpath (reference/claims.yaml and
leaf-harness.md §5.2). A checkout is fetched once with git (shallow, sparse, blob-filtered
where the server allows it) into a content-addressed cache: ``<cache>/<sha256(url)[:16]>/
<revision>``; the commit SHA names the content, so a complete checkout is never fetched again
and works offline. A file lock makes concurrent fetches of one revision safe.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from farm.errors import ConfigError
from farm.tasks.harbor import HarborDefaults, load_harbor_dir
from farm.tasks.image_lock import apply_image_policy, load_image_lock
from farm.tasks.model import NetworkMode, Source, Task
from farm.tasks.patcheval import load_patcheval_file

log = logging.getLogger(__name__)

MARKER = ".farm-source.json"


@dataclass(frozen=True)
class BenchmarkSource:
    name: str
    display_name: str
    url: str
    revision: str  # full 40-hex commit SHA
    subpath: str
    loader: str  # harbor | patcheval
    expected_tasks: int  # the denominator of every score on this benchmark
    pod_prefix: str
    agent_network: NetworkMode = "no-network"
    verifier_network: NetworkMode = "no-network"
    success_marker: str | None = None
    git_filter: str | None = "blob:none"
    strip_canary: bool = False
    require_git_patch: bool = True
    default_image_registry: str | None = None
    image_lock: str | None = None  # packaged digest lock applied by default
    file: str | None = None  # patcheval: the JSON file inside subpath

    @property
    def source(self) -> Source:
        return Source(url=self.url, revision=self.revision, subpath=self.subpath)

    def harbor_defaults(self) -> HarborDefaults:
        # the vendor loader's defaults for fields task.toml leaves out (harbor-tasks.md §0)
        return HarborDefaults(
            workdir="/app", agent_timeout_s=3600.0, verifier_timeout_s=600.0,
            network=self.agent_network, cpus=0.5, memory_mb=8192, storage_mb=20480,
            success_marker=self.success_marker, require_git_patch=self.require_git_patch,
            strip_canary=self.strip_canary,
        )


_HARBOR_DATASETS = "https://github.com/laude-institute/harbor-datasets.git"

SOURCES: dict[str, BenchmarkSource] = {
    s.name: s
    for s in (
        BenchmarkSource(
            name="swebench_verified", display_name="SWE-bench Verified", url=_HARBOR_DATASETS,
            revision="86723674f04e4209ac479d0fb75d9d9f44b4377e", subpath="datasets/swebench-verified",
            loader="harbor", expected_tasks=500, pod_prefix="sweb-v",
            agent_network="public", verifier_network="public",
            success_marker="SWEBench results ends here", image_lock="sweb-v-20260904",
        ),
        BenchmarkSource(
            name="swebench_pro", display_name="SWE-bench Pro", url=_HARBOR_DATASETS,
            revision="c8e8f3fac7097accaacf261d74c3d6f441de45b1", subpath="datasets/swebenchpro",
            loader="harbor", expected_tasks=731, pod_prefix="sweb-p",
            agent_network="public", verifier_network="public",
        ),
        BenchmarkSource(
            name="terminal_bench_2_verified", display_name="Terminal-Bench 2.0 Verified",
            url="https://huggingface.co/datasets/zai-org/terminal-bench-2-verified.git",
            revision="7bbd2fef45db2f9ee9d9e3aae8f7253f56bf4e2b", subpath=".",
            loader="harbor", expected_tasks=89, pod_prefix="t-bench-2",
            agent_network="public", verifier_network="public",
            # the Hugging Face git server cannot serve lazily fetched blobs
            git_filter=None, strip_canary=True, require_git_patch=False,
        ),
        BenchmarkSource(
            name="patch_eval_verified", display_name="PatchEval Verified",
            url="https://github.com/bytedance/PatchEval.git",
            revision="b43285cdde80cc04608d5f1178a330b740c91c2d", subpath="patcheval/datasets",
            loader="patcheval", expected_tasks=230, pod_prefix="patch-eval-verified",
            agent_network="no-network", verifier_network="no-network",
            file="patcheval_verified.json",
        ),
    )
}
# claims.yaml calls the Terminal-Bench claim terminal_bench_2; it was measured on the verified set
ALIASES = {"terminal_bench_2": "terminal_bench_2_verified", "tb2": "terminal_bench_2_verified",
           "patcheval_verified": "patch_eval_verified"}


def get_source(name: str) -> BenchmarkSource:
    key = ALIASES.get(name, name)
    if key not in SOURCES:
        raise ConfigError(f"benchmark: unknown value {name!r}; available: {sorted(SOURCES)}")
    return SOURCES[key]


def default_cache_dir() -> Path:
    env = os.environ.get("FARM_CACHE_DIR")
    return Path(env).expanduser() / "sources" if env else Path.home() / ".cache" / "farm" / "sources"


def checkout_root(src: BenchmarkSource, cache_dir: Path | None = None) -> Path:
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    return base / hashlib.sha256(src.url.encode()).hexdigest()[:16] / src.revision


def _subdir(root: Path, src: BenchmarkSource) -> Path:
    return root if src.subpath in ("", ".") else root / src.subpath


def is_cached(src: BenchmarkSource, cache_dir: Path | None = None) -> bool:
    root = checkout_root(src, cache_dir)
    marker = root / MARKER
    if not marker.is_file() or not _subdir(root, src).is_dir():
        return False
    try:
        return json.loads(marker.read_text()).get("revision") == src.revision
    except ValueError:
        return False


def _git(args: list[str], cwd: Path, timeout: float) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise ConfigError("fetching benchmark sources needs git on PATH") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"git {' '.join(args[:3])} timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def materialize(src: BenchmarkSource, cache_dir: Path | None = None, *, offline: bool = False,
                timeout_s: float = 1800.0) -> Path:
    """The source's subpath directory, fetched at its pinned revision if not cached yet."""
    root = checkout_root(src, cache_dir)
    if is_cached(src, cache_dir):
        return _subdir(root, src)
    if offline:
        raise ConfigError(
            f"benchmark {src.name}: not in the cache at {root} and offline mode is on; "
            f"fetch it once with network access (farm tasks fetch {src.name})"
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{src.revision}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits, then finds the checkout
        if is_cached(src, cache_dir):
            return _subdir(root, src)
        staging = root.parent / f".{src.revision}.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            _fetch(src, staging, timeout_s)
            (staging / MARKER).write_text(json.dumps(
                {"url": src.url, "revision": src.revision, "subpath": src.subpath, "fetched_at": time.time()}))
            shutil.rmtree(root, ignore_errors=True)
            staging.rename(root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _subdir(root, src)


def _fetch(src: BenchmarkSource, dest: Path, timeout_s: float) -> None:
    _git(["init", "-q"], dest, 60)
    _git(["remote", "add", "origin", src.url], dest, 60)
    fetch = ["-c", "protocol.version=2", "fetch", "-q", "--depth=1"]
    if src.git_filter:
        fetch.append(f"--filter={src.git_filter}")
    _git([*fetch, "origin", src.revision], dest, timeout_s)
    if src.subpath not in ("", "."):
        _git(["sparse-checkout", "set", "--cone", src.subpath], dest, 60)
    _git(["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", "FETCH_HEAD"], dest, timeout_s)
    head = _git(["rev-parse", "HEAD"], dest, 60).strip()
    if head != src.revision:
        raise ConfigError(f"benchmark {src.name}: fetched {head}, expected revision {src.revision}")
    if not _subdir(dest, src).is_dir():
        raise ConfigError(f"benchmark {src.name}: revision {src.revision} has no directory {src.subpath!r}")
    shutil.rmtree(dest / ".git")


def load_benchmark(
    name: str,
    *,
    cache_dir: Path | None = None,
    root: Path | None = None,
    offline: bool = False,
    image_registry: str | None = None,
    image_lock: str | None | bool = True,
    task_ids: Iterable[str] | None = None,
) -> list[Task]:
    """Every task of a benchmark (or the selected ``task_ids``), images resolved for pulling.

    ``root`` reads an already materialised subpath directory (tests, air-gapped mirrors).
    ``image_lock=True`` applies the source's own lock, a string names another, False/None none.
    A selected task id that the benchmark does not have is an error, as is a task missing
    from the lock; both happen here, before any sandbox exists.
    """
    src = get_source(name)
    directory = Path(root) if root is not None else materialize(src, cache_dir, offline=offline)
    if src.loader == "harbor":
        tasks = load_harbor_dir(directory, src.name, defaults=src.harbor_defaults(), source=src.source)
    else:
        path = directory / src.file if (directory / str(src.file)).is_file() else directory
        tasks = load_patcheval_file(path, src.name, source=src.source)
    if task_ids is not None:
        wanted = list(dict.fromkeys(task_ids))
        by_id = {t.task_id: t for t in tasks}
        missing = [t for t in wanted if t not in by_id]
        if missing:
            raise ConfigError(f"benchmark {src.name}: unknown task id(s) {missing[:10]}")
        tasks = [by_id[t] for t in wanted]
    lock_name = src.image_lock if image_lock is True else (image_lock or None)
    lock = load_image_lock(lock_name) if lock_name else None
    tasks = apply_image_policy(tasks, registry=image_registry, default_registry=src.default_image_registry,
                               lock=lock)
    if len(tasks) != src.expected_tasks and task_ids is None:
        log.warning("benchmark %s: %d tasks loaded, the published denominator is %d",
                    src.name, len(tasks), src.expected_tasks)
    return [replace(t, metadata={**t.metadata, "pod_prefix": src.pod_prefix}) for t in tasks]


def task_rows(tasks: Iterable[Task]) -> list[dict[str, object]]:
    """What `farm tasks list` prints: one row per task."""
    return [
        {"benchmark": t.benchmark, "task_id": t.task_id, "image": t.environment.image,
         "workdir": t.workdir, "agent_network": t.agent_network, "verifier_network": t.verifier_network,
         "agent_timeout_s": t.agent_timeout_s, "verifier_timeout_s": t.verifier_timeout_s,
         "revision": t.source.revision}
        for t in tasks
    ]
