"""A CPython 3.13 with Harbor installed, for reading farm's ATIF export with Harbor's own models.

Harbor (PyPI ``harbor``) needs Python >= 3.12 and farm's venv is 3.11, so the ATIF round-trip
test (tests/report/test_atif.py) runs Harbor's reader under another interpreter. This script
makes one from the same parts as the verifier cache (farm/grade/verifier_cache.py), nothing
from a third place:

1. ``fetch_python``: Debian trixie's CPython 3.13 with every shared library it needs, the
   packages checked against the gpgv-verified index by sha256. The cache's copy only runs at
   the verifier's stage directory (its ELF interpreter is an absolute path there), so the
   binary is pointed at the bundled loader where this copy lives; everything else already
   finds its libraries relative to itself;
2. ``download_closure``: ``harbor==0.26.0`` and its dependencies as wheels for cp313
   (``--only-binary=:all:``: a dependency with no cp313 wheel fails here, by name);
3. a venv of that interpreter (no pip in it), into which the host's pip installs the downloaded
   wheels offline (``pip --python VENV install --no-index --find-links``).

The result lives under ``~/.cache/farm/harbor-python`` (``--cache`` or ``FARM_HARBOR_CACHE``
elsewhere): ``python/``, ``venv/`` and ``harbor-python.json`` (versions, sha256 of every
package and wheel, build seconds), written last, so a cache without it is rebuilt. A second run
checks the venv imports Harbor and does nothing else. The last line printed is the venv's
python; ``--check`` only checks (exit 1 with the reason when there is none to use).

    python scripts/harbor_python.py            # build when missing, print the interpreter
    FARM_HARBOR_PYTHON=$(python scripts/harbor_python.py) pytest tests/report/test_atif.py
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from farm.grade import verifier_cache as vc

HARBOR = "harbor==0.26.0"
PYTHON = "3.13"
MARKER = "harbor-python.json"
CACHE_ENV = "FARM_HARBOR_CACHE"
# what the round-trip reads: a venv that imports these is one the test can use
PROBE = ("import importlib.metadata, harbor.models.trajectories, harbor.utils.trajectory_validator; "
         "print(importlib.metadata.version('harbor'))")


def default_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "farm" / "harbor-python").expanduser()


def spec_sha256() -> str:
    """What the cache is built from; a different spec (a new pin, suite or package list) rebuilds it."""
    spec = {"harbor": HARBOR, "python": PYTHON, "suite": vc.DEBIAN_SUITE, "debs": list(vc.PYTHON_DEBS), "layout": 1}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def venv_python(cache: Path) -> Path:
    return cache / "venv" / "bin" / "python"


def check(cache: Path) -> str | None:
    """None when ``cache`` holds a complete build of this spec whose venv imports Harbor, else why not."""
    try:
        marker = json.loads((cache / MARKER).read_text())
    except FileNotFoundError:
        return f"{cache} holds no {MARKER} (not built, or a build was interrupted)"
    except ValueError as exc:
        return f"{cache / MARKER}: not JSON ({exc})"
    if marker.get("spec_sha256") != spec_sha256():
        return f"{cache} was built for another spec ({marker.get('harbor')}, python {marker.get('python_version')})"
    python = venv_python(cache)
    try:
        res = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        return f"{python} does not run: {exc}"
    if res.returncode != 0:
        return f"{python} does not import Harbor: {(res.stderr.strip().splitlines() or ['?'])[-1]}"
    if res.stdout.strip() != HARBOR.split("==")[1]:
        return f"{python} has harbor {res.stdout.strip()}, not {HARBOR}"
    return None


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise vc.CacheError(f"{what} failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-800:]}")
    return res


def build(cache: Path, pip: list[str] | None = None) -> dict:
    """Build into ``cache`` (whatever is there is replaced); returns what ``harbor-python.json`` records.

    Raises:
        vc.CacheError: a download, a check or an install step failed (the message names it).
    """
    pip = pip or [sys.executable, "-m", "pip"]
    t0 = time.monotonic()
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{cache.name}-build-", dir=cache.parent) as tmp:
        work, stage = Path(tmp) / "work", Path(tmp) / "stage"
        work.mkdir()
        stage.mkdir()
        python = vc.fetch_python(work, stage, vc.DEBIAN_MIRROR, vc.DEBIAN_SUITE)
        t_python = time.monotonic() - t0
        abi = "cp" + PYTHON.replace(".", "")
        flags = ["--python-version", PYTHON, "--implementation", "cp", "--abi", abi]
        for plat in vc.WHEEL_PLATFORMS:
            flags += ["--platform", plat]
        wheels = stage / "wheels"
        ok, from_sdist = vc.download_closure(pip, wheels, HARBOR, flags, work / "built-from-sdist")
        if not ok:
            raise vc.CacheError(f"pip download {HARBOR} for {abi} with wheels only failed; run pip download "
                             f"--only-binary=:all: --python-version {PYTHON} {HARBOR} to see which dependency")
        t_wheels = time.monotonic() - t0 - t_python
        if cache.exists():
            shutil.rmtree(cache)
        stage.rename(cache)
    binary = cache / "python" / "bin" / f"python{PYTHON}"
    # the only absolute path in the bundle: the ELF interpreter, now this copy's own loader
    _run(["patchelf", "--set-interpreter", str(cache / "python" / "lib" / vc.LOADER), str(binary)], "patchelf")
    _run([str(binary), "-c", "import ssl, sqlite3, ctypes, venv"], f"{binary} (relocated)")
    _run([str(binary), "-m", "venv", "--without-pip", str(cache / "venv")], "python -m venv")
    files = sorted((cache / "wheels").glob("*.whl"))
    _run([*pip, "--python", str(venv_python(cache)), "install", "-q", "--disable-pip-version-check", "--no-index",
          "--only-binary=:all:", "--find-links", str(cache / "wheels"), HARBOR], "pip install (offline)")
    record = {
        "spec_sha256": spec_sha256(), "harbor": HARBOR, "python_version": python["version"],
        "python": {k: python[k] for k in ("suite", "mirror", "index_signature", "debs")},
        "wheels": [{"file": f.name, "sha256": _sha256(f)} for f in files], "built_from_sdist": from_sdist,
        "built_at": time.time(), "build_s": round(time.monotonic() - t0, 1), "python_s": round(t_python, 1),
        "wheels_s": round(t_wheels, 1),
    }
    shutil.rmtree(cache / "wheels")  # installed; a rebuild downloads them again (pip's cache makes that cheap)
    record["bytes"] = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file() and not f.is_symlink())
    (cache / MARKER).write_text(json.dumps(record, indent=1) + "\n")
    why = check(cache)  # the same check a later run makes: the marker only stays beside a venv that works
    if why:
        (cache / MARKER).unlink()
        raise vc.CacheError(why)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/harbor_python.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=None, help=f"where to keep it (default ${CACHE_ENV} or "
                    "~/.cache/farm/harbor-python)")
    ap.add_argument("--check", action="store_true", help="only check: exit 1, with the reason, when none is usable")
    ap.add_argument("--force", action="store_true", help="rebuild even when the cache is complete")
    args = ap.parse_args(argv)
    cache = (args.cache or default_cache()).expanduser().absolute()
    why = None if args.force else check(cache)
    if args.check or (why is None and not args.force):
        if why:
            print(f"harbor-python: {why}; build it with: python scripts/harbor_python.py", file=sys.stderr)
            return 1
        print(venv_python(cache))
        return 0
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{cache.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder waits, then finds the first one's result
        if args.force or check(cache) is not None:
            print(f"harbor-python: building {HARBOR} on CPython {PYTHON} in {cache} ({why})", file=sys.stderr)
            try:
                record = build(cache)
            except (vc.CacheError, OSError, subprocess.CalledProcessError) as exc:
                print(f"harbor-python: {exc}", file=sys.stderr)
                return 1
            print(f"harbor-python: built in {record['build_s']} s (python {record['python_s']} s, wheels "
                  f"{record['wheels_s']} s), {len(record['wheels'])} wheels, {record['bytes'] / 1e6:.0f} MB",
                  file=sys.stderr)
    print(venv_python(cache))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
