"""Readiness of the served application.

``/v1/models`` answers as soon as the OpenAI ingress is up, while the LLMServer replica may
still be loading the engine (about a minute on CPU). Ready therefore means: Serve reports the
application RUNNING *and* ``/v1/models`` lists the model. A failed deployment is reported at
once with Serve's own message instead of waiting out the timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from farm.errors import FarmError


class ServeError(FarmError, RuntimeError):
    """The served application failed to deploy, or did not become ready in time."""


def serve_app_state(app_name: str) -> tuple[str, str]:
    """(status, message) of one Serve application; status NOT_STARTED if Serve does not know it."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return "NOT_STARTED", ""
    details = [app.message] if app.message else []
    for name, dep in app.deployments.items():
        if dep.message and dep.status not in ("HEALTHY",):
            details.append(f"{name}: {dep.status}: {dep.message}")
    return str(getattr(app.status, "value", app.status)), " | ".join(details)


def models_listed(base_url: str, model_id: str, timeout_s: float = 5.0) -> bool:
    try:
        r = httpx.get(f"{base_url}/models", timeout=timeout_s)
    except httpx.HTTPError:
        return False
    if r.status_code != 200:
        return False
    try:
        return any(m.get("id") == model_id for m in r.json().get("data", []))
    except ValueError:
        return False


def wait_ready(
    app_name: str,
    base_url: str,
    model_id: str,
    timeout_s: float,
    *,
    poll_s: float = 2.0,
    state: Callable[[str], tuple[str, str]] = serve_app_state,
    on_wait: Callable[[str, float], None] | None = None,
) -> float:
    """Block until the app is RUNNING and serves ``model_id``; return the seconds waited."""
    start = time.monotonic()
    last = ""
    while True:
        waited = time.monotonic() - start
        status, message = state(app_name)
        if status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise ServeError(f"serving application {app_name!r} is {status}: {message or 'no message from Serve'}")
        if status == "RUNNING" and models_listed(base_url, model_id):
            return waited
        if waited > timeout_s:
            raise ServeError(
                f"serving application {app_name!r} not ready after {timeout_s:g}s (serve.ready_timeout_s); "
                f"last status {status}{': ' + message if message else ''}"
            )
        if on_wait is not None and status != last:
            on_wait(status, waited)
        last = status
        time.sleep(poll_s)
