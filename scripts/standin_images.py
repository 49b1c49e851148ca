#!/usr/bin/env python3
"""Build stand-in base images for the Terminal-Bench 2.0 Dockerfiles from Debian packages.

This machine reaches deb.debian.org and PyPI but no image registry, so ``FROM python:3.13-slim-bookworm``
cannot be pulled. Each stand-in is a ``debootstrap --variant=minbase`` root imported into the
engine plus a small build that installs what the real image has, tagged under the exact
name the Dockerfiles use (``docker.io/library/<name>``: podman's short-name aliases map
``python``, ``ubuntu`` and ``debian`` there, so ``podman build --pull=never`` finds it locally).

Every stand-in carries the label ``io.farm.standin=true`` (inherited by every image built on
it; the container backend reads it into ``base_image_standin`` of each row) and
``io.farm.standin.differences`` saying what differs from the real image. Scores on stand-ins
test the harness; they are not comparable with published numbers.

Idempotent: a root is debootstrapped once into the cache (``$FARM_IMAGES_CACHE``, default
``/var/tmp/farm-images``), and an image is rebuilt only when its recipe changed (the recipe's
hash is a label). Nothing needs the cache: with an empty one everything is built again.

Usage: ``python scripts/standin_images.py [--only NAME ...] [--list] [--force] [--engine podman]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

MIRROR = "http://deb.debian.org/debian"
ROOT_TAG = "localhost/farm-standin-root:{suite}"
LABEL = "io.farm.standin"
PIP_VERSION = "25.1.1"  # what python:3.13-slim shipped in mid-2025
LEGACY_PIP_EXTRAS = ("setuptools==65.5.1", "wheel==0.45.1")  # what python:<3.12 images add to pip
OFFICIAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# what the official python images ship beyond the interpreter (headers for C extensions,
# venv/ensurepip, certificates, tzdata, netbase)
PYTHON_SLIM = ["ca-certificates", "netbase", "tzdata"]
# a subset of buildpack-deps (what the non-slim python image is built on)
BUILDPACK = ["build-essential", "git", "curl", "wget", "procps", "openssh-client", "gnupg", "dirmngr",
             "xz-utils", "bzip2", "unzip", "libssl-dev", "zlib1g-dev", "libffi-dev", "libbz2-dev",
             "libreadline-dev", "libsqlite3-dev", "liblzma-dev", "pkg-config"]


@dataclass(frozen=True)
class StandIn:
    name: str  # the reference the Dockerfiles use, e.g. python:3.13-slim-bookworm
    suite: str  # the Debian release the root is made from
    packages: list[str] = field(default_factory=list)
    python: str | None = None  # Debian's python3.x version offered as python/python3/pip
    stands_for: str = ""  # the real image's version, to record the gap
    differences: str = ""
    extra_run: str = ""
    # bookworm package names the root's release dropped -> what replaced them: offered as empty
    # transitional packages from a local apt repository so `apt-get install OLD` still works
    shims: tuple[tuple[str, str], ...] = ()

    @property
    def tag(self) -> str:
        return f"docker.io/library/{self.name}"


def _python_diff(want: str, have: str, suite: str) -> str:
    same = want == have
    ver = f"Python {have} (Debian's python3 package)" + ("" if same else f", not {want}: Debian has no {want}")
    extras = "" if tuple(int(x) for x in have.split(".")) >= (3, 12) else " with " + ", ".join(LEGACY_PIP_EXTRAS)
    return (f"Debian {suite} root (debootstrap minbase), {ver}; pip {PIP_VERSION}{extras} from PyPI in "
            "/usr/local/lib (Debian's python3-pip removed), the EXTERNALLY-MANAGED marker removed; "
            "interpreter in /usr/bin, linked from /usr/local/bin")


STANDINS: list[StandIn] = [
    StandIn("python:3.13-slim-bookworm", "trixie", PYTHON_SLIM, "3.13", "Python 3.13 on Debian 12 bookworm",
            _python_diff("3.13", "3.13", "trixie") + "; the OS is Debian 13 trixie, not 12 bookworm "
            "(bookworm has no Python 3.13), so apt-get installs trixie package versions; libgl1-mesa-glx "
            "(gone in trixie) is an empty package depending on libgl1 and libglx-mesa0",
            shims=(("libgl1-mesa-glx", "libgl1, libglx-mesa0"),)),
    StandIn("python:3.11-slim", "bookworm", PYTHON_SLIM, "3.11", "Python 3.11 on Debian slim",
            _python_diff("3.11", "3.11", "bookworm")),
    StandIn("python:3.10-slim-bookworm", "bookworm", PYTHON_SLIM, "3.11", "Python 3.10 on Debian 12 bookworm",
            _python_diff("3.10", "3.11", "bookworm")),
    StandIn("python:3.11", "bookworm", PYTHON_SLIM + BUILDPACK, "3.11", "Python 3.11 on buildpack-deps:bookworm",
            _python_diff("3.11", "3.11", "bookworm") + "; a subset of buildpack-deps (compilers, git, curl, "
            "common -dev libraries), not all of it"),
    StandIn("ubuntu:24.04", "trixie", [], None, "Ubuntu 24.04 noble",
            "Debian 13 trixie root (debootstrap minbase), not Ubuntu: the Ubuntu archive is not reachable "
            "from this machine. apt-get installs Debian trixie packages (newer glibc/gcc, no python3.12); "
            "packages or versions that exist only on Ubuntu fail to install; user ubuntu (uid 1000) "
            "is created as in the real image",
            extra_run="useradd --uid 1000 --create-home --shell /bin/bash ubuntu"),
    StandIn("debian:13.0-slim", "trixie", [], None, "Debian 13.0 slim",
            "debootstrap minbase of trixie from deb.debian.org (current point release, docs not "
            "stripped, no trixie-security source)"),
    StandIn("debian:bullseye-slim", "bullseye", [], None, "Debian 11 bullseye slim",
            "debootstrap minbase of bullseye from deb.debian.org (docs not stripped, no "
            "bullseye-security source)"),
]


HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


def host_cas(src: Path = HOST_CA_DIR) -> dict[str, bytes]:
    """The host's locally added CA certificates (a site TLS proxy's, say): without them no
    build step could reach PyPI over HTTPS from behind such a proxy. Public certificates only."""
    return {p.name: p.read_bytes() for p in sorted(src.glob("*.crt"))} if src.is_dir() else {}


def containerfile(s: StandIn, cas: dict[str, bytes] | None = None) -> str:
    """The build on top of the imported root: what the real image has, and the labels."""
    lines = [f"FROM {ROOT_TAG.format(suite=s.suite)}"]
    if cas:
        # picked up by update-ca-certificates now (python images) or when a task installs
        # ca-certificates (its postinst runs it)
        lines.append("COPY host-ca/ /usr/local/share/ca-certificates/")
    env = {"LANG": "C.UTF-8", "PATH": OFFICIAL_PATH} if s.python else {}
    pkgs = list(s.packages)
    if s.python:
        pkgs += [f"python{s.python}", "python3-pip", "python3-venv", "python3-dev"]
    run = ["set -eux", "export DEBIAN_FRONTEND=noninteractive"]
    if pkgs:
        run += ["apt-get update", f"apt-get install -y --no-install-recommends {' '.join(sorted(set(pkgs)))}"]
    if s.python:
        run += [
            f"ln -sf /usr/bin/python{s.python} /usr/local/bin/python3",
            f"ln -sf /usr/bin/python{s.python} /usr/local/bin/python",
            "rm -f /usr/lib/python3*/EXTERNALLY-MANAGED",
            # pip from its PyPI wheel over Debian's, as ensurepip gives the official image: Debian's
            # python3-pip has no RECORD, so a task's `pip install --upgrade pip==X` could not
            # uninstall it (TB2 pypi-server's build failed exactly so)
            f"python3 -m pip install --no-cache-dir --ignore-installed pip=={PIP_VERSION}",
            # ... and nothing of Debian's pip stack left (its wheel has no RECORD either: TB2
            # pypi-server upgrades wheel next); the official images below 3.12 ship setuptools
            # and wheel, 3.12 and later pip alone
            "apt-get purge -y --auto-remove python3-pip python3-wheel",
            *([f"python3 -m pip install --no-cache-dir {' '.join(LEGACY_PIP_EXTRAS)}"]
              if tuple(int(x) for x in s.python.split(".")) < (3, 12) else []),
            "printf '#!/bin/sh\\nexec /usr/local/bin/python3 -m pip \"$@\"\\n' > /usr/local/bin/pip",
            "chmod 755 /usr/local/bin/pip && ln -sf pip /usr/local/bin/pip3",
            "python --version && pip --version",
        ]
    if cas:
        run.append("if command -v update-ca-certificates >/dev/null; then update-ca-certificates; fi")
    if s.shims:
        run += _shim_repo(s.shims)
    if s.extra_run:
        run.append(s.extra_run)
    run += ["apt-get clean", "rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb"]
    lines.append("RUN " + " && \\\n    ".join(run))
    if s.python:
        lines.append(f"ENV PYTHON_VERSION={s.python}")
    for k, v in env.items():
        lines.append(f"ENV {k}={v}")
    lines.append(f'CMD ["{"python3" if s.python else "bash"}"]')
    return "\n".join(lines) + "\n"


SHIM_REPO = "/var/lib/farm-standin/apt"


def _shim_repo(shims: tuple[tuple[str, str], ...]) -> list[str]:
    """Shell steps that build empty transitional .debs and a trusted local apt source for them."""
    steps = [f"mkdir -p {SHIM_REPO}"]
    for name, depends in shims:
        d = f"/tmp/shim-{name}"
        control = (f"Package: {name}\\nVersion: 99:0~farm.standin\\nArchitecture: all\\nMaintainer: farm\\n"
                   f"Depends: {depends}\\nDescription: farm stand-in: {name} is {depends} on this release\\n")
        steps += [f"mkdir -p {d}/DEBIAN", f"printf '{control}' > {d}/DEBIAN/control",
                  f"dpkg-deb -b {d} {SHIM_REPO}/{name}.deb", f"rm -rf {d}"]
    steps += [f"cd {SHIM_REPO} && for f in *.deb; do dpkg-deb -f $f; echo Filename: ./$f; "
              "echo Size: $(stat -c%s $f); echo SHA256: $(sha256sum $f | cut -d' ' -f1); echo; done > Packages && cd /",
              f"echo 'deb [trusted=yes] file:{SHIM_REPO} ./' > /etc/apt/sources.list.d/farm-standin.list"]
    return steps


def recipe_hash(s: StandIn, cas: dict[str, bytes]) -> str:
    h = hashlib.sha256(containerfile(s, cas).encode() + s.differences.encode())
    for name, data in cas.items():
        h.update(name.encode() + b"\0" + data)
    return h.hexdigest()[:16]


# podman as root in a VM or CI container: the default ulimits can exceed the machine's hard limit
# (runc then fails with "error setting rlimits"), and crun does not work everywhere
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
log_driver = "k8s-file"
[engine]
runtime = "{runtime}"
events_logger = "file"
"""


def ensure_containers_conf(cache: Path, log) -> None:
    """Point podman at a containers.conf with safe ulimits unless the caller chose one.

    A caller may name the cache's own file before it exists (the tests and the Makefile do, so
    that farm's later engine calls use it too): it is written then. Any other missing file is
    refused, since podman fails on it."""
    conf = cache / "containers.conf"
    chosen = os.environ.get("CONTAINERS_CONF")
    if chosen and Path(chosen).exists():
        return
    if chosen and Path(chosen).resolve() != conf.resolve():
        sys.exit(f"standin_images: CONTAINERS_CONF={chosen} does not exist")
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(CONTAINERS_CONF.format(runtime="runc" if shutil.which("runc") else "crun"))
    os.environ["CONTAINERS_CONF"] = str(conf)
    log(f"CONTAINERS_CONF={conf} (set CONTAINERS_CONF to use another)")


class Engine:
    def __init__(self, binary: str) -> None:
        if shutil.which(binary) is None:
            sys.exit(f"standin_images: engine {binary!r} not found on PATH")
        self.binary = binary

    def run(self, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        res = subprocess.run([self.binary, *args], capture_output=True, text=True, **kw)
        if check and res.returncode != 0:
            sys.exit(f"standin_images: {self.binary} {' '.join(args[:3])} failed:\n{res.stderr[-2000:]}")
        return res

    def label(self, image: str, key: str) -> str | None:
        res = self.run("image", "inspect", "--format", f'{{{{index .Labels "{key}"}}}}', image, check=False)
        return res.stdout.strip() if res.returncode == 0 else None

    def exists(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0

    def size_mb(self, image: str) -> float:
        res = self.run("image", "inspect", "--format", "{{.Size}}", image)
        return int(res.stdout.strip()) / 1e6


def ensure_root(suite: str, cache: Path, log) -> Path:
    """A debootstrapped minbase root in the cache (made once; ``.farm-complete`` marks it done)."""
    root = cache / "roots" / suite
    if (root / ".farm-complete").exists():
        return root
    if shutil.which("debootstrap") is None:
        sys.exit("standin_images: needs debootstrap (apt-get install debootstrap)")
    partial = root.with_name(suite + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    t0 = time.monotonic()
    log(f"debootstrap --variant=minbase {suite} ...")
    with (cache / f"debootstrap-{suite}.log").open("w") as out:
        res = subprocess.run(["debootstrap", "--variant=minbase", suite, str(partial), MIRROR],
                             stdout=out, stderr=subprocess.STDOUT)
    if res.returncode != 0:
        sys.exit(f"standin_images: debootstrap {suite} failed (see {cache}/debootstrap-{suite}.log)")
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    (root / ".farm-complete").write_text(f"{time.monotonic() - t0:.0f}\n")
    return root


def ensure_root_image(engine: Engine, suite: str, cache: Path, log) -> str:
    tag = ROOT_TAG.format(suite=suite)
    root = ensure_root(suite, cache, log)
    stamp = (root / ".farm-complete").stat().st_mtime_ns
    if engine.label(tag, "io.farm.root.stamp") == str(stamp):
        return tag
    log(f"podman import {suite} root -> {tag}")
    tar = subprocess.Popen(["tar", "-C", str(root), "--exclude=./.farm-complete", "--exclude=./proc/*",
                            "--exclude=./sys/*", "--exclude=./var/cache/apt/archives/*.deb", "-c", "."],
                           stdout=subprocess.PIPE)
    try:
        res = subprocess.run([engine.binary, "import", "--change", f"LABEL io.farm.root.stamp={stamp}",
                              "--change", "CMD [\"bash\"]", "-", tag], stdin=tar.stdout, capture_output=True, text=True)
    except BaseException:
        tar.kill()
        raise
    finally:
        # only the import may hold the pipe's read end: were it to exit early while this process
        # still held it, tar would block on the full pipe forever (seen on a fresh machine)
        tar.stdout.close()
    if res.returncode != 0 and tar.poll() is None:
        tar.kill()
    tar.wait()
    if res.returncode != 0 or tar.returncode != 0:
        sys.exit(f"standin_images: importing the {suite} root failed: {res.stderr[-1000:]}")
    return tag


def build(engine: Engine, s: StandIn, cache: Path, force: bool, log) -> dict:
    cas = host_cas()
    h = recipe_hash(s, cas)
    root_tag = ensure_root_image(engine, s.suite, cache, log)
    root_id = engine.run("image", "inspect", "--format", "{{.Id}}", root_tag).stdout.strip()
    key = f"{h}-{root_id[:12]}"
    if not force and engine.label(s.tag, "io.farm.standin.recipe") == key:
        return {"name": s.name, "tag": s.tag, "built": False, "build_s": 0.0,
                "size_mb": round(engine.size_mb(s.tag), 1)}
    ctx = cache / "build" / s.name.replace(":", "_")
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "Containerfile").write_text(containerfile(s, cas))
    shutil.rmtree(ctx / "host-ca", ignore_errors=True)
    if cas:
        (ctx / "host-ca").mkdir()
        for name, data in cas.items():
            (ctx / "host-ca" / name).write_bytes(data)
    labels = {LABEL: "true", f"{LABEL}.for": f"{s.name} ({s.stands_for})", f"{LABEL}.suite": s.suite,
              f"{LABEL}.differences": s.differences + (
                  f"; trusts the build host's local CA certificates ({', '.join(cas)})" if cas else ""),
              f"{LABEL}.recipe": key}
    args = ["build", "--pull=never", "--layers=false", "-t", s.tag, "-f", str(ctx / "Containerfile")]
    for k, v in labels.items():
        args += ["--label", f"{k}={v}"]
    log(f"building {s.tag} on {root_tag}")
    t0 = time.monotonic()
    res = engine.run(*args, str(ctx), check=False)
    (ctx / "build.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        sys.exit(f"standin_images: building {s.name} failed (log: {ctx / 'build.log'}):\n{res.stderr[-1500:]}")
    return {"name": s.name, "tag": s.tag, "built": True, "build_s": round(time.monotonic() - t0, 1),
            "size_mb": round(engine.size_mb(s.tag), 1)}


# images TB2 Dockerfiles copy binaries out of (`COPY --from=ghcr.io/astral-sh/uv:0.8.14 /uv /uvx /bin/`)
UV_IMAGES = ("0.8.14", "0.8.15")


def build_uv(engine: Engine, version: str, cache: Path, log) -> dict:
    """ghcr.io/astral-sh/uv:VERSION as the official image lays it out (/uv, /uvx on scratch), with
    the binaries of the same version's PyPI wheel, which the astral image and installer also ship."""
    tag = f"ghcr.io/astral-sh/uv:{version}"
    key = f"uv-wheel-{version}"
    if engine.label(tag, f"{LABEL}.recipe") == key:
        return {"name": tag, "tag": tag, "built": False, "build_s": 0.0, "size_mb": round(engine.size_mb(tag), 1)}
    ctx = cache / "build" / f"uv_{version}"
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    t0 = time.monotonic()
    log(f"building {tag} from the uv=={version} wheel")
    res = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                          "-d", str(ctx / "wheel"), f"uv=={version}"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"standin_images: pip download uv=={version} failed:\n{res.stderr[-1500:]}")
    wheel = next((ctx / "wheel").glob("uv-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        for name in ("uv", "uvx"):
            member = f"uv-{version}.data/scripts/{name}"
            (ctx / name).write_bytes(zf.read(member))
            (ctx / name).chmod(0o755)
    (ctx / "Containerfile").write_text("FROM scratch\nCOPY uv uvx /\nENTRYPOINT [\"/uv\"]\n")
    labels = {LABEL: "true", f"{LABEL}.for": f"{tag} (astral's uv image)", f"{LABEL}.recipe": key,
              f"{LABEL}.differences": f"/uv and /uvx from PyPI's uv=={version} wheel ({wheel.name}); no other files"}
    args = ["build", "--pull=never", "-t", tag, "-f", str(ctx / "Containerfile")]
    for k, v in labels.items():
        args += ["--label", f"{k}={v}"]
    res = engine.run(*args, str(ctx), check=False)
    if res.returncode != 0:
        sys.exit(f"standin_images: building {tag} failed:\n{res.stderr[-1500:]}")
    return {"name": tag, "tag": tag, "built": True, "build_s": round(time.monotonic() - t0, 1),
            "size_mb": round(engine.size_mb(tag), 1)}


TOOLBOX_DIR = Path(__file__).resolve().parents[1] / "infra" / "k8s" / "toolbox"


def build_toolbox(engine: Engine, tag: str, cache: Path, log) -> dict:
    """farm's own toolbox image (infra/k8s/toolbox) on the bookworm root, so sandbox=docker
    needs no registry either. It is farm's image, not a task's base: no stand-in label."""
    root_tag = ensure_root_image(engine, "bookworm", cache, log)
    src = "".join(p.read_text() for p in sorted(TOOLBOX_DIR.iterdir()) if p.is_file())
    key = hashlib.sha256(src.encode() + root_tag.encode()).hexdigest()[:16]
    if engine.label(tag, "io.farm.toolbox.recipe") == key:
        return {"name": "toolbox", "tag": tag, "built": False, "build_s": 0.0, "size_mb": round(engine.size_mb(tag), 1)}
    log(f"building the toolbox {tag} from {TOOLBOX_DIR}")
    t0 = time.monotonic()
    res = engine.run("build", "--pull=never", "--build-arg", f"BASE={root_tag}", "--label",
                     f"io.farm.toolbox.recipe={key}", "-t", tag, str(TOOLBOX_DIR), check=False)
    (cache / "toolbox-build.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        sys.exit(f"standin_images: building the toolbox failed:\n{res.stderr[-1500:]}")
    return {"name": "toolbox", "tag": tag, "built": True, "build_s": round(time.monotonic() - t0, 1),
            "size_mb": round(engine.size_mb(tag), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="build only these names (e.g. ubuntu:24.04)")
    ap.add_argument("--list", action="store_true", help="print the stand-ins and their differences, build nothing")
    ap.add_argument("--force", action="store_true", help="rebuild even when the recipe is unchanged")
    ap.add_argument("--toolbox", default="ghcr.io/farm-eval/farm-toolbox:0.1.0",
                    help="also build farm's toolbox image under this tag (sandbox.docker.toolbox_image); '' skips it")
    ap.add_argument("--engine", default=os.environ.get("FARM_IMAGES_ENGINE", "podman"))
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("FARM_IMAGES_CACHE", "/var/tmp/farm-images")))
    args = ap.parse_args(argv)
    known = {s.name: s for s in STANDINS}
    chosen = STANDINS
    if args.only:
        unknown = [n for n in args.only if n not in known]
        if unknown:
            ap.error(f"--only: unknown stand-in(s) {unknown}; choose from {sorted(known)}")
        chosen = [known[n] for n in args.only]
    if args.list:
        for s in chosen:
            print(f"{s.tag}\t{s.suite}\t{s.differences}")
        if not args.only:
            for v in UV_IMAGES:
                print(f"ghcr.io/astral-sh/uv:{v}\tscratch\t/uv and /uvx from PyPI's uv=={v} wheel")
        return 0

    def log(msg: str) -> None:
        print(f"standin_images: {msg}", file=sys.stderr, flush=True)

    engine = Engine(args.engine)
    args.cache.mkdir(parents=True, exist_ok=True)
    if Path(args.engine).name == "podman":
        ensure_containers_conf(args.cache, log)
    results = [build(engine, s, args.cache, args.force, log) for s in chosen]
    if not args.only:
        results += [build_uv(engine, v, args.cache, log) for v in UV_IMAGES]
    if args.toolbox:
        results.append(build_toolbox(engine, args.toolbox, args.cache, log))
    for r in results:
        state = f"built in {r['build_s']:.0f} s" if r["built"] else "up to date"
        print(f"{r['tag']:45s} {r['size_mb']:8.1f} MB  {state}")
    (args.cache / "standins.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
