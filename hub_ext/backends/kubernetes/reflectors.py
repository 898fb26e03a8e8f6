"""KubeSpawner's pod reflector, made to wake whoever waits for one pod to change.

Why: KubeSpawner notices that a new pod is running by polling its reflector with JupyterHub's
``exponential_backoff`` (waits of up to 0.2 s, 0.4 s, 0.8 s, ... with jitter). The reflector's watch
has the pod's change the moment the cluster reports it, but the spawn only sees it at the next
poll, so a server that became ready just after a poll is reported ready up to a whole interval
later. At a class start that delay is most of a student's wait once the pod runs (bench/storm.py).
:meth:`WakingPodReflector.until` resolves as soon as the watch writes the pod, with no polling.

The reflector writes its pods in place (``resources[key] = pod`` for each watch event, ``pop`` for
a deletion) after assigning the first list; a ``validate`` handler makes every dict it assigns a
:class:`_Noticing` one, which tells the reflector which key changed. Everything runs on the hub's
event loop (the watch is a task of that loop), so no lock is needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubespawner.reflector import ResourceReflector
from kubespawner.spawner import PodReflector
from traitlets import validate

Pod = dict[str, Any]


class _Noticing(dict):
    """The reflector's resources: a change of a key calls ``changed(key)``."""

    def __init__(self, items: Any, changed: Callable[[str], None]) -> None:
        super().__init__(items)
        self._changed = changed

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed(key)

    def pop(self, key: str, *default: Any) -> Any:
        try:
            return super().pop(key, *default)
        finally:
            self._changed(key)


class WakingPodReflector(PodReflector):
    """A :class:`~kubespawner.spawner.PodReflector` whose waiters wake on a change of their pod."""

    def __init__(self, **kwargs: Any) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        super().__init__(**kwargs)
        if not isinstance(self.resources, _Noticing):
            self.resources = self.resources  # the default value is not validated

    @validate("resources")
    def _notice_changes(self, proposal: Any) -> _Noticing:
        value = proposal["value"]
        changed = _Noticing(value, self._wake)
        for key in set(value) | set(self._waiters):  # a new list may change any pod
            self._wake(key)
        return changed

    def _wake(self, key: str) -> None:
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def until(self, key: str, condition: Callable[[Pod | None], bool]) -> Pod | None:
        """The pod ``key`` ("namespace/name") once ``condition(pod)`` holds (None: no such pod).

        Checked now and after each change the watch writes for that key; the caller bounds the
        wait (``asyncio.wait_for``), and a cancelled wait leaves no waiter behind."""
        loop = asyncio.get_running_loop()
        while True:
            pod = self.resources.get(key)
            if condition(pod):
                return pod
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.setdefault(key, set()).add(waiter)
            try:
                await waiter
            finally:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(waiter)
                    if not waiting:
                        del self._waiters[key]


def waking(reflector_class: type[ResourceReflector]) -> type[ResourceReflector]:
    """The class to build instead of ``reflector_class``: the waking one for KubeSpawner's pods."""
    return WakingPodReflector if reflector_class is PodReflector else reflector_class


__all__ = ["WakingPodReflector", "waking"]
