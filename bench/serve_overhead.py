"""What Ray Serve LLM costs over a bare vLLM server, measured in one run.

    python bench/serve_overhead.py [model=tiny-cpu] [--concurrency 8] [--requests 64] [--max-tokens 64]

Starts a bare vLLM OpenAI server with the preset's engine arguments, drives it with N
concurrent chat completions of a fixed length (ignore_eos, so every request generates exactly
--max-tokens tokens), stops it, then deploys the same model through farm's Ray Serve LLM
application and repeats. The two never run at the same time. Prints requests/s and p50 / p95
latency for both and the ratios. Record the result in docs/performance.md.

On a 2-core CPU box the proxy, ingress, router, replica and engine share the cores with the
benchmark itself, so the overhead is far larger than on a GPU node (goal there: <= 5 %).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from farm.config import FarmConfig, load_config  # noqa: E402
from farm.serve.app import model_source  # noqa: E402
from farm.serve.cli import served_sync  # noqa: E402

PROMPT = "Write a short Python function that reverses a string, then explain it."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_flags(engine_kwargs: dict) -> list[str]:
    flags = []
    for key, value in engine_kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (dict, list)):
            flags += [flag, json.dumps(value)]
        else:
            flags += [flag, str(value)]
    return flags


async def drive(base_url: str, model: str, concurrency: int, n: int, max_tokens: int) -> dict:
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0.0, "ignore_eos": True,
            "chat_template_kwargs": {"enable_thinking": False}}

    async with httpx.AsyncClient(timeout=600) as client:
        # warm-up: first requests pay lazy initialisation on both paths
        for _ in range(2):
            (await client.post(f"{base_url}/chat/completions", json=body)).raise_for_status()

        async def worker(k: int) -> None:
            while not queue.empty():
                queue.get_nowait()
                t = time.perf_counter()
                r = await client.post(f"{base_url}/chat/completions", json=body,
                                      headers={"X-Farm-Session": f"bench-{k}"})
                r.raise_for_status()
                assert r.json()["usage"]["completion_tokens"] == max_tokens
                latencies.append(time.perf_counter() - t)

        start = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        wall = time.perf_counter() - start
    latencies.sort()
    return {"rps": n / wall, "p50_s": statistics.median(latencies),
            "p95_s": latencies[max(0, int(0.95 * len(latencies)) - 1)], "wall_s": wall}


def bare_vllm(cfg: FarmConfig, args: argparse.Namespace) -> dict:
    port = free_port()
    env = dict(os.environ, **{str(k): str(v) for k, v in (cfg.model.serving.runtime_env.get("env_vars") or {}).items()})
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_source(cfg.model),
           "--served-model-name", cfg.model.name, "--host", "127.0.0.1", "--port", str(port),
           *vllm_flags(dict(cfg.model.serving.engine_kwargs))]
    log = tempfile.NamedTemporaryFile(prefix="bare-vllm-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"bare vLLM exited with {proc.returncode}; log: {log.name}")
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > 900:
                raise SystemExit(f"bare vLLM not ready after 900 s; log: {log.name}")
            time.sleep(1)
        print(f"bare vLLM ready in {time.monotonic() - t0:.0f}s", file=sys.stderr)
        return asyncio.run(drive(base, cfg.model.name, args.concurrency, args.requests, args.max_tokens))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def ray_serve(cfg: FarmConfig, args: argparse.Namespace) -> dict:
    t0 = time.monotonic()
    with served_sync(cfg) as base:
        print(f"Ray Serve LLM ready in {time.monotonic() - t0:.0f}s", file=sys.stderr)
        return asyncio.run(drive(base, cfg.model.name, args.concurrency, args.requests, args.max_tokens))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", default=["model=tiny-cpu"])
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args()
    overrides = list(args.overrides)
    if not any(o.startswith("model=") for o in overrides):
        overrides.insert(0, "model=tiny-cpu")
    cfg = load_config([*overrides, f"serve.port={free_port()}"])
    if cfg.model.serving.synthesize == "tiny-qwen3":
        from farm.serve.tiny_model import build_tiny_qwen3

        build_tiny_qwen3(model_source(cfg.model))
    bare = bare_vllm(cfg, args)
    ray = ray_serve(cfg, args)
    print(f"model {cfg.model.name}, concurrency {args.concurrency}, "
          f"{args.requests} requests x {args.max_tokens} tokens")
    print(f"{'':14}{'req/s':>9}{'p50 s':>9}{'p95 s':>9}")
    for name, r in (("bare vLLM", bare), ("Ray Serve LLM", ray)):
        print(f"{name:14}{r['rps']:9.2f}{r['p50_s']:9.3f}{r['p95_s']:9.3f}")
    print(f"throughput ratio (Ray Serve / bare) {ray['rps'] / bare['rps']:.3f}  "
          f"({(1 - ray['rps'] / bare['rps']) * 100:.1f}% loss); p50 latency ratio {ray['p50_s'] / bare['p50_s']:.3f}")


if __name__ == "__main__":
    main()
