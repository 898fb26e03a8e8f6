"""Create and delete the objects of a user's server, sorting every failure for the spawner.

Why: KubeSpawner re-raises any API error other than 409 from a create, so one 500 or 429 from a
busy API server fails a student's spawn with a traceback. Here each call ends in one of three
ways the spawner can act on: done (created, or already there), retry (a transient 429/5xx or a
request timeout, after honouring Retry-After), or :class:`ApiFailure` with the status and the
API server's message, which core turns into a sentence.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from hub_ext.core.scheduling import is_transient, retry_delay

#: Longest wait a Retry-After header may impose on one attempt (the spawn has a deadline).
MAX_RETRY_AFTER = 5.0


class ApiFailure(Exception):
    """A Kubernetes API call failed in a way retrying will not fix (403, 404, 422, ...)."""

    def __init__(self, status: int | None, message: str, what: str) -> None:
        super().__init__(f"{what}: {status} {message}")
        self.status = status
        self.message = message
        self.what = what


@dataclass(frozen=True)
class Attempt:
    """How one create/delete attempt ended.

    ``done``: nothing more to do; ``created``: this attempt made the object (False when it
    already existed or is gone already); ``status``: the transient status that asks for a retry;
    ``uid``: the uid of the object this attempt created (tells it apart from an older one of the
    same name that a watch may still report).
    """

    done: bool
    created: bool = False
    status: int | None = None
    uid: str | None = None


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return str(body.get("message") or exc.reason or "")


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def _transient(exc: ApiException) -> Attempt:
    """Wait out Retry-After (429) before letting the caller's backoff loop try again."""
    delay = _retry_after(exc)
    if delay:
        await asyncio.sleep(retry_delay(0, delay, cap=MAX_RETRY_AFTER))
    return Attempt(done=False, status=exc.status)


async def create(api: Any, kind: str, namespace: str, body: Any, timeout: float) -> Attempt:
    """Create a namespaced ``kind`` ("pod" or "persistent_volume_claim").

    409 means it exists: done, not created, except for a PVC that is being deleted: the
    pvc-protection finalizer keeps an earlier attempt's claim Terminating until its pod is gone,
    and a pod mounting it would stay Pending on a claim about to vanish, so that 409 is retried
    until the old claim is gone and a new one can be made (also when it vanishes between the 409
    and the read). A 403 on a PVC that exists anyway (a
    quota counts the claim before noticing it exists) is also done, as KubeSpawner treats it.
    """
    call = getattr(api, f"create_namespaced_{kind}")
    try:
        made = await asyncio.wait_for(call(namespace, body), timeout)
    except asyncio.TimeoutError:
        return Attempt(done=False)
    except ApiException as exc:
        name = body["metadata"]["name"] if isinstance(body, dict) else body.metadata.name
        if exc.status == 409:
            if kind == "persistent_volume_claim" and not await standing(api, kind, namespace, name, timeout):
                return Attempt(done=False, status=409)
            return Attempt(done=True)
        if is_transient(exc.status):
            return await _transient(exc)
        if (exc.status == 403 and kind == "persistent_volume_claim"
                and await exists(api, kind, namespace, name, timeout)):
            return Attempt(done=True)
        raise ApiFailure(exc.status, _status_message(exc), _what(kind)) from None
    return Attempt(done=True, created=True, uid=getattr(getattr(made, "metadata", None), "uid", None))


async def exists(api: Any, kind: str, namespace: str, name: str, timeout: float) -> bool:
    """True when the object can be read; False on 404 (other errors propagate)."""
    try:
        await asyncio.wait_for(getattr(api, f"read_namespaced_{kind}")(name, namespace), timeout)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def standing(api: Any, kind: str, namespace: str, name: str, timeout: float) -> bool:
    """True when the object exists and is not being deleted (no deletionTimestamp).

    False also on 404: a claim that answered 409 to a create and is gone by the time it is read
    finished its deletion in between, and must be made again, not taken as there."""
    try:
        obj = await asyncio.wait_for(getattr(api, f"read_namespaced_{kind}")(name, namespace), timeout)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return getattr(obj.metadata, "deletion_timestamp", None) is None


async def delete(api: Any, kind: str, namespace: str, name: str, timeout: float,
                 grace_seconds: int | None = None) -> Attempt:
    """Delete a namespaced object; 404 counts as done (it is gone either way)."""
    kwargs: dict[str, Any] = {}
    if grace_seconds is not None:
        kwargs["grace_period_seconds"] = grace_seconds
    try:
        await asyncio.wait_for(getattr(api, f"delete_namespaced_{kind}")(name, namespace, **kwargs),
                               timeout)
    except asyncio.TimeoutError:
        return Attempt(done=False)
    except ApiException as exc:
        if exc.status == 404:
            return Attempt(done=True)
        if is_transient(exc.status):
            return await _transient(exc)
        raise ApiFailure(exc.status, _status_message(exc), _what(kind)) from None
    return Attempt(done=True, created=False)


def _what(kind: str) -> str:
    return "pvc" if kind == "persistent_volume_claim" else kind
