"""farm/serve/state_pool.py: the hybrid state-pool arithmetic and `farm serve`'s refusal.

The numbers below are worked by hand for a Gated DeltaNet hybrid shaped like Qwen3.5-4B
(24 linear + 8 full-attention layers); the real check against an engine needs a GPU and is not
run here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.serve.state_pool import (
    check_max_num_seqs,
    check_serve_start,
    hybrid_shape,
    kv_memory_bytes,
    page_bytes,
    state_pool,
)

ROOT = Path(__file__).resolve().parents[2]
LAYERS = (["linear_attention"] * 3 + ["full_attention"]) * 8
HYBRID = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "text_config": {
        "layer_types": LAYERS, "hidden_size": 2560, "num_attention_heads": 16, "num_key_value_heads": 4,
        "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    },
}
GIB = 2**30


def test_shape_of_a_gated_deltanet_hybrid() -> None:
    shape = hybrid_shape(HYBRID, "bfloat16")
    assert (shape.linear_layers, shape.attention_layers) == (24, 8)
    # conv 3 * (2*16*128 + 32*128) * 2 B = 49,152; recurrent 32*128*128 * 2 B = 1,048,576
    assert shape.state_bytes_per_layer == 1_097_728
    assert shape.kv_bytes_per_token_layer == 4096  # K+V, 4 heads x 256 x 2 B
    # 268 tokens hold one state, rounded up to 272 (a multiple of 16)
    assert page_bytes(shape) == 272 * 4096
    # tensor parallel splits heads: half the state and half the KV per GPU
    half = hybrid_shape(HYBRID, "bfloat16", tensor_parallel=2)
    assert half.state_bytes_per_layer == 1_097_728 // 2 and half.kv_bytes_per_token_layer == 2048


def test_a_dense_model_has_no_state_pool() -> None:
    dense = {"num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2}
    assert hybrid_shape(dense) is None


def test_pool_blocks_from_memory_and_given() -> None:
    shape = hybrid_shape(HYBRID, "bfloat16")
    pool = state_pool(shape, memory_bytes=10 * GIB)
    # groups of 8 layers of 1,114,112-byte pages: 10 GiB // 8,912,896 = 1204
    assert (pool.blocks, pool.group_layers, pool.how) == (1204, 8, "estimated")
    assert state_pool(shape, given_blocks=969).blocks == 969
    assert kv_memory_bytes(100 * GIB, 0.9, 10 * GIB) == 75 * GIB  # 90 - 10 weights - 5 reserve


def test_refusal_names_both_numbers_and_the_fix() -> None:
    pool = state_pool(hybrid_shape(HYBRID, "bfloat16"), memory_bytes=10 * GIB)
    check_max_num_seqs(1204, pool)  # fits exactly
    with pytest.raises(ConfigError) as err:
        check_max_num_seqs(2000, pool)
    msg = str(err.value)
    assert "\n" not in msg
    assert "2000" in msg and "1204 sequences" in msg and "max_num_seqs=1204" in msg and "10.0 GiB" in msg


def _checkpoint(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(HYBRID))
    return d


def test_serve_start_check_with_a_given_block_count(tmp_path: Path) -> None:
    from farm.config import load_config

    src = _checkpoint(tmp_path)
    logs: list[str] = []
    ok = load_config(["model=frognano-4b", f"model.serving.source={src}",
                      "model.serving.engine_kwargs.num_gpu_blocks_override=300"])
    check_serve_start(ok, logs.append)
    assert "300 sequences" in logs[-1]
    low = load_config(["model=frognano-4b", f"model.serving.source={src}",
                       "model.serving.engine_kwargs.num_gpu_blocks_override=100"])
    with pytest.raises(ConfigError, match=r"256 .*exceeds.* 100 sequences"):
        check_serve_start(low, logs.append)


def test_serve_start_check_is_skipped_without_a_gpu_and_says_so(tmp_path: Path, monkeypatch) -> None:
    from farm.config import load_config

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on it
    logs: list[str] = []
    check_serve_start(load_config(["model=frognano-4b", f"model.serving.source={_checkpoint(tmp_path)}"]),
                      logs.append)
    assert logs and "skipped" in logs[0] and "nvidia-smi" in logs[0]


@pytest.mark.integration
def test_farm_serve_refuses_before_starting_anything(tmp_path: Path) -> None:
    """The real CLI: one line on stderr naming both numbers, exit code 2, nothing started."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "FARM_REQUIRE"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "farm.cli", "serve", "model=frognano-4b",
         f"model.serving.source={_checkpoint(tmp_path)}",
         "model.serving.engine_kwargs.num_gpu_blocks_override=100", f"serve.port={port}"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if "max_num_seqs" in ln]
    assert len(lines) == 1 and "256" in lines[0] and "100 sequences" in lines[0], proc.stderr[-2000:]


def test_layer_groups_follow_vllms_rule() -> None:
    from farm.serve.state_pool import HybridShape

    # 24:8 groups by 8; 13:12 (under 1.5x) by 13, as vLLM pads (12 + 1, 13)
    assert state_pool(HybridShape(24, 8, 4096, 4096), given_blocks=1).group_layers == 8
    assert state_pool(HybridShape(13, 12, 4096, 4096), given_blocks=1).group_layers == 13


def test_enforce_eager_skips_the_check_as_the_engine_does(tmp_path: Path) -> None:
    from farm.config import load_config

    logs: list[str] = []
    cfg = load_config(["model=frognano-4b", f"model.serving.source={_checkpoint(tmp_path)}",
                       "model.serving.engine_kwargs.num_gpu_blocks_override=1",
                       "model.serving.engine_kwargs.enforce_eager=true"])
    check_serve_start(cfg, logs.append)  # 256 > 1, but an eager engine starts anyway
    assert "enforce_eager" in logs[0]
