"""Hybrid models (linear attention / Mamba layers beside full attention): does ``max_num_seqs`` fit
the engine's per-sequence state pool?

A hybrid engine keeps one fixed-size recurrent state per running sequence and per linear layer,
carved out of the same KV-cache memory as the attention blocks. vLLM refuses to start when
``max_num_seqs`` exceeds the blocks it found ("max_num_seqs (1024) exceeds available Mamba cache
blocks (969)", vllm-project/vllm#49064) -- after the weights loaded, minutes in. ``farm serve``
checks the same inequality first, from the checkpoint's config.json.

What is exact and what is estimated:

* exact (from config.json): how many layers are linear / full attention, the bytes of one
  sequence's state in one linear layer (conv state + recurrent state) and the bytes of one token
  in one attention layer;
* a model of vLLM's hybrid allocator (estimated): every layer's page is one size -- the attention
  block grows (in steps of 16 tokens) until it holds at least one linear layer's state -- and
  layers are allocated in groups of ``min(linear, attention)`` layers (the larger count when it
  is under 1.5x the smaller), so the pool holds ``memory // (page * group)`` blocks; vLLM 0.32
  refuses ``max_num_seqs`` above that (config/compilation.py, with full CUDA graphs: one block
  per decoding sequence), so with ``enforce_eager`` the check is skipped, as the engine's is;
* the memory (estimated unless given): ``GPU memory * gpu_memory_utilization - weights -
  ACTIVATION_RESERVE of the GPU``; vLLM measures the activation peak by profiling, farm cannot.

Give the engine's own number with ``model.serving.engine_kwargs.num_gpu_blocks_override`` (a
vLLM argument: then it is also what the engine uses) and the check is exact. The check needs a
GPU's memory: on a machine without one it is skipped, and says so.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.errors import ConfigError

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "auto": 2}
# share of the GPU that vLLM's profiling typically finds taken by activations and CUDA graphs
ACTIVATION_RESERVE = 0.05
ATTENTION_BLOCK_STEP = 16  # vLLM grows the hybrid attention block in multiples of this


@dataclass(frozen=True)
class HybridShape:
    linear_layers: int
    attention_layers: int
    state_bytes_per_layer: int  # one sequence's conv + recurrent state in one linear layer
    kv_bytes_per_token_layer: int  # one token's K and V in one attention layer


@dataclass(frozen=True)
class StatePool:
    blocks: int
    page_bytes: int
    group_layers: int
    memory_bytes: int | None  # None: the block count was given
    how: str  # "given (num_gpu_blocks_override)" | "estimated"


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    return config.get("text_config") or config


def hybrid_shape(config: dict[str, Any], dtype: str = "bfloat16", tensor_parallel: int = 1) -> HybridShape | None:
    """The hybrid layout of a Hugging Face config.json, or None for a model without linear layers.

    Raises:
        ConfigError: a hybrid config whose state size cannot be read from its fields.
    """
    text = _text_config(config)
    kinds = text.get("layer_types") or text.get("layers_block_type") or []
    linear = sum(1 for k in kinds if k in ("linear_attention", "mamba", "mamba2"))
    attention = sum(1 for k in kinds if k in ("full_attention", "attention", "sliding_attention"))
    if not linear:
        return None
    nbytes = DTYPE_BYTES.get(str(dtype if dtype != "auto" else text.get("torch_dtype", "bfloat16")), 2)
    tp = max(1, tensor_parallel)
    if "linear_num_value_heads" in text:  # Gated DeltaNet (Qwen3-Next, Qwen3.5)
        k_heads, v_heads = text["linear_num_key_heads"], text["linear_num_value_heads"]
        k_dim, v_dim = text["linear_key_head_dim"], text["linear_value_head_dim"]
        conv = (text.get("linear_conv_kernel_dim", 4) - 1) * (2 * k_heads * k_dim + v_heads * v_dim)
        state = conv * nbytes // tp + v_heads * k_dim * v_dim * nbytes // tp
    elif "mamba_d_state" in text or "ssm_state_size" in text:  # Mamba2
        d_state = text.get("mamba_d_state", text.get("ssm_state_size"))
        heads = text.get("mamba_n_heads", text.get("mamba_num_heads"))
        head_dim = text.get("mamba_d_head", text.get("mamba_head_dim"))
        groups = text.get("mamba_n_groups", text.get("n_groups", 1))
        conv_k = text.get("mamba_d_conv", text.get("conv_kernel", 4))
        if heads is None or head_dim is None:
            raise ConfigError("config.json: a Mamba2 hybrid without mamba_n_heads / mamba_d_head: "
                              "cannot size its state")
        conv = (conv_k - 1) * (heads * head_dim + 2 * groups * d_state)
        state = conv * nbytes // tp + heads * head_dim * d_state * nbytes // tp
    else:
        raise ConfigError("config.json: a hybrid model whose linear-layer state size farm cannot read "
                          "(neither Gated DeltaNet linear_* nor Mamba2 fields)")
    kv_heads = max(1, text.get("num_key_value_heads", text.get("num_attention_heads", 1)) // tp)
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    return HybridShape(linear, attention, state, 2 * kv_heads * head_dim * nbytes)


def page_bytes(shape: HybridShape) -> int:
    """One layer's page: the smallest attention block (a multiple of 16 tokens) that holds one
    linear layer's state of one sequence."""
    if not shape.attention_layers:
        return shape.state_bytes_per_layer
    tokens = math.ceil(shape.state_bytes_per_layer / shape.kv_bytes_per_token_layer)
    tokens = ATTENTION_BLOCK_STEP * math.ceil(tokens / ATTENTION_BLOCK_STEP)
    return tokens * shape.kv_bytes_per_token_layer


def state_pool(shape: HybridShape, *, memory_bytes: int | None = None, given_blocks: int | None = None) -> StatePool:
    """The pool's block count: given, or estimated from the KV-cache memory."""
    counts = [n for n in (shape.linear_layers, shape.attention_layers) if n]
    # as vLLM groups layers (kv_cache_utils): by the smaller count, unless the larger is < 1.5x it
    group = max(counts) if max(counts) < 1.5 * min(counts) else min(counts)
    page = page_bytes(shape)
    if given_blocks is not None:
        return StatePool(given_blocks, page, group, None, "given (num_gpu_blocks_override)")
    if memory_bytes is None:
        raise ValueError("state_pool needs memory_bytes or given_blocks")
    return StatePool(max(0, memory_bytes // (page * group)), page, group, memory_bytes, "estimated")


def kv_memory_bytes(gpu_bytes: int, utilization: float, weight_bytes: int) -> int:
    """The estimated KV-cache memory of one GPU: its budget less the weights and an activation reserve."""
    return int(gpu_bytes * utilization - weight_bytes - gpu_bytes * ACTIVATION_RESERVE)


def check_max_num_seqs(max_num_seqs: int, pool: StatePool) -> None:
    """Raises ConfigError (one line: both numbers and the fix) when the pool cannot hold max_num_seqs."""
    if max_num_seqs <= pool.blocks:
        return
    where = "the engine's state pool" if pool.memory_bytes is None else \
        f"the engine's state pool (estimated from {pool.memory_bytes / 2**30:.1f} GiB of KV-cache memory)"
    raise ConfigError(
        f"invalid value {max_num_seqs} for 'model.serving.engine_kwargs.max_num_seqs': it exceeds "
        f"{where}, {pool.blocks} sequences; set model.serving.engine_kwargs.max_num_seqs={pool.blocks} "
        "(and max_ongoing_requests no higher), or raise gpu_memory_utilization / use a larger GPU"
    )


def gpu_memory_bytes() -> int | None:
    """Total memory of the first GPU (nvidia-smi), None without one."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return int(out.split()[0]) * 2**20  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def checkpoint_files(source: str, revision: str | None) -> tuple[dict[str, Any], int] | None:
    """(config.json, bytes of its *.safetensors) of a local checkpoint or a cached / reachable hub
    one; None when neither can be read here."""
    path = Path(source).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        weights = sum(p.stat().st_size for p in path.glob("*.safetensors"))
        return json.loads((path / "config.json").read_text()), weights
    try:
        from huggingface_hub import HfApi, hf_hub_download

        config = json.loads(Path(hf_hub_download(source, "config.json", revision=revision)).read_text())
        info = HfApi().model_info(source, revision=revision, files_metadata=True)
        weights = sum((s.size or 0) for s in info.siblings or [] if s.rfilename.endswith(".safetensors"))
        return config, weights
    except Exception:  # noqa: BLE001 - no hub access or no such file: the check is skipped, said so
        return None


def check_serve_start(cfg: Any, log: Any) -> None:
    """``farm serve``'s state-pool check for a hybrid model (GPU only; skipped, with a log line,
    where the GPU's memory or the model's config.json cannot be read).

    Raises:
        ConfigError: max_num_seqs exceeds the pool (both numbers and the fix).
    """
    serving = cfg.model.serving
    ek = serving.engine_kwargs
    if serving.device != "gpu" or "max_num_seqs" not in ek:
        return
    if ek.get("enforce_eager"):
        log("farm serve: state-pool check skipped: enforce_eager (no CUDA graphs: the engine does not refuse)")
        return
    files = checkpoint_files(str(serving.source), serving.revision)
    if files is None:
        log("farm serve: state-pool check skipped: config.json of the checkpoint is not readable here")
        return
    config, weight_bytes = files
    shape = hybrid_shape(config, str(ek.get("dtype", "bfloat16")), int(ek.get("tensor_parallel_size", 1)))
    if shape is None:
        return
    if ek.get("num_gpu_blocks_override"):
        pool = state_pool(shape, given_blocks=int(ek["num_gpu_blocks_override"]))
    else:
        gpu = gpu_memory_bytes()
        if gpu is None:
            log("farm serve: state-pool check skipped: no GPU memory reading (nvidia-smi) on this machine")
            return
        tp = max(1, int(ek.get("tensor_parallel_size", 1)))
        memory = kv_memory_bytes(gpu, float(ek.get("gpu_memory_utilization", 0.9)), weight_bytes // tp)
        pool = state_pool(shape, memory_bytes=memory)
    check_max_num_seqs(int(ek["max_num_seqs"]), pool)
    log(f"farm serve: state pool {pool.how}: {pool.blocks} sequences >= max_num_seqs {ek['max_num_seqs']}")
