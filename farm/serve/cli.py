"""`farm serve` (blocking, Ctrl-C stops cleanly) and `served(cfg)` for `farm run serve.enabled=true`.

Both deploy the same application (farm.serve.app) into a Ray cluster: ``run.ray_address`` /
``RAY_ADDRESS`` if given, else a private loopback-only Ray head started here. Whatever was
started here is stopped here, and nothing else: the app is deleted, Serve is shut down only if
this process started it, Ray only if this process started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from farm.config import FarmConfig
from farm.errors import FarmError
from farm.serve.app import base_url, build_app, check_serving, default_num_cpus, ingress_env, model_source
from farm.serve.ready import ServeError, wait_ready
from farm.serve.state_pool import check_serve_start

__all__ = ["serve_main", "served", "served_sync", "ServeError"]


@dataclass
class Serving:
    cfg: FarmConfig
    base_url: str = ""
    started_ray: bool = False
    started_serve: bool = False
    deployed: bool = False
    ready_s: float = 0.0
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))

    def start(self) -> str:
        cfg = self.cfg
        from farm.run.workers import init_ray, ray_env

        # Before anything imports ray (vLLM's registries may): Ray reads these at import / init
        # time. Inherited by the raylet, and so by the Serve proxy and ingress started here.
        os.environ.update({**ray_env(), **ingress_env(cfg.model)})
        check_serving(cfg)
        # before minutes of weight loading: the engine would refuse the same max_num_seqs later
        check_serve_start(cfg, self.log)
        if cfg.model.serving.synthesize == "tiny-qwen3":
            from farm.serve.tiny_model import build_tiny_qwen3

            build_tiny_qwen3(model_source(cfg.model))
        t0 = time.monotonic()
        # Ray first: building the app would otherwise auto-start a default Ray (wildcard
        # listeners, token auth, a dashboard, 2 CPUs).
        self.started_ray = init_ray(cfg.run.ray_address, num_cpus=default_num_cpus(cfg))
        app = build_app(cfg)
        from ray import serve

        if _serve_running():
            self.log("farm serve: Serve already runs in this Ray cluster; keeping its HTTP options")
        else:
            serve.start(proxy_location="HeadOnly", http_options={"host": cfg.serve.host, "port": cfg.serve.port})
            self.started_serve = True
        serve._run(app, name=cfg.serve.app_name, route_prefix="/", _blocking=False)
        self.deployed = True
        self.base_url = base_url(cfg)
        self.log(f"farm serve: deploying {cfg.model.name!r} ({cfg.model.serving.source}); waiting for the engine")
        wait_ready(
            cfg.serve.app_name, self.base_url, cfg.model.name, cfg.serve.ready_timeout_s,
            on_wait=lambda status, s: self.log(f"farm serve: {status} after {s:.0f}s"),
        )
        self.ready_s = time.monotonic() - t0
        return self.base_url

    def stop(self) -> None:
        try:
            import ray
            from ray import serve
        except ImportError:
            return
        if not ray.is_initialized():
            return
        with contextlib.suppress(Exception):
            if self.started_serve:
                serve.shutdown()
            elif self.deployed:
                serve.delete(self.cfg.serve.app_name)
        if self.started_ray:
            ray.shutdown()


def _serve_running() -> bool:
    from ray import serve

    try:
        serve.status()
    except Exception:  # noqa: BLE001 - RayServeException when no controller exists
        return False
    import ray

    try:
        ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
        return True
    except ValueError:
        return False


@contextlib.contextmanager
def served_sync(cfg: FarmConfig) -> Iterator[str]:
    """Deploy, wait until ready, yield the OpenAI base URL (…/v1), tear down on exit."""
    serving = Serving(cfg)
    try:
        yield serving.start()
    finally:
        serving.stop()


@contextlib.asynccontextmanager
async def served(cfg: FarmConfig) -> AsyncIterator[str]:
    """``async with served(cfg) as base_url`` — for ``farm run serve.enabled=true``.

    Start-up blocks the event loop on purpose: nothing else runs before the endpoint is ready,
    and Ray's driver API is safest on the main thread.
    """
    serving = Serving(cfg)
    try:
        yield serving.start()
    finally:
        serving.stop()


def serve_main(cfg: FarmConfig) -> int:
    """`farm serve`: deploy, print the base URL, block until Ctrl-C / SIGTERM, stop cleanly."""

    def _terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGINT too: a process started in the background by a shell inherits SIGINT as ignored,
    # and Python then never raises KeyboardInterrupt.
    previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGINT)}
    serving = Serving(cfg)
    try:
        url = serving.start()
        print(f"farm serve: {cfg.model.name!r} ready in {serving.ready_s:.0f}s", file=sys.stderr, flush=True)
        print(url, flush=True)
        print(
            f"farm serve: point a run at it with model={cfg.model.name if cfg.model.name else '…'} "
            f"model.base_url={url}; Ctrl-C stops", file=sys.stderr, flush=True,
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("farm serve: stopping", file=sys.stderr, flush=True)
        return 0
    except ServeError as exc:
        print(f"farm serve: {exc}", file=sys.stderr, flush=True)
        return 1
    except FarmError:
        raise  # the farm CLI prints ConfigError & co as one line with exit code 2
    finally:
        serving.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
