"""The verifier cache: the tools graders fetch at verify time, built ahead of time.

Most Terminal-Bench 2.0 verifiers start with ``curl https://astral.sh/uv/0.9.5/install.sh |
sh`` and ``uvx -p 3.13 -w pytest==8.4.1 ...``. On a cluster without internet that download
fails and the trial would be scored as a wrong answer. The cache holds, from PyPI and
deb.debian.org only:

- ``bin/uv``, ``bin/uvx``: the binaries of the PyPI ``uv`` wheel (the same build the astral
  installer ships);
- ``wheels/``: the pinned pytest, plugins and their dependencies for CPython 3.11-3.13;
- ``python/``: Debian trixie's CPython 3.13 with every shared library it needs, its glibc
  included, so that it runs in any x86_64 image (bullseye's glibc 2.31 too). The binary's
  ELF interpreter is the bundled loader at ``STAGE_DIR``; every object's RUNPATH points into
  the bundle, so the image's own libraries are never mixed in. The cache therefore only runs
  when staged at ``STAGE_DIR`` (farm/grade/harbor.py does that);
- ``manifest.json``: tool, version and sha256 of everything, which rows and reports cite.

Nothing here runs at trial time. ``python -m farm.grade.verifier_cache OUT`` (``make
verifier-cache``) builds it; a second run with the same inputs does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from farm.grade.script_metadata import (
    JOINT,
    ScriptBlock,
    ScriptBlockError,
    requirement_names,
    script_blocks,
    script_notes,
    script_records,
)

STAGE_DIR = "/tmp/farm-verifier"  # where the sandbox gets the cache (the python's ELF interpreter lives here)
MANIFEST = "manifest.json"
# "closure" (pin -> wheel files) is optional: a cache without it is staged whole. Its keys are
# requirement strings (a PEP 723 block's `fastcore<1.11`, or its dependencies joined by JOINT as
# well as `name==version`): a farm that does not know a key sends nothing for it, so no bump
FORMAT = 1
UV_VERSION = "0.9.5"  # what the TB2 verifiers install
PYTHON_VERSIONS = ("3.11", "3.12", "3.13")
# the pins TB2's verifiers name for their test runner (uvx -w ..., pip install ...)
TOOL_REQUIREMENTS = (
    "pytest==8.4.1", "pytest==8.4.2", "pytest==8.3.4", "pytest-json-ctrf==0.3.5",
    "requests==2.32.4", "requests==2.32.5", "psutil==7.0.0",
)
# task-specific pins too large to pre-stage by default (several GB with their CUDA wheels)
DEFAULT_EXCLUDE = ("torch", "torchvision", "transformers", "timm", "mteb", "datasets")
DEBIAN_MIRROR = "https://deb.debian.org/debian"
DEBIAN_SUITE = "trixie"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# python3.13-minimal and libpython3.13-stdlib's Depends, closed over shared libraries (glibc too)
PYTHON_DEBS = (
    "python3.13-minimal", "libpython3.13-minimal", "libpython3.13-stdlib", "libc6", "libexpat1", "zlib1g",
    "libssl3t64", "libffi8", "libbz2-1.0", "liblzma5", "libsqlite3-0", "libuuid1", "libncursesw6",
    "libtinfo6", "libreadline8t64", "libdb5.3t64", "libzstd1", "libgcc-s1",
)
LOADER = "ld-linux-x86-64.so.2"
WHEEL_PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64",
                   "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux1_x86_64")


class CacheError(RuntimeError):
    """The cache could not be built or is not a cache."""


@dataclass(frozen=True)
class Manifest:
    """What a built cache holds (``manifest.json``)."""

    root: Path
    data: dict

    @property
    def uv_version(self) -> str:
        return self.data["uv"]["version"]

    @property
    def python_version(self) -> str:
        return self.data["python"]["version"]

    @property
    def offline_complete(self) -> bool:
        return not self.data.get("missing")

    def summary(self) -> str:
        """One line naming what the cache offers (the verifier output's header cites it)."""
        sha = hashlib.sha256((self.root / MANIFEST).read_bytes()).hexdigest()[:12]
        return (f"uv {self.uv_version}, python {self.python_version}, {len(self.data['wheels'])} wheels, "
                f"manifest sha256 {sha}")


def load_manifest(cache_dir: str | Path) -> Manifest:
    root = Path(cache_dir)
    path = root / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CacheError(f"grade.verifier_cache.dir={str(root)!r} holds no {MANIFEST}: "
                         "build it with `make verifier-cache`") from None
    except ValueError as exc:
        raise CacheError(f"{path}: not JSON ({exc})") from None
    if data.get("format") != FORMAT or data.get("stage_dir") != STAGE_DIR:
        raise CacheError(f"{path}: format {data.get('format')!r} / stage_dir {data.get('stage_dir')!r}; "
                         f"this farm needs format {FORMAT} staged at {STAGE_DIR}: rebuild it")
    return Manifest(root, data)


# -- pins named by a benchmark's verifiers -------------------------------------------------

_UVX_WITH = re.compile(r"(?:^|\s)(?:-w|--with)\s+([A-Za-z0-9_.\[\]-]+==[A-Za-z0-9_.+!-]+)")
_PIP_INSTALL = re.compile(r"\b(?:uv\s+)?pip3?\s+install\s+([^\n;&|]+)")
_PIN = re.compile(r"^[A-Za-z0-9_.\[\]-]+==[A-Za-z0-9_.+!-]+$")


def _sources(task_dirs: list[Path]) -> list[Path]:
    """Each task's ``tests/test.sh`` and ``tests/*.py`` (where PEP 723 scripts can be)."""
    found: list[Path] = []
    for root in task_dirs:
        for tests in sorted(Path(root).glob("*/tests")):
            found += [p for p in [tests / "test.sh", *sorted(tests.glob("*.py"))] if p.is_file()]
    return found


def scan_pins(task_dirs: list[Path], exclude: tuple[str, ...] = DEFAULT_EXCLUDE) -> list[str]:
    """Every ``name==version`` a ``tests/test.sh`` under ``task_dirs`` installs (uvx -w, pip
    install), and every requirement of a PEP 723 script block in test.sh or ``tests/*.py`` (see
    ``pins_in``). A requirement naming an excluded distribution is left out."""
    pins: set[str] = set()
    for path in _sources(task_dirs):
        pins.update(pins_in(path.read_text(errors="replace"), str(path)))
    skip = {name.lower() for name in exclude}
    return sorted(p for p in pins if not skip.intersection(requirement_names(p)))


def scan_scripts(task_dirs: list[Path]) -> list[ScriptBlock]:
    """Every PEP 723 ``script`` block in the tasks' test.sh and ``tests/*.py`` files."""
    blocks: list[ScriptBlock] = []
    for path in _sources(task_dirs):
        try:
            blocks += script_blocks(path.read_text(errors="replace"), str(path))
        except ScriptBlockError as exc:
            raise CacheError(str(exc)) from None
    return blocks


# -- building --------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _get(url: str, dest: Path) -> Path:
    with urllib.request.urlopen(url, timeout=120) as resp, dest.open("wb") as out:  # noqa: S310 - fixed https mirrors
        shutil.copyfileobj(resp, out)
    return dest


def _pip_download(pip: list[str], dest: Path, reqs: list[str], extra: list[str]) -> subprocess.CompletedProcess:
    cmd = [*pip, "download", "-q", "--disable-pip-version-check", "--only-binary=:all:", "-d", str(dest), *extra, *reqs]
    return subprocess.run(cmd, capture_output=True, text=True)


_NO_MATCH = re.compile(r"No matching distribution found for ([A-Za-z0-9_.\-]+(?:\[[^\]]*\])?(?:[=<>!~]=?[^\s;]+)?)")
PURE_TAGS = ("py3-none-any", "py2.py3-none-any")


def build_pure_wheel(pip: list[str], req: str, built: Path) -> Path | None:
    """Build ``req`` from its sdist into ``built`` when the result is a pure-Python wheel.

    Some pins have no wheel at all on PyPI (``chess==1.11.2`` is sdist-only), and pip's
    ``--python-version``/``--platform`` download only takes wheels. A pure-Python build made
    by the host's interpreter is the same file for every CPython, so it can stand in; a
    build with compiled parts is for the host only and is thrown away (None)."""
    built.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sdist-", dir=built.parent) as tmp:
        cmd = [*pip, "wheel", "-q", "--disable-pip-version-check", "--no-deps", "--no-binary=:all:",
               "-w", tmp, req]
        if subprocess.run(cmd, capture_output=True, text=True).returncode != 0:
            return None
        for whl in Path(tmp).glob("*.whl"):
            if whl.name.endswith(tuple(f"-{t}.whl" for t in PURE_TAGS)):
                dest = built / whl.name
                whl.rename(dest)
                return dest
    return None


def download_closure(pip: list[str], dest: Path, req: str, flags: list[str], built: Path,
                     rounds: int = 12) -> tuple[bool, list[str]]:
    """``pip download`` of ``req`` with its dependencies as wheels for the target interpreter;
    a distribution with no wheel (the pin or any dependency) is built from its sdist when it
    is pure Python, then the download is tried again. ``req`` may be several requirements
    joined by JOINT (a PEP 723 block's list), resolved together. Returns (ok, names built from sdist)."""
    made: list[str] = []
    for _ in range(rounds):
        res = _pip_download(pip, dest, req.split(JOINT), [*flags, "--find-links", str(built)])
        if res.returncode == 0:
            return True, made
        m = _NO_MATCH.search(res.stderr)
        wanted = m.group(1) if m else None
        if wanted is None or wanted in made:
            return False, made
        whl = build_pure_wheel(pip, wanted, built)
        if whl is None:
            return False, made
        made.append(wanted)
    return False, made


def fetch_uv(pip: list[str], work: Path, out: Path, version: str) -> dict:
    got = work / "uv-wheel"
    res = _pip_download(pip, got, [f"uv=={version}"],
                        ["--no-deps", "--platform", "manylinux_2_17_x86_64", "--python-version", "3.12"])
    wheels = list(got.glob("uv-*.whl"))
    if res.returncode != 0 or len(wheels) != 1:
        raise CacheError(f"pip download uv=={version} failed: {res.stderr.strip()[-500:]}")
    (out / "bin").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[0]) as zf:
        for tool in ("uv", "uvx"):
            target = out / "bin" / tool
            target.write_bytes(zf.read(f"uv-{version}.data/scripts/{tool}"))
            target.chmod(0o755)
    return {"version": version, "wheel": wheels[0].name, "sha256": _sha256(wheels[0])}


def fetch_wheels(pip: list[str], work: Path, out: Path, reqs: list[str],
                 pythons: tuple[str, ...]) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """Download each pin (with its dependencies) for each CPython, one at a time so that the
    files each pin needs are known (staging sends only those). Returns pin -> wheel files (over
    all versions), the pins some version has no wheel for, and the distributions built from
    their sdist (pure Python only, see ``build_pure_wheel``)."""
    dest = out / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    built = work / "built-from-sdist"
    built.mkdir(exist_ok=True)
    closure: dict[str, set[str]] = {req: set() for req in reqs}
    missing: list[str] = []
    from_sdist: set[str] = set()
    for py in pythons:
        abi = "cp" + py.replace(".", "")
        flags = ["--python-version", py, "--implementation", "cp", "--abi", abi]
        for plat in WHEEL_PLATFORMS:
            flags += ["--platform", plat]
        for req in reqs:  # pip's own HTTP cache makes a dependency shared by many pins cheap
            got = Path(tempfile.mkdtemp(prefix="pin-", dir=work))
            ok, made = download_closure(pip, got, req, flags, built)
            from_sdist.update(made)
            if not ok:
                missing.append(f"{req} (cp{py})")
            for f in got.iterdir():
                closure[req].add(f.name)
                if not (dest / f.name).exists():
                    f.rename(dest / f.name)
            shutil.rmtree(got)
    return {req: sorted(files) for req, files in closure.items()}, missing, sorted(from_sdist)


def pins_in(text: str, source: str = "test.sh") -> set[str]:
    """What one test.sh installs: its ``name==version`` pins (uvx -w / --with, pip / uv pip
    install) and the requirements of the PEP 723 script blocks it writes (heredocs), each one and
    each block's whole list joined by JOINT. A ``.py`` source gives only its block's. A block
    that is not valid PEP 723 is a CacheError naming ``source``."""
    try:
        reqs = {r for block in script_blocks(text, source) for r in block.requirements()}
    except ScriptBlockError as exc:
        raise CacheError(str(exc)) from None
    if source.endswith(".py"):
        return reqs
    text = text.replace("\\\n", " ")
    reqs.update(_UVX_WITH.findall(text))
    for args in _PIP_INSTALL.findall(text):
        reqs.update(tok for tok in args.split() if _PIN.match(tok))
    return reqs


def wheels_for(man: Manifest, test_sh: str, tests_dir: Path | None = None) -> list[str] | None:
    """The wheel files a verifier needs: those of the default tool pins, of every pin its
    test.sh names and of the PEP 723 blocks in test.sh and ``tests_dir/*.py``; None (send them
    all) for a cache without per-pin records or a test.sh that installs from a requirements file."""
    closure = man.data.get("closure")
    if not closure or re.search(r"(?:^|\s)(?:-r|--requirement)\s", test_sh):
        return None
    wanted = set(TOOL_REQUIREMENTS) | pins_in(test_sh)
    for script in sorted(tests_dir.glob("*.py")) if tests_dir is not None else ():
        wanted |= pins_in(script.read_text(errors="replace"), str(script))
    return sorted({f for req in wanted for f in closure.get(req, ())})


def _debian_index(work: Path, mirror: str, suite: str) -> tuple[dict[str, dict[str, str]], str]:
    """The trixie main/amd64 Packages index, checked against the signed InRelease when gpgv can."""
    inrel = _get(f"{mirror}/dists/{suite}/InRelease", work / "InRelease")
    signature = "unverified (no gpgv or keyring)"
    if shutil.which("gpgv") and Path(DEBIAN_KEYRING).is_file():
        res = subprocess.run(["gpgv", "--keyring", DEBIAN_KEYRING, str(inrel)], capture_output=True, text=True)
        if res.returncode != 0:
            raise CacheError(f"{mirror}/dists/{suite}/InRelease: bad signature: {res.stderr.strip()[-300:]}")
        signature = "gpgv " + DEBIAN_KEYRING
    pkgs = _get(f"{mirror}/dists/{suite}/main/binary-amd64/Packages.xz", work / "Packages.xz")
    want = re.search(r"^ ([0-9a-f]{64})\s+\d+\s+main/binary-amd64/Packages\.xz$", inrel.read_text(), re.M)
    if want is None or want.group(1) != _sha256(pkgs):
        raise CacheError(f"{pkgs.name}: sha256 does not match {suite}'s InRelease")
    index: dict[str, dict[str, str]] = {}
    for stanza in lzma.decompress(pkgs.read_bytes()).decode("utf-8", errors="replace").split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z0-9-]+): ?(.*)$", stanza, re.M))
        if "Package" in fields:
            index[fields["Package"]] = fields
    return index, signature


def _link_or_copy(src: Path, dst: Path) -> None:
    if src.is_symlink():
        if not dst.exists() and not dst.is_symlink():
            dst.symlink_to(os.readlink(src))
    elif src.is_file():
        shutil.copy2(src, dst)


def _patchelf(*args: str) -> None:
    res = subprocess.run(["patchelf", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise CacheError(f"patchelf {' '.join(args)}: {res.stderr.strip()}")


def _is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def fetch_python(work: Path, out: Path, mirror: str, suite: str) -> dict:
    if shutil.which("patchelf") is None or shutil.which("dpkg-deb") is None:
        raise CacheError("the python bundle needs patchelf and dpkg-deb (apt-get install patchelf dpkg)")
    index, signature = _debian_index(work, mirror, suite)
    root = work / "debroot"
    debs = []
    for name in PYTHON_DEBS:
        meta = index.get(name)
        if meta is None:
            raise CacheError(f"{suite} has no package {name!r}")
        deb = _get(f"{mirror}/{meta['Filename']}", work / Path(meta["Filename"]).name)
        if _sha256(deb) != meta["SHA256"]:
            raise CacheError(f"{deb.name}: sha256 differs from the {suite} index")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        debs.append({"package": name, "version": meta["Version"], "sha256": meta["SHA256"]})
    py = out / "python"
    (py / "bin").mkdir(parents=True)
    (py / "lib").mkdir()
    shutil.copy2(root / "usr/bin/python3.13", py / "bin/python3.13")
    shutil.copytree(root / "usr/lib/python3.13", py / "lib/python3.13", symlinks=True)
    for link in [p for p in py.rglob("*") if p.is_symlink() and os.readlink(p).startswith("/")]:
        # an absolute link (sitecustomize.py -> /etc/python3.13/...) would point into the image
        target = root / os.readlink(link).lstrip("/")
        link.unlink()
        if target.is_file():
            shutil.copy2(target, link)
    for libdir in (root / "usr/lib/x86_64-linux-gnu", root / "lib/x86_64-linux-gnu"):
        if libdir.is_dir():
            for f in sorted(libdir.iterdir()):
                if ".so" in f.name:
                    _link_or_copy(f, py / "lib" / f.name)
    # the binary loads the bundled glibc through the bundled loader; every object finds its
    # libraries next to itself (RUNPATH is not inherited by dependencies, so each gets one)
    _patchelf("--set-interpreter", f"{STAGE_DIR}/python/lib/{LOADER}", "--set-rpath", "$ORIGIN/../lib",
              str(py / "bin/python3.13"))
    have = {f.name for f in (py / "lib").iterdir()}
    objects = [py / "bin/python3.13"]
    for f in sorted((py / "lib").iterdir()):
        if f.is_file() and not f.is_symlink() and _is_elf(f):
            objects.append(f)
            if not f.name.startswith(("ld-linux", "libc.so")):
                _patchelf("--set-rpath", "$ORIGIN", str(f))
    for f in sorted((py / "lib/python3.13/lib-dynload").glob("*.so")):
        objects.append(f)
        _patchelf("--set-rpath", "$ORIGIN/../..", str(f))
    for obj in objects:  # every library any object needs must be in the bundle
        needed = subprocess.run(["patchelf", "--print-needed", str(obj)], capture_output=True, text=True).stdout.split()
        absent = [n for n in needed if n not in have]
        if absent and obj.parent.name != "lib-dynload":
            raise CacheError(f"{obj.name} needs {absent}, which no package in PYTHON_DEBS ships")
        if absent:  # an optional extension module (_tkinter, _gdbm ...): drop it, python runs without
            obj.unlink()
    meta = index["python3.13-minimal"]
    return {"version": meta["Version"], "path": "python/bin/python3.13", "suite": suite, "mirror": mirror,
            "index_signature": signature, "debs": debs}


def spec_of(reqs: list[str], pythons: tuple[str, ...], uv_version: str, suite: str,
            scripts: list[dict] | None = None) -> str:
    # layout 2: the manifest records each pin's files (closure); 3: pure sdist-only pins built
    spec = {"format": FORMAT, "layout": 3, "stage": STAGE_DIR, "uv": uv_version, "reqs": sorted(reqs),
            "pythons": list(pythons),
            "suite": suite, "debs": list(PYTHON_DEBS)}
    if scripts:  # only then: a cache built without PEP 723 scripts keeps its spec (no rebuild)
        spec["scripts"] = sorted([r["requires_python"] or "", r["dependencies"]] for r in scripts)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def build(out: Path, reqs: list[str], *, pythons: tuple[str, ...] = PYTHON_VERSIONS, uv_version: str = UV_VERSION,
          mirror: str = DEBIAN_MIRROR, suite: str = DEBIAN_SUITE, pip: list[str] | None = None,
          force: bool = False, scripts: list[dict] | None = None) -> Manifest:
    """Build the cache into ``out`` (replaced atomically); a no-op when it holds the same spec.
    ``scripts`` (``script_records``) is recorded in the manifest as ``scripts``."""
    pip = pip or [sys.executable, "-m", "pip"]
    spec = spec_of(reqs, pythons, uv_version, suite, scripts)
    if not force and (out / MANIFEST).is_file():
        try:
            current = load_manifest(out)
        except CacheError:
            current = None
        if current is not None and current.data.get("spec_sha256") == spec:
            return current
    t0 = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="verifier-cache-", dir=out.parent) as tmp:
        work, stage = Path(tmp) / "work", Path(tmp) / "cache"
        work.mkdir()
        stage.mkdir()
        uv = fetch_uv(pip, work, stage, uv_version)
        closure, missing, from_sdist = fetch_wheels(pip, work, stage, reqs, pythons)
        python = fetch_python(work, stage, mirror, suite)
        wheels = [{"file": w.name, "sha256": _sha256(w)} for w in sorted((stage / "wheels").glob("*.whl"))]
        tools = [{"tool": "uv", "version": uv_version, "sha256": uv["sha256"]},
                 {"tool": "python3.13", "version": python["version"],
                  "sha256": _sha256(stage / "python/bin/python3.13")}]
        tools += [{"tool": w["file"].split("-")[0], "version": w["file"].split("-")[1], "sha256": w["sha256"]}
                  for w in wheels]
        data = {"format": FORMAT, "stage_dir": STAGE_DIR, "spec_sha256": spec, "built_at": time.time(),
                "build_s": round(time.monotonic() - t0, 1), "requirements": sorted(reqs), "pythons": list(pythons),
                "uv": uv, "python": python, "wheels": wheels, "closure": closure, "missing": missing,
                "built_from_sdist": from_sdist, "tools": tools, "scripts": scripts or [],
                "bytes": sum(f.stat().st_size for f in stage.rglob("*") if f.is_file() and not f.is_symlink())}
        (stage / MANIFEST).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        old = Path(tmp) / "old"
        if out.exists():
            out.rename(old)
        stage.rename(out)
    return load_manifest(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m farm.grade.verifier_cache", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the cache directory (grade.verifier_cache.dir)")
    ap.add_argument("--tasks", type=Path, action="append", default=[],
                    help="also pre-stage every pin the test.sh files of this benchmark directory install, "
                         "and the dependencies of its PEP 723 scripts (test.sh heredocs, tests/*.py)")
    ap.add_argument("--exclude", default=",".join(DEFAULT_EXCLUDE), help="package names never pre-staged")
    ap.add_argument("--pythons", default=",".join(PYTHON_VERSIONS), help="CPython versions to fetch wheels for")
    ap.add_argument("--force", action="store_true", help="rebuild even when the spec is unchanged")
    args = ap.parse_args(argv)
    exclude = tuple(x for x in args.exclude.split(",") if x)
    pythons = tuple(x for x in args.pythons.split(",") if x)
    bad = [p for p in pythons if not re.fullmatch(r"3\.\d+", p)]
    if bad:
        ap.error(f"--pythons: invalid version(s) {bad}; expected e.g. 3.12,3.13")
    try:
        reqs = sorted(set(TOOL_REQUIREMENTS) | set(scan_pins(args.tasks, exclude)))
        scripts = script_records(scan_scripts(args.tasks), pythons, exclude)
        man = build(args.out, reqs, pythons=pythons, force=args.force, scripts=scripts)
    except (CacheError, OSError, subprocess.CalledProcessError) as exc:
        print(f"verifier-cache: {exc}", file=sys.stderr)
        return 1
    print(f"verifier-cache: {args.out}: {man.summary()}, {man.data['bytes'] / 1e6:.0f} MB"
          + (f"; not available: {', '.join(man.data['missing'])}" if man.data["missing"] else ""))
    for note in script_notes(scripts, pythons):
        print(f"verifier-cache: PEP 723 script {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
