"""Fetching a pinned source with git, and the checks that a checkout is the pinned one.

A checkout is fetched once with git (shallow, sparse, blob-filtered where the server allows
it) into a content-addressed cache: ``<cache>/<sha256(url)[:16]>/<revision>``; the commit SHA
names the content, so a complete checkout is never fetched again and works offline. A checkout
counts only if git itself says it is at the pinned revision and clean. ``benchmark.mirror``
replaces the upstream URL (a bare repository, a checkout used in place, an internal git
server). A file lock makes concurrent fetches of one revision safe (docs/benchmarks.md,
"Offline sources").
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from farm.errors import ConfigError
from farm.tasks.catalog import BenchmarkSource

log = logging.getLogger(__name__)

MARKER = ".farm-source.json"


def default_cache_dir() -> Path:
    """``$FARM_CACHE_DIR/sources``, else ``~/.cache/farm/sources``."""
    env = os.environ.get("FARM_CACHE_DIR")
    return Path(env).expanduser() / "sources" if env else Path.home() / ".cache" / "farm" / "sources"


def checkout_root(src: BenchmarkSource, cache_dir: Path | None = None) -> Path:
    # keyed by the upstream URL, not the mirror's: the revision names the content wherever it came from
    base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return base / hashlib.sha256(src.url.encode()).hexdigest()[:16] / src.revision


def _subdir(root: Path, src: BenchmarkSource) -> Path:
    return root if src.subpath in ("", ".") else root / src.subpath


def checkout_problem(root: Path, src: BenchmarkSource) -> str | None:
    """Why ``root`` is not a clean git checkout of the pinned revision (None: it is).

    The evidence is git's own: ``rev-parse HEAD`` and ``status --porcelain``, never a marker file.
    """
    if not (root / ".git").exists():
        return f"{root} is not a git checkout"
    try:
        head = _git(["rev-parse", "HEAD"], root, 60).strip()
    except ConfigError as exc:
        return f"{root}: cannot read its revision ({exc})"
    if head != src.revision:
        return (f"{root} is checked out at revision {head}, but benchmark {src.name} is pinned to "
                f"revision {src.revision}")
    dirty = _git(["status", "--porcelain", "--untracked-files=normal"], root, 300).splitlines()
    if dirty:
        return (f"{root} is at the pinned revision {src.revision} but has {len(dirty)} local change(s) "
                f"(first: {dirty[0].strip()}): refusing a modified copy")
    if not _subdir(root, src).is_dir():
        return f"{root}: revision {src.revision} has no directory {src.subpath!r}"
    return None


def is_cached(src: BenchmarkSource, cache_dir: Path | None = None) -> bool:
    root = checkout_root(src, cache_dir)
    return root.is_dir() and checkout_problem(root, src) is None


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


def _mirror_kind(mirror: str) -> tuple[str, str]:
    """("checkout", dir) for a git work tree used in place, else ("remote", url) to fetch from."""
    if "://" in mirror or re.match(r"^[\w.-]+@[\w.-]+:", mirror):
        return "remote", mirror
    path = Path(mirror).expanduser().resolve()
    if not path.is_dir():
        raise ConfigError(f"invalid value {mirror!r} for 'benchmark.mirror': no such directory (nor a URL)")
    if (path / ".git").exists():
        return "checkout", str(path)
    try:
        bare = _git(["rev-parse", "--is-bare-repository"], path, 60).strip() == "true"
    except ConfigError:
        bare = False
    if not bare:
        raise ConfigError(
            f"invalid value {mirror!r} for 'benchmark.mirror': not a git repository, so its revision cannot be "
            "verified; give a bare repository, a git checkout or a git URL (or run an unverified copy with "
            "benchmark.path=DIR and benchmark.name=<source>)")
    return "remote", path.as_uri()


def fetch_hint(src: BenchmarkSource) -> str:
    return (f"run `farm tasks fetch benchmark={src.name}` where {src.url} is reachable (with the same "
            f"FARM_CACHE_DIR or benchmark.cache_dir), or point benchmark.mirror at a bare repository, "
            f"checkout or git server that has revision {src.revision}")


def materialize(src: BenchmarkSource, cache_dir: Path | None = None, *, offline: bool = False,
                mirror: str | None = None, timeout_s: float = 1800.0) -> Path:
    """The source's subpath directory at its pinned revision, fetched into the cache if needed.

    ``mirror`` replaces the upstream URL: a git checkout is used in place (if it is at the
    pinned revision and clean), a bare repository or URL is fetched from.
    Raises:
        ConfigError: offline and not cached, the fetch failed, or a checkout is at another
            revision or modified (the message names both revisions).
    """
    if mirror:
        kind, where = _mirror_kind(mirror)
        if kind == "checkout":
            problem = checkout_problem(Path(where), src)
            if problem:
                raise ConfigError(f"benchmark {src.name}: benchmark.mirror {problem}")
            return _subdir(Path(where), src)
    url = where if mirror else src.url
    root = checkout_root(src, cache_dir)
    if root.is_dir():
        problem = checkout_problem(root, src)
        if problem is None:
            return _subdir(root, src)
        log.warning("benchmark %s: the cached copy is not usable (%s); fetching again", src.name, problem)
    if offline:
        why = checkout_problem(root, src) if root.is_dir() else f"{root} does not exist"
        raise ConfigError(f"benchmark {src.name}: no usable checkout in the cache ({why}) and offline mode is on; "
                          + fetch_hint(src))
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{src.revision}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits, then finds the checkout
        if root.is_dir() and checkout_problem(root, src) is None:
            return _subdir(root, src)
        staging = root.parent / f".{src.revision}.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            try:
                _fetch(src, url, staging, timeout_s)
            except ConfigError as exc:
                raise ConfigError(f"benchmark {src.name}: could not fetch revision {src.revision} from {url}: "
                                  f"{exc}; {fetch_hint(src)}") from None
            # informational only: the checkout's own git metadata is what is trusted
            (staging / ".git" / MARKER).write_text(json.dumps(
                {"url": url, "upstream": src.url, "revision": src.revision, "subpath": src.subpath,
                 "fetched_at": time.time()}))
            shutil.rmtree(root, ignore_errors=True)
            staging.rename(root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _subdir(root, src)


def _fetch(src: BenchmarkSource, url: str, dest: Path, timeout_s: float) -> None:
    _git(["init", "-q"], dest, 60)
    _git(["remote", "add", "origin", url], dest, 60)
    fetch = ["-c", "protocol.version=2", "fetch", "-q", "--depth=1"]
    if src.git_filter:
        fetch.append(f"--filter={src.git_filter}")
    _git([*fetch, "origin", src.revision], dest, timeout_s)
    if src.subpath not in ("", "."):
        _git(["sparse-checkout", "set", "--cone", src.subpath], dest, 60)
    _git(["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", "FETCH_HEAD"], dest, timeout_s)
    head = _git(["rev-parse", "HEAD"], dest, 60).strip()
    if head != src.revision:
        raise ConfigError(f"fetched {head}, expected revision {src.revision}")
    if not _subdir(dest, src).is_dir():
        raise ConfigError(f"revision {src.revision} has no directory {src.subpath!r}")


def verified_revision(path: Path, src: BenchmarkSource) -> str:
    """The pinned revision if ``path`` lies in a clean checkout of it, else "" (an unverified copy)."""
    try:
        top = Path(_git(["rev-parse", "--show-toplevel"], path, 60).strip())
    except ConfigError:
        return ""
    return src.revision if checkout_problem(top, src) is None else ""
