"""The aiohttp application: routing, verbs, lists, watches, patches, logs, exec, faults, admin.

Every request goes through :meth:`ApiServer.handle`, which works out the Kubernetes verb,
applies injected faults, and dispatches. Failures are ``Status`` bodies (see status.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

import yaml
from aiohttp import web

from . import discovery, nodeproxy, patch, status
from .admission import admit_create
from .faults import Faults
from .kubelet import Kubelet
from .latency import Latencies
from .paths import Target, is_go_restful, parse_path, unserved_subresource
from .podexec import serve_exec
from .scheduler import Scheduler
from .selection import parse_field_selector, parse_label_selector
from .store import Store, Watcher, encode
from .table import to_table

log = logging.getLogger("kubefake")

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
}


SUBRESOURCE_METHODS = {  # the HTTP methods each subresource's routes take (see discovery.py's verbs)
    "status": {"GET", "PUT", "PATCH"},
    "log": {"GET"},
    "binding": {"POST"},
    "eviction": {"POST"},
    "exec": {"GET", "POST"},
    "finalize": {"PUT"},
}


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _verb(method: str, target: Target, query: Any) -> str:
    if method == "GET":
        if target.legacy_watch or _truthy(query.get("watch")):
            return "watch"
        return "get" if target.name else "list"
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _json(body: Any, code: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=encode(body), status=code, content_type="application/json", headers=headers)


class ApiServer:
    """HTTP front end over a :class:`Store` plus the fake scheduler and kubelet."""

    def __init__(
        self,
        store: Store,
        scheduler: Scheduler,
        kubelet: Kubelet,
        faults: Faults,
        bookmark_interval: float = 5.0,
        latencies: Latencies | None = None,
    ) -> None:
        self.store = store
        self.latencies = latencies or Latencies()
        self.scheduler = scheduler
        self.kubelet = kubelet
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.address = ""
        self.open_watches: dict[Watcher, web.Request] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path_qs) of every request, for tests

    def app(self) -> web.Application:
        """The aiohttp application (one catch-all route)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    # ----- entry point -------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Serve one request."""
        self.requests.append((request.method, request.path_qs))
        try:
            return await self._dispatch(request)
        except status.ApiError as err:
            if err.plain is not None:  # Go's http.Error: text/plain, nosniff
                return web.Response(
                    text=err.plain,
                    status=err.code,
                    content_type="text/plain",
                    charset="utf-8",
                    headers={"X-Content-Type-Options": "nosniff"},
                )
            return _json(err.body, err.code, err.headers)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # pragma: no cover - a bug in the fake should be loud but answered
            log.exception("kubefake internal error")
            return _json(status.status_body(500, "InternalError", f"Internal error occurred: {exc!r}"), 500)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path.startswith("/_kubefake"):
            return await self._admin(request, path)
        target = parse_path(self.store.registry, path)
        verb = _verb(request.method, target, request.query) if target else request.method.lower()
        latency, fault = self.faults.match(verb, path)
        if latency:
            await asyncio.sleep(latency)
        if fault is not None:
            body, headers = fault.body()
            return _json(body, fault.status, headers)
        proxied = nodeproxy.PATH.match(path)
        if proxied:  # a node's kubelet, through the API server (nodeproxy.py)
            return await nodeproxy.serve(request, self.store, self.kubelet, proxied[1], proxied[2] or "/")
        if target is None:
            return self._unrouted(request, path)
        return await self._resource(request, target, verb)

    def _unrouted(self, request: web.Request, path: str) -> web.StreamResponse:
        """Health checks and discovery documents; any other path is one the fake does not serve,
        answered 404 for every verb as kube-apiserver does (see :meth:`_not_served`)."""
        reg = self.store.registry
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        doc: dict[str, Any] | None = None
        parts = path.strip("/").split("/")
        if path == "/version":
            doc = discovery.VERSION
        elif path == "/api":
            doc = discovery.api_versions(self.address)
        elif path == "/apis":
            doc = discovery.api_group_list(reg)
        elif parts[0] == "api" and len(parts) == 2:
            doc = discovery.api_resource_list(reg, "", parts[1])
        elif parts[0] == "apis" and len(parts) == 2:
            doc = discovery.api_group(reg, parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            doc = discovery.api_resource_list(reg, parts[1], parts[2])
        if doc is None:
            raise self._not_served(path)
        if request.method != "GET":
            raise status.method_not_allowed()
        return _json(doc)

    def _not_served(self, path: str) -> status.ApiError:
        """The 404 kube-apiserver gives a path nothing serves (an unknown kind, group, version or
        subresource), whatever the verb: under a built-in group go-restful's Status with empty
        details; a custom resource's missing subresource, the CRD handler's NotFound on the object;
        anywhere else the end of the delegation chain's ``404 page not found``."""
        reg = self.store.registry
        missing_sub = unserved_subresource(reg, path)
        if missing_sub is not None:
            rtype, name = missing_sub
            return status.not_found(rtype.group, rtype.plural, name)
        if is_go_restful(reg, path):
            return status.not_served()
        return status.page_not_found()

    # ----- resources -----------------------------------------------------------------------------
    async def _resource(self, request: web.Request, t: Target, verb: str) -> web.StreamResponse:
        q = request.query
        self._check_method(request.method, t, verb)
        if t.subresource == "log":
            return await self._logs(request, t)
        if t.subresource == "exec":
            return await serve_exec(request, self.store, self.kubelet, t)
        if t.subresource in ("binding", "eviction"):
            return await self._pod_action(request, t)
        if verb == "watch":
            return await self._watch(request, t)
        if verb in ("list", "get"):
            await self._wait_fresh(q.get("resourceVersion"), q.get("resourceVersionMatch"))
        if verb == "list":
            return self._list(request, t)
        if verb == "get":
            obj = self.store.get(t.rtype, t.namespace, t.name)  # type: ignore[arg-type]
            if "as=Table" in request.headers.get("Accept", ""):
                return _json(
                    to_table(
                        t.rtype,
                        [obj],
                        {"resourceVersion": obj["metadata"]["resourceVersion"]},
                        q.get("includeObject", "Metadata"),
                    )
                )
            return _json(obj)
        if verb == "create":
            body = await self._body(request)
            self._check_kind(t, body)
            body = admit_create(self.store, t.rtype, t.namespace, body)
            return _json(self.store.create(t.rtype, t.namespace, body), 201)
        if verb == "update":
            body = await self._body(request)
            self._check_kind(t, body)
            return _json(self.store.update(t.rtype, t.namespace, t.name, body, t.subresource))  # type: ignore[arg-type]
        if verb == "patch":
            return await self._patch(request, t)
        if verb == "delete":
            return await self._delete(request, t)
        if verb == "deletecollection":
            return await self._delete_collection(request, t)
        raise status.method_not_allowed()

    @staticmethod
    def _check_method(method: str, t: Target, verb: str) -> None:
        """Refuse an HTTP method the addressed (sub)resource has no handler for, as kube-apiserver
        does: a built-in resource's go-restful routes answer 405; a custom resource's handler takes
        every method on the object (a POST to a named path creates from the body), answers PUT or
        PATCH on the collection 400 ``name must be provided`` and a verb its status subresource
        lacks 405 ``NewMethodNotSupported`` (``customresource_handler.go``)."""
        if t.legacy_watch:
            allowed = {"GET"}
        elif t.subresource:
            allowed = SUBRESOURCE_METHODS.get(t.subresource, {"GET"})
        elif t.rtype.custom:
            allowed = {"GET", "POST", "PUT", "PATCH", "DELETE"}
        else:
            allowed = {"GET", "PUT", "PATCH", "DELETE"} if t.name else {"GET", "POST", "DELETE"}
        if method in allowed:
            if t.rtype.custom and not t.subresource and not t.name and method in ("PUT", "PATCH"):
                raise status.bad_request("name must be provided")
            return
        if t.rtype.custom and method in ("POST", "DELETE"):
            raise status.method_not_supported(t.rtype.group, t.rtype.plural, verb)
        raise status.method_not_allowed()

    async def _wait_fresh(self, rv_text: str | None, match: str | None) -> None:
        """A read "not older than" a resourceVersion the server has not reached waits for it (the
        watch cache's wait), then fails 504 "Too large resource version", as kube-apiserver does."""
        if not rv_text or rv_text == "0" or match == "Exact":
            return
        try:
            wanted = int(rv_text)
        except ValueError as exc:
            raise status.bad_request(f"invalid resource version: {rv_text}") from exc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.latencies.too_large_rv_wait
        while wanted > self.store.rv and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if wanted > self.store.rv:
            raise too_large_rv(wanted, self.store.rv)

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        try:
            if "yaml" in (request.content_type or ""):
                return yaml.safe_load(raw)
            return json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise status.bad_request(f"error decoding request body: {exc}") from exc

    @staticmethod
    def _check_kind(t: Target, body: Any) -> None:
        if not isinstance(body, dict):
            raise status.bad_request("the request body must be a JSON object")
        kind = body.get("kind")
        if kind and kind != t.rtype.kind:
            raise status.bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
                f"API version "
                f"({t.rtype.api_version})"
                if body.get("apiVersion") != t.rtype.api_version
                else f"kind {kind} does not match the expected kind {t.rtype.kind}"
            )

    def _selectors(self, request: web.Request, t: Target) -> tuple[Any, Any]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), t.rtype.plural)
        return labels, fields

    def _list(self, request: web.Request, t: Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, t)
        items = self.store.list(t.rtype, t.namespace, labels, fields)
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        start = request.query.get("continue")
        if start:
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(start.encode()))["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise status.bad_request("continue key is not valid") from exc
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
        limit = int(request.query.get("limit") or 0)
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = {"rv": self.store.rv, "start": [last.get("namespace", ""), last["name"]]}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if "as=Table" in request.headers.get("Accept", ""):
            return _json(to_table(t.rtype, items, meta, request.query.get("includeObject", "Metadata")))
        if not t.rtype.custom:
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        return _json(
            {
                "kind": f"{t.rtype.kind}List",
                "apiVersion": t.rtype.api_version,
                "metadata": meta,
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        labels, fields = self._selectors(request, t)
        if t.name:
            fields = fields + parse_field_selector(f"metadata.name={t.name}", t.rtype.plural)
        rv_text = q.get("resourceVersion") or ""
        send_initial = _truthy(q.get("sendInitialEvents"))
        try:
            since = None if rv_text in ("", "0") or send_initial else int(rv_text)
        except ValueError as exc:
            raise status.bad_request(f"invalid resource version: {rv_text}") from exc
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        try:
            if since is not None and since > self.store.rv:
                await self._wait_fresh(rv_text, None)
            watcher = self.store.watch(t.rtype, t.namespace, labels, fields, since)
        except status.ApiError as err:
            await resp.prepare(request)
            await resp.write(encode({"type": "ERROR", "object": err.body}))
            await resp.write_eof()
            return resp
        initial_rv = str(self.store.rv)
        self.open_watches[watcher] = request
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        try:
            await resp.prepare(request)
            if send_initial and bookmarks:
                watcher.queue.put_nowait(("BOOKMARK", self._bookmark(t, initial_rv, initial_end=True)))
            while True:
                wait = self.bookmark_interval if bookmarks else None
                if deadline is not None:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    wait = min(wait, remaining) if wait else remaining
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), wait)
                except asyncio.TimeoutError:
                    if bookmarks:
                        await resp.write(
                            encode({"type": "BOOKMARK", "object": self._bookmark(t, str(self.store.rv))})
                        )
                    continue
                if item is None:
                    break
                kind, obj = item
                await resp.write(encode({"type": kind, "object": obj}))
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self.store.unwatch(watcher)
            self.open_watches.pop(watcher, None)
        return resp

    @staticmethod
    def _bookmark(t: Target, rv: str, initial_end: bool = False) -> dict[str, Any]:
        md: dict[str, Any] = {"resourceVersion": rv}
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": t.rtype.kind, "apiVersion": t.rtype.api_version, "metadata": md}

    def drop_watches(self, abrupt: bool = False) -> int:
        """End every open watch (cleanly, or by closing the TCP connection); returns how many."""
        dropped = list(self.open_watches.items())
        for watcher, request in dropped:
            if abrupt and request.transport is not None:
                request.transport.close()
            watcher.close()
        return len(dropped)

    async def _patch(self, request: web.Request, t: Target) -> web.StreamResponse:
        ptype = PATCH_TYPES.get(request.content_type or "")
        if ptype is None or (ptype == "strategic" and t.rtype.custom):
            raise status.ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(k for k, v in PATCH_TYPES.items() if not (t.rtype.custom and v == "strategic")),
            )
        body = await self._body(request)
        current = self.store.find(t.rtype, t.namespace, t.name)  # type: ignore[arg-type]
        if current is None:
            if ptype != "apply":
                raise status.not_found(t.rtype.group, t.rtype.plural, t.name or "")
            body.setdefault("metadata", {})["name"] = t.name
            body = admit_create(self.store, t.rtype, t.namespace, body)
            return _json(self.store.create(t.rtype, t.namespace, body), 201)
        try:
            if ptype == "json":
                patched = patch.json_patch(current, body)
            elif ptype == "strategic":
                patched = patch.strategic_merge_patch(current, body)
            else:
                if not isinstance(body, dict):
                    raise patch.PatchError("merge patch body must be an object")
                patched = patch.merge_patch(current, body)
        except patch.PatchError as exc:
            raise status.ApiError(422, "Invalid", str(exc)) from exc
        if not isinstance(patched, dict):
            raise status.bad_request("patch result is not an object")
        return _json(self.store.update(t.rtype, t.namespace, t.name, patched, t.subresource))  # type: ignore[arg-type]

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        raw = await request.read()
        if raw:
            try:
                opts = json.loads(raw) or {}
            except ValueError as exc:
                raise status.bad_request(f"error decoding DeleteOptions: {exc}") from exc
        q = request.query
        if "gracePeriodSeconds" in q:
            opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        if "propagationPolicy" in q:
            opts["propagationPolicy"] = q["propagationPolicy"]
        if "orphanDependents" in q:
            opts["orphanDependents"] = _truthy(q["orphanDependents"])
        if opts.get("orphanDependents") is not None and not opts.get("propagationPolicy"):
            opts["propagationPolicy"] = "Orphan" if opts["orphanDependents"] else "Background"
        policy = opts.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise status.invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                [
                    {
                        "reason": "FieldValueNotSupported",
                        "field": "propagationPolicy",
                        "message": f'Unsupported value: "{policy}": supported values: '
                        '"Foreground", "Background", "Orphan"',
                    }
                ],
            )
        return opts

    async def _delete(self, request: web.Request, t: Target) -> web.StreamResponse:
        opts = await self._delete_options(request)
        obj, removed = self.store.delete(
            t.rtype,
            t.namespace,
            t.name,
            opts.get("gracePeriodSeconds"),  # type: ignore[arg-type]
            opts.get("propagationPolicy"),
            opts.get("preconditions"),
        )
        if removed and not t.rtype.return_deleted:
            # the generic registry's finalizeDelete: a Success Status whose code stays 0 (left out)
            details = {
                "name": t.name,
                "group": t.rtype.group,
                "kind": t.rtype.plural,
                "uid": obj["metadata"]["uid"],
            }
            return _json(status.status_body(0, "", "", details, status="Success"))
        return _json(obj)

    async def _delete_collection(self, request: web.Request, t: Target) -> web.StreamResponse:
        opts = await self._delete_options(request)
        labels, fields = self._selectors(request, t)
        items = self.store.list(t.rtype, t.namespace, labels, fields)
        out = []
        for obj in items:
            md = obj["metadata"]
            try:
                gone, _ = self.store.delete(
                    t.rtype,
                    md.get("namespace"),
                    md["name"],
                    opts.get("gracePeriodSeconds"),
                    opts.get("propagationPolicy"),
                )
                out.append(gone)
            except status.ApiError:
                continue
        return _json(
            {
                "kind": f"{t.rtype.kind}List",
                "apiVersion": t.rtype.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": out,
            }
        )

    async def _pod_action(self, request: web.Request, t: Target) -> web.StreamResponse:
        body = await self._body(request) or {}
        pod = self.store.get(t.rtype, t.namespace, t.name)  # type: ignore[arg-type]
        if t.subresource == "binding":
            node = ((body.get("target") or {}).get("name")) if isinstance(body, dict) else None
            if not node:
                raise status.invalid(
                    "",
                    "Binding",
                    t.name or "",
                    [{"reason": "FieldValueRequired", "message": "Required value", "field": "target.name"}],
                )
            self.scheduler.bind(pod, node)
        else:
            opts = (body.get("deleteOptions") or {}) if isinstance(body, dict) else {}
            self.store.delete(
                t.rtype,
                t.namespace,
                t.name,
                opts.get("gracePeriodSeconds"),  # type: ignore[arg-type]
                opts.get("propagationPolicy"),
            )
        return _json(status.status_body(201, "", "", None, status="Success"), 201)

    # ----- logs ------------------------------------------------------------------------------------
    async def _logs(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        pod = self.store.get(t.rtype, t.namespace, t.name)  # type: ignore[arg-type]
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        init_names = [c["name"] for c in pod["spec"].get("initContainers") or []]
        container = q.get("container")
        if not container:
            if len(names) != 1:
                msg = (
                    f"a container name must be specified for pod {t.name}, choose one of: [{' '.join(names)}]"
                )
                if init_names:
                    msg += f" or one of the init containers: [{' '.join(init_names)}]"
                raise status.bad_request(msg)
            container = names[0]
        if container not in names + init_names:
            raise status.bad_request(f"container {container} is not valid for pod {t.name}")
        buf = self.kubelet.logs(pod["metadata"]["uid"], container, _truthy(q.get("previous")))
        if buf is None:
            if _truthy(q.get("previous")):
                raise status.bad_request(
                    f'previous terminated container "{container}" in pod "{t.name}" not found'
                )
            raise status.bad_request(
                f'container "{container}" in pod "{t.name}" is waiting to start: ContainerCreating'
            )
        timestamps = _truthy(q.get("timestamps"))
        start = 0
        if q.get("tailLines"):
            start = max(len(buf.lines) - int(q["tailLines"]), 0)
        if not _truthy(q.get("follow")):
            text = buf.render(start, timestamps)
            if q.get("limitBytes"):
                text = text.encode()[: int(q["limitBytes"])].decode(errors="ignore")
            return web.Response(text=text, content_type="text/plain")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            while True:
                chunk = buf.render(start, timestamps)
                start = len(buf.lines)
                if chunk:
                    await resp.write(chunk.encode())
                if buf.closed:
                    break
                await buf.wait(1.0)
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        return resp

    # ----- admin -----------------------------------------------------------------------------------
    async def _admin(self, request: web.Request, path: str) -> web.StreamResponse:
        """``/_kubefake/faults`` (GET/POST/DELETE), ``/_kubefake/drop-watches`` (POST),
        ``/_kubefake/compact`` (POST)."""
        if path == "/_kubefake/faults":
            if request.method == "GET":
                return _json(self.faults.to_json())
            if request.method == "DELETE":
                self.faults.clear()
                return _json({})
            spec = await self._body(request)
            if spec.get("latency"):
                self.faults.add_latency(
                    spec["latency"],
                    spec.get("verbs"),
                    spec.get("path", ""),
                    spec.get("count"),
                    spec.get("duration"),
                )
            else:
                self.faults.add(
                    spec.get("status", 500),
                    spec.get("verbs"),
                    spec.get("path", ""),
                    spec.get("count"),
                    spec.get("duration"),
                    spec.get("retryAfter"),
                    spec.get("message", ""),
                )
            return _json(self.faults.to_json(), 201)
        if path == "/_kubefake/drop-watches" and request.method == "POST":
            return _json({"dropped": self.drop_watches(_truthy(request.query.get("abrupt")))})
        if path == "/_kubefake/compact" and request.method == "POST":
            self.store.compact()
            return _json({"compactedResourceVersion": str(self.store.compacted_rv)})
        raise status.not_found("", "kubefake", path)


def too_large_rv(wanted: int, current: int) -> status.ApiError:
    """504 Timeout with the ``ResourceVersionTooLarge`` cause and a 1 s Retry-After, as the watch
    cache answers a read at a resourceVersion it has not seen after waiting for it."""
    return status.ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {wanted}, current: {current}",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        headers={"Retry-After": "1"},
    )
