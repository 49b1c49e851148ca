"""The Kubernetes API-server emulator: real HTTP on 127.0.0.1 for the real ``kubernetes`` client.

It serves, for the objects farm uses (namespaces, pods, events, networkpolicies): discovery,
get / list / watch / create / update / patch / delete with label and field selectors and
resourceVersions, ``pods/exec`` over WebSocket (execws.py), bearer-token auth, schema
validation of every object it receives (validation.py), errors on demand (faults.py) and a log
of every request. Pods are run by an emulated kubelet (kubelet.py) in real bubblewrap sandboxes.
The server runs its own event loop in a daemon thread, so synchronous client calls from a test
(or from ``asyncio.to_thread`` in the backend) never wait on the test's own loop.

    with ApiServerEmulator(tmp_path) as emu:
        cfg = KubernetesSandboxConfig(kubeconfig=str(emu.kubeconfig), namespace=emu.namespace, ...)
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import traceback
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from .execws import ExecKnobs, ExecSession, serve_exec
from .faults import Fault, Faults, RequestLog, RequestRecord, now
from .kubelet import Kubelet, KubeletKnobs
from .store import RESOURCES, ApiError, ObjectStore, field_matcher, label_matcher
from .validation import validate

GROUPS = {"": "v1", "networking.k8s.io": "networking.k8s.io/v1"}


def _error_response(e: ApiError) -> web.Response:
    return web.json_response(e.status(), status=e.code, headers=e.headers)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch (strategic merge patches are applied the same way here)."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = v


class ApiServerEmulator:
    def __init__(self, root: Path, *, namespaces: tuple[str, ...] = ("farm-test",), token: str | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.namespace = namespaces[0]
        self.token = token or secrets.token_hex(16)
        self.store = ObjectStore()
        self.kubelet_knobs = KubeletKnobs()
        self.exec_knobs = ExecKnobs()
        self.kubelet = Kubelet(self.store, self.root, self.kubelet_knobs)
        self.faults = Faults()
        self.log = RequestLog()
        self.exec_sessions: list[ExecSession] = []
        self.errors: list[str] = []  # handler exceptions (emulator bugs), with tracebacks
        for ns in namespaces:
            self.store.create("namespaces", "", {"metadata": {"name": ns, "labels": {
                "kubernetes.io/metadata.name": ns}}, "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"}})
        self.port = 0
        self.kubeconfig = self.root / "kubeconfig"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> ApiServerEmulator:
        started = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as e:  # noqa: BLE001 - surfaced to start()'s caller
                failed.append(e)
                started.set()
                return
            started.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="k8s-apiserver-emulator", daemon=True)
        self._thread.start()
        started.wait(30)
        if failed:
            raise failed[0]
        self._write_kubeconfig()
        return self

    async def _serve(self) -> None:
        app = web.Application(client_max_size=256 << 20)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def _write_kubeconfig(self) -> None:
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "emulator",
               "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
               "users": [{"name": "farm-driver", "user": {"token": self.token}}],
               "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "farm-driver",
                                                             "namespace": self.namespace}}]}
        self.kubeconfig.write_text(yaml.safe_dump(cfg))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.kubelet.close()
        loop = self._loop
        if loop is not None and self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> ApiServerEmulator:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- what tests use -------------------------------------------------------------------

    def fail(self, status: int, verb: str | None = None, resource: str | None = None, **kw: Any) -> Fault:
        """Answer the next matching request(s) with an error; see faults.Fault for the fields."""
        return self.faults.add(Fault(status, verb, resource, **kw))

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.store.list(resource, namespace)[0]

    def events_for(self, pod: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.store.list("events", namespace or self.namespace, field_selector=f"involvedObject.name={pod}")[0]

    def cut_exec_streams(self, pod: str | None = None) -> int:
        """Cut every open exec stream (of one pod) now, from the server's side; returns how many."""
        open_ = [s for s in self.exec_sessions if s.closed_by is None and (pod is None or s.pod == pod)]
        if self._loop is not None:
            for s in open_:
                self._loop.call_soon_threadsafe(s.cut, "test")
        return len(open_)

    # --- HTTP -----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        rec = self.log.add(RequestRecord(now(), request.method, request.path, "", "", None, None,
                                         dict(request.query)))
        try:
            resp = await self._dispatch(request, parts, rec)
        except ApiError as e:
            resp = _error_response(e)
        except json.JSONDecodeError as e:
            resp = _error_response(ApiError(400, "BadRequest", f"the request body is not JSON: {e}"))
        except Exception as e:  # an emulator bug: a test can assert there were none
            self.errors.append(f"{request.method} {request.path}: {traceback.format_exc()}")
            resp = _error_response(ApiError(500, "InternalError", f"emulator error: {e!r}"))
            if rec.resource == "pods/exec" and rec.status == 101:
                raise  # the WebSocket was already up: nothing else can be sent
        rec.status = resp.status
        return resp

    async def _dispatch(self, request: web.Request, parts: list[str], rec: RequestRecord) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")
        if parts in (["version"], ["api"], ["apis"]) or parts in (["api", "v1"], ["apis", "networking.k8s.io", "v1"]):
            rec.verb = "get"
            return web.json_response(self._discovery(parts))
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif parts[:3] == ["apis", "networking.k8s.io", "v1"]:
            group, rest = "networking.k8s.io", parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({request.path})")
        namespace: str | None = None
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource, name, sub = (rest + [None, None, None])[:3]  # type: ignore[list-item]
        if resource not in RESOURCES or GROUPS[group] != RESOURCES[resource][0] or len(rest) > 3:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({request.path})")
        if not RESOURCES[resource][2]:
            namespace = ""
        verb = self._verb(request, name, sub)
        rec.verb, rec.namespace, rec.name = verb, namespace, name
        rec.resource = f"{resource}/{sub}" if sub else resource
        fault = self.faults.take(verb, rec.resource, name)
        if fault is not None:
            rec.fault = True
            if verb == "watch" and fault.status == 410:
                return await self._watch_gone(request)
            raise fault.error()
        if sub == "exec":
            return await self._exec(request, namespace or "", name or "", rec)
        if sub is not None:
            if sub != "status" or verb != "get":
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({request.path})")
            return web.json_response(self.store.get(resource, namespace or "", name or ""))
        return await getattr(self, f"_{verb}")(request, resource, namespace, name)

    @staticmethod
    def _verb(request: web.Request, name: str | None, sub: str | None) -> str:
        if sub == "exec":
            return "connect"
        m = request.method
        if name is None:
            if m == "GET":
                return "watch" if request.query.get("watch") in ("true", "1") else "list"
            return {"POST": "create", "DELETE": "deletecollection"}.get(m, m.lower())
        return {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(m, m.lower())

    def _discovery(self, parts: list[str]) -> dict[str, Any]:
        if parts == ["version"]:
            return {"major": "1", "minor": "37", "gitVersion": "v1.37.0-emulator", "platform": "linux/amd64"}
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
        if parts == ["apis"]:
            gv = {"groupVersion": "networking.k8s.io/v1", "version": "v1"}
            return {"kind": "APIGroupList", "apiVersion": "v1",
                    "groups": [{"name": "networking.k8s.io", "versions": [gv], "preferredVersion": gv}]}
        gv = "/".join(parts[1:]) if parts[0] == "apis" else "v1"
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        res = [{"name": r, "namespaced": ns, "kind": kind, "verbs": verbs, "singularName": ""}
               for r, (v, kind, ns) in RESOURCES.items() if v == gv]
        if gv == "v1":
            res.append({"name": "pods/exec", "namespaced": True, "kind": "PodExecOptions", "verbs": ["create", "get"],
                        "singularName": ""})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        return json.loads(raw) if raw else {}

    def _need_namespace(self, namespace: str | None) -> None:
        if namespace and ("namespaces", "", namespace) not in self.store.objects:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                           {"name": namespace, "kind": "namespaces"})

    async def _create(self, request: web.Request, resource: str, namespace: str | None, _: Any) -> web.Response:
        body = await self._body(request)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, validate, resource, namespace or "", body)
        self._need_namespace(namespace)
        body.setdefault("apiVersion", RESOURCES[resource][0])
        body.setdefault("kind", RESOURCES[resource][1])
        if resource == "pods":
            body["spec"].setdefault("terminationGracePeriodSeconds", 30)
            body["spec"].setdefault("restartPolicy", "Always")
            body["spec"].setdefault("schedulerName", "default-scheduler")
            body["status"] = {"phase": "Pending", "qosClass": "Burstable"}
        obj = self.store.create(resource, namespace or "", body)
        if resource == "pods":
            self.kubelet.admit(obj)
        return web.json_response(obj, status=201)

    async def _get(self, request: web.Request, resource: str, namespace: str | None, name: str) -> web.Response:
        return web.json_response(self.store.get(resource, namespace or "", name))

    async def _list(self, request: web.Request, resource: str, namespace: str | None, _: Any) -> web.Response:
        q = request.query
        items, rv = self.store.list(resource, namespace, q.get("labelSelector"), q.get("fieldSelector"))
        return web.json_response({"kind": f"{RESOURCES[resource][1]}List", "apiVersion": RESOURCES[resource][0],
                                  "metadata": {"resourceVersion": str(rv)}, "items": items})

    async def _update(self, request: web.Request, resource: str, namespace: str | None, name: str) -> web.Response:
        body = await self._body(request)
        await asyncio.get_running_loop().run_in_executor(None, validate, resource, namespace or "", body)
        current = self.store.get(resource, namespace or "", name)
        want_rv = body.get("metadata", {}).get("resourceVersion")
        if want_rv and want_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object has '
                           "been modified; please apply your changes to the latest version and try again")
        keep = {k: current["metadata"][k] for k in ("uid", "creationTimestamp") if k in current["metadata"]}
        obj = self.store.update(resource, namespace or "", name,
                                lambda o: (o.clear(), o.update(body), o["metadata"].update(keep)))
        return web.json_response(obj)

    async def _patch(self, request: web.Request, resource: str, namespace: str | None, name: str) -> web.Response:
        patch = await self._body(request)
        if not isinstance(patch, dict):
            raise ApiError(415, "UnsupportedMediaType", "only merge and strategic-merge patches are emulated")
        merged = self.store.get(resource, namespace or "", name)
        _merge(merged, patch)
        await asyncio.get_running_loop().run_in_executor(
            None, validate, resource, namespace or "", {k: v for k, v in merged.items() if k != "status"})
        obj = self.store.update(resource, namespace or "", name, lambda o: _merge(o, patch))
        return web.json_response(obj)

    async def _delete(self, request: web.Request, resource: str, namespace: str | None, name: str) -> web.Response:
        body = await self._body(request)
        grace = request.query.get("gracePeriodSeconds",
                                  body.get("gracePeriodSeconds") if isinstance(body, dict) else None)
        loop = asyncio.get_running_loop()
        if resource == "pods":
            current = self.store.get("pods", namespace or "", name)
            g = int(grace) if grace is not None else int(current["spec"].get("terminationGracePeriodSeconds", 30))
            obj = await loop.run_in_executor(None, self.kubelet.delete, namespace or "", name, g)
            return web.json_response(obj)
        if resource == "namespaces":
            for pod in self.store.names("pods", name):
                await loop.run_in_executor(None, self.kubelet.delete, name, pod, 0)
            for r in ("events", "networkpolicies"):
                for n in self.store.names(r, name):
                    self.store.remove(r, name, n)
        obj = self.store.remove(resource, namespace or "", name)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "details": {"name": name, "kind": resource, "uid": obj["metadata"]["uid"]}})

    async def _deletecollection(self, request: web.Request, resource: str, namespace: str | None,
                                _: Any) -> web.Response:
        items, _rv = self.store.list(resource, namespace, request.query.get("labelSelector"))
        for obj in items:
            await self._delete(request, resource, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        return web.json_response({"kind": f"{RESOURCES[resource][1]}List", "apiVersion": RESOURCES[resource][0],
                                  "metadata": {}, "items": items})

    # --- watch and exec -------------------------------------------------------------------

    async def _stream_start(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        return resp

    async def _watch_gone(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream_start(request)
        status = ApiError(410, "Expired", "too old resource version").status()
        await resp.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
        await resp.write_eof()
        return resp

    async def _watch(self, request: web.Request, resource: str, namespace: str | None, _: Any) -> web.StreamResponse:
        q = request.query
        labels_ok, fields_ok = label_matcher(q.get("labelSelector")), field_matcher(q.get("fieldSelector"))
        rv_param = q.get("resourceVersion", "")
        since = int(rv_param) if rv_param not in ("", "0") else None
        if since is not None and since < self.store.compacted_rv:
            return await self._watch_gone(request)
        watcher, backlog = self.store.subscribe(resource, since)
        resp = await self._stream_start(request)
        try:
            if since is None:  # no resourceVersion: the current state as ADDED, then changes
                items, _rv = self.store.list(resource, namespace, q.get("labelSelector"), q.get("fieldSelector"))
                for obj in items:
                    await resp.write(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
                first_rv = _rv
            else:
                first_rv = since
            timeout = float(q.get("timeoutSeconds", 1800))
            loop = asyncio.get_running_loop()
            t_end = loop.time() + timeout
            queue_backlog = list(backlog)
            while True:
                if queue_backlog:
                    ev = queue_backlog.pop(0)
                else:
                    left = t_end - loop.time()
                    if left <= 0:
                        break
                    try:
                        ev = await asyncio.wait_for(watcher.queue.get(), left)
                    except TimeoutError:
                        break
                if ev.rv <= first_rv or (namespace is not None and ev.namespace != namespace):
                    continue
                if not (labels_ok(ev.obj["metadata"].get("labels") or {}) and fields_ok(ev.obj)):
                    continue
                await resp.write(json.dumps({"type": ev.type, "object": ev.obj}).encode() + b"\n")
                first_rv = ev.rv
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.store.unsubscribe(watcher)
        try:
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp

    async def _exec(self, request: web.Request, namespace: str, name: str, rec: RequestRecord) -> web.StreamResponse:
        q = request.query
        command = q.getall("command", [])
        if not command:
            raise ApiError(400, "BadRequest", "you must specify at least 1 command")
        target = self.kubelet.exec_target(namespace, name, q.get("container", ""))
        rec.status = 101  # from here on the answer is the WebSocket
        return await serve_exec(request, name, target, command, self.exec_knobs, self.exec_sessions,
                                use_stdin=q.get("stdin") in ("true", "1"))
