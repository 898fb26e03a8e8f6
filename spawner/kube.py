"""ClasshubKubeSpawner: KubeSpawner that tells a student why a server did not start.

What it adds to KubeSpawner, and why:
- a home volume per user by default (``storage_pvc_ensure`` with ``storage_capacity`` 10Gi,
  mounted at ``home_mount_path``), so work survives a server restart;
- scheduler refusals as sentences: a ``FailedScheduling`` event on the spawn page becomes "No
  node has a free nvidia.com/gpu right now (...). Try again later or pick another profile."
  (translated by ``hub_ext.core.scheduling``);
- a spawn that cannot start ends *before* the hub's ``start_timeout`` with that reason (not the
  hub's generic timeout), and takes back what this attempt made: its pod, and its PVC when this
  attempt created it (a PVC that existed before holds the student's files and is kept);
- API failures never reach the student as a traceback: transient 429/5xx are retried with
  backoff (honouring Retry-After) within ``k8s_api_request_retry_timeout``; 403/404/422 become a
  sentence saying what to do;
- reflectors that died (failed first list, watch that gave up) are restarted on the next
  spawn or poll instead of failing every later spawn;
- a server is reported ready the moment the pod watch sees its pod run, not at KubeSpawner's
  next poll of its reflector (waits of 0.2 s, 0.4 s, 0.8 s, ...; `_start_and_notice_running`).
The spawn path makes the same API calls as KubeSpawner's; the additions are bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

from jupyterhub.utils import exponential_backoff, maybe_future
from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner import KubeSpawner
from tornado import web
from traitlets import Float, Instance, Unicode, default

from hub_ext import store
from hub_ext.backends.coursedata import ClasshubCourseData, pod_volumes
from hub_ext.backends.kubernetes import servers
from hub_ext.backends.kubernetes.informer import live_capacity, mark_failure_seen
from hub_ext.backends.kubernetes.labels import HOME_VOLUME_ANNOTATION
from hub_ext.backends.kubernetes.reflectors import WakingPodReflector, waking
from hub_ext.backends.kubernetes.servers import ApiFailure
from hub_ext.backends.kubernetes.templates import seed_pod_parts
from hub_ext.backends.templates import ClasshubTemplates
from hub_ext.backends.templates_spawn import SeedJob, record_seeded
from hub_ext.core.capacity import CapacitySnapshot
from hub_ext.core.profiles import Profile, Room, Selection, pod_settings, room_in_cluster
from hub_ext.core.scheduling import api_error_message, unschedulable_message
from spawner.profiles import ProfilesMixin

try:  # JupyterHub >= 6: logged without a traceback, counted by reason in the metrics
    from jupyterhub.spawner import SpawnException as _SpawnError
except ImportError:  # pragma: no cover - JupyterHub 5
    class _SpawnError(web.HTTPError):  # type: ignore[no-redef]
        def __init__(self, message: str, *, reason: str, log_message: str = "") -> None:
            super().__init__(400, log_message or message, reason=reason)
            self.message = message


def spawn_error(message: str, reason: str, log_message: str = "") -> web.HTTPError:
    """The exception ``start`` raises: the hub shows ``message`` as is ("Spawn failed: ...")."""
    error = _SpawnError(message, reason=reason, log_message=log_message or message)
    error.jupyterhub_message = message  # read by the hub's progress API and error page
    return error


_CLAIM_REFUSAL = re.compile(r'persistentvolumeclaim "([^"]+)" (not found|is being deleted)')


def scheduling_sentence(message: str) -> str:
    """A FailedScheduling message in words. The scheduler's volume check refuses a pod before any
    node is considered (a claim not bound yet, missing, or being deleted); those refusals name no
    node reasons, so they get their own sentence saying which volume and what to do."""
    if "unbound immediate PersistentVolumeClaims" in (message or ""):
        return ("Your storage volume is not ready yet: the cluster is still provisioning it. If "
                "your server does not start, try again in a minute.")
    refusal = _CLAIM_REFUSAL.search(message or "")
    if refusal is None:
        return unschedulable_message(message)
    claim, state = refusal.groups()
    if state == "is being deleted":
        return (f"The storage volume {claim} is still being deleted, so your server cannot start "
                "yet. Try again in a minute.")
    return (f"The storage volume {claim} that this profile mounts does not exist, so your server "
            "cannot start. Please tell the hub admin.")


#: Settings KubeSpawner accepts as a list or as a dict of named items (z2jh sets dicts).
_MERGEABLE = frozenset({"tolerations", "volumes", "volume_mounts", "init_containers", "extra_containers"})


class ReflectorStartCancelled(RuntimeError):
    """A shared reflector whose first list was cancelled (see `_start_reflector`)."""


class ClasshubKubeSpawner(ProfilesMixin, KubeSpawner):
    """KubeSpawner, as selected by ``classhub.configure(c, mode="kubernetes")``."""

    home_mount_path = Unicode(
        "/home/jovyan",
        config=True,
        help="""Where the user's home volume (their PVC) is mounted in the server's container.

        Used by the default ``volume_mounts``; the default images keep notebooks under
        /home/jovyan. Ignored when ``volume_mounts`` is configured explicitly.
        """,
    )

    start_margin = Float(
        3.0,
        config=True,
        help="""Seconds before ``start_timeout`` at which a spawn that has not started gives up.

        The spawner then reports why (e.g. the scheduler's reason as a sentence) and removes the
        pod and the PVC this attempt created, before the hub's own timeout would replace that
        reason with a generic "did not start in time".
        """,
    )

    @default("storage_pvc_ensure")
    def _default_storage_pvc_ensure(self) -> bool:
        return True

    @default("storage_capacity")
    def _default_storage_capacity(self) -> str:
        return "10Gi"

    @default("volumes")
    def _default_volumes(self) -> list[dict[str, Any]]:
        if not self.storage_pvc_ensure:
            return []
        return [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]

    @default("volume_mounts")
    def _default_volume_mounts(self) -> list[dict[str, Any]]:
        if not self.storage_pvc_ensure:
            return []
        return [{"name": "home", "mountPath": self.home_mount_path}]

    # ------------------------------------------------------------------ profiles
    def classhub_profiles_enabled(self) -> bool:
        """classhub's ``profiles`` drive the form unless only KubeSpawner's ``profile_list`` is set."""
        return bool(self.profiles) or not self.profile_list

    async def capacity_view(self) -> CapacitySnapshot | None:
        """The cluster's capacity now, from the hub's live view (a watch on every pod), so "N free
        now" is true when the page loads and a start costs no list of the cluster's pods."""
        try:
            return await live_capacity(self.api).snapshot()
        except Exception as e:  # the form still works; counts show as unknown
            self.log.warning("classhub: no capacity snapshot for %s's form: %r", self._log_name, e)
            return None

    def free_count(self, profile: Profile, view: CapacitySnapshot | None) -> int | None:
        if view is None:
            return None
        settings = pod_settings(profile)
        return view.max_fit(profile.request, settings["node_selector"], settings["tolerations"])

    def room_when_empty(self, profile: Profile, view: CapacitySnapshot | None) -> Room | None:
        """How many would fit on the cluster's nodes with no pod running, and what is short."""
        return None if view is None else room_in_cluster(profile, view)

    _base: dict[str, Any] | None = None

    async def apply_selection(self, selection: Selection) -> None:
        """Set the pod's resources, scheduling and image from the profile, over the admin's base.

        The admin's own settings (node selector, tolerations, volumes, extra resources) are kept
        and the profile's are added; switching profiles never accumulates old ones.
        """
        keys = ("node_selector", "tolerations", "volumes", "volume_mounts", "image", "environment",
                "extra_resource_guarantees", "extra_resource_limits", "init_containers", "extra_containers",
                "cmd")
        if self._base is None:
            # KubeSpawner (and z2jh, always) may give these as dicts keyed for merging; the pod
            # gets their values in key order, which is also what the profile's items extend.
            self._base = {k: self._sorted_dict_values(getattr(self, k)) if k in _MERGEABLE
                          else getattr(self, k) for k in keys}
        base = self._base
        settings = pod_settings(selection.profile)
        self.cpu_guarantee = float(selection.cpu.guarantee)
        self.cpu_limit = float(selection.cpu.limit)
        self.mem_guarantee = int(selection.memory.guarantee)
        self.mem_limit = int(selection.memory.limit)
        self.extra_resource_guarantees = {**base["extra_resource_guarantees"], **settings["resources"]}
        self.extra_resource_limits = {**base["extra_resource_limits"], **settings["resources"]}
        self.node_selector = {**base["node_selector"], **settings["node_selector"]}
        self.tolerations = [*base["tolerations"], *settings["tolerations"]]
        # the courses' data (docs/admins/course-data.md): read-only mounts for students
        data_volumes, data_mounts = pod_volumes(self.course_data, self.course_roles or {})
        self.volumes = [*base["volumes"], *settings["volumes"], *data_volumes]
        self.volume_mounts = [*base["volume_mounts"], *settings["volume_mounts"], *data_mounts]
        self.environment = {**base["environment"], **settings["environment"]}
        self.image = selection.image or base["image"]
        self.init_containers, self.extra_containers = base["init_containers"], base["extra_containers"]
        self.cmd = base["cmd"]
        if self.template_job is not None:
            self._add_seeding(self.template_job)

    course_data = Instance(ClasshubCourseData, help="Course data volumes (c.ClasshubCourseData.*).")

    @default("course_data")
    def _default_course_data(self) -> ClasshubCourseData:
        return ClasshubCourseData(parent=self)

    # ------------------------------------------------------------------ templates (issue 6)
    templates = Instance(ClasshubTemplates, help="Template settings (c.ClasshubTemplates.*).")

    @default("templates")
    def _default_templates(self) -> ClasshubTemplates:
        return ClasshubTemplates(parent=self)

    def _home_mount(self) -> dict[str, Any] | None:
        """The volume mount at ``home_mount_path`` as configured (not expanded), or None."""
        return next((dict(m) for m in self._sorted_dict_values(self.volume_mounts)
                     if m.get("mountPath") == self.home_mount_path), None)

    async def home_volume(self) -> dict[str, Any] | None:
        """The user's home as their notebook pod mounts it, for other pods that must see the
        same files (a job's replicas, hub_ext.backends.kubernetes.jobs): the namespace, the
        volume and its mount after KubeSpawner's own expansion (``{username}``, ``{pvc_name}``,
        ``{user_server}``, escaped by its slug scheme exactly as in the notebook's pod), and the
        ``uid``, ``gid``, ``fs_gid`` and ``supplemental_gids`` the notebook runs with. None when
        no volume is mounted at the home."""
        mount = self._home_mount()
        volume = mount and next((dict(v) for v in self._sorted_dict_values(self.volumes)
                                 if v.get("name") == mount.get("name")), None)
        if not volume:
            return None
        ids = {}
        for key in ("uid", "gid", "fs_gid", "supplemental_gids"):
            value = getattr(self, key)
            ids[key] = await maybe_future(value(self)) if callable(value) else value
        return {"namespace": self.namespace, "volume": self._expand_all(volume),
                "mount": self._expand_all(mount), **ids}

    def _add_seeding(self, job: SeedJob) -> None:
        """Seed the home in the pod: an init container (small templates) or a sidecar (large)."""
        home_volume = (self._home_mount() or {}).get("name")
        if home_volume is None:
            raise web.HTTPError(500, "Cannot start from a template: no volume is mounted at the home "
                                     f"({self.home_mount_path}); ask an admin to check home_mount_path.")
        init, extra, volume = seed_pod_parts(
            job, self.templates, image=self.image, home_volume=home_volume,
            home=self._expand_user_properties(self.home_mount_path),
            uid=self.uid if isinstance(self.uid, int) else None,
            gid=self.gid if isinstance(self.gid, int) else None)
        self.init_containers = [*self.init_containers, *init]
        self.extra_containers = [*self.extra_containers, *extra]
        self.volumes = [*self.volumes, volume]
        if job.start_command:
            self.cmd = list(job.start_command)

    # per-attempt bookkeeping
    _created_pvc = False  # this attempt created the PVC (delete it if the attempt fails)
    _discard_pvc = False  # a failed attempt's PVC still has to be deleted (by stop)
    _last_transient: tuple[int | None, str] | None = None  # (status, object) of the last retry
    _created_pod_uid: asyncio.Future[str | None] | None = None  # the uid of the pod this attempt made

    # ------------------------------------------------------------------ spawn
    async def _start(self) -> str:
        self._created_pvc = False
        self._last_transient = None
        budget = max(self.start_timeout - self.start_margin, 1.0)
        try:
            url = await asyncio.wait_for(self._start_and_notice_running(), budget)
            if self.template_job is not None and self.classhub_db_url:  # what on_start re-seeds next
                await store.in_thread(record_seeded, self.classhub_db_url, self.user.name,
                                        self.template_job, None)
            return url
        except asyncio.CancelledError:
            # The hub gave up first: stop(), which the hub calls next, removes our PVC.
            self._discard_pvc = self._discard_pvc or self._created_pvc
            raise
        except Exception as exc:
            message, reason = self._explain(exc)
            if message is None:
                await self._clean_up_attempt()
                raise
            self.log.warning("Spawn of %s failed (%s, %r): %s", self._log_name, reason, exc, message)
            await self._clean_up_attempt()
            raise spawn_error(message, reason) from None

    async def _start_and_notice_running(self) -> str:
        """KubeSpawner's start, answered the moment the pod reflector's watch sees the new pod run.

        KubeSpawner notices a running pod by polling its reflector with exponential backoff
        (0.2 s, 0.4 s, 0.8 s, ...), so a server ready just after a poll was reported up to a
        whole interval late (hub_ext/backends/kubernetes/reflectors.py). This waits on the watch
        for the pod this attempt created (its uid) beside KubeSpawner's own start, and ends that
        start's polling once the pod runs. Where KubeSpawner still has work after the pod exists
        (internal SSL, a per-pod Service, ``after_pod_created_hook``), its own start decides."""
        if self.internal_ssl or self.services_enabled or self.after_pod_created_hook:
            return await super()._start()
        self._created_pod_uid = asyncio.get_running_loop().create_future()
        start = asyncio.ensure_future(super()._start())
        running = asyncio.ensure_future(self._created_pod_running(self._created_pod_uid))
        try:
            await asyncio.wait({start, running}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not start.done() and not running.done():  # this wait was cancelled
                start.cancel()
            if not running.done():
                running.cancel()
        if start.done() or running.cancelled() or running.exception() is not None:
            return await start  # (a failed watch wait: KubeSpawner's poll still decides)
        if running.result() is None:
            return await start
        pod = running.result()
        start.cancel()  # only its poll for the running pod is left (checked above: no SSL etc.)
        with contextlib.suppress(asyncio.CancelledError):
            await start
        self.pod_id = pod["metadata"]["uid"]
        return self._get_pod_url(pod)

    async def _created_pod_running(self, created: asyncio.Future[str | None]) -> dict[str, Any] | None:
        """The pod this attempt created, once the reflector has it running; None when the pod
        reflector cannot wake waiters or the create request did not report a uid."""
        uid = await created
        reflector = self.pod_reflector
        if uid is None or not isinstance(reflector, WakingPodReflector):
            return None
        return await reflector.until(
            f"{self.namespace}/{self.pod_name}",
            lambda pod: (pod is not None and pod["metadata"].get("uid") == uid
                         and bool(self.is_pod_running(pod))))

    def _explain(self, exc: Exception) -> tuple[str | None, str]:
        """(sentence for the student, reason label) for a failed start; None: not ours to word."""
        if isinstance(exc, _SpawnError):
            return getattr(exc, "jupyterhub_message", None) or exc.message, exc.reason
        if isinstance(exc, ApiFailure):
            return api_error_message(exc.status, exc.message, exc.what), f"api-{exc.status}"
        if isinstance(exc, ApiException):
            return api_error_message(exc.status, str(exc.reason or ""), "pod"), f"api-{exc.status}"
        if isinstance(exc, asyncio.TimeoutError):
            return self._why_not_started()
        if self._broken_reflectors():
            # KubeSpawner's first list failed (its error handling then fails too); the next
            # spawn restarts the reflector.
            return api_error_message(None, "the cluster's API server did not answer", "pod"), "reflector"
        return None, "error"

    def _why_not_started(self) -> tuple[str, str]:
        """Read the pod the reflector holds to say why the deadline passed."""
        seconds = int(self.start_timeout)
        pods = self.pod_reflector.pods if self.pod_reflector else {}
        pod = pods.get(f"{self.namespace}/{self.pod_name}")
        if pod is None:
            if self._last_transient:
                status, what = self._last_transient
                return api_error_message(status, "", what), "api-retries"
            return (f"Your server was not created within {seconds} seconds. Try again in a minute.",
                    "timeout")
        status = pod.get("status") or {}
        for condition in status.get("conditions") or ():
            if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                    and condition.get("reason") == "Unschedulable"):
                return scheduling_sentence(condition.get("message") or ""), "unschedulable"
        for container in status.get("containerStatuses") or ():
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") and waiting["reason"] != "ContainerCreating":
                detail = ": ".join(p for p in (waiting["reason"], waiting.get("message")) if p)
                return (f"Your server did not start within {seconds} seconds ({detail}). Try again, "
                        "and tell your teacher if this profile keeps failing.", "container")
        return (f"Your server did not become ready within {seconds} seconds. Try again in a "
                "minute.", "timeout")

    async def _clean_up_attempt(self) -> None:
        """Delete this attempt's pod, and its PVC if the attempt created it (bounded in time)."""
        self._discard_pvc = self._created_pvc
        try:
            await asyncio.wait_for(self._delete_attempt_objects(), max(self.start_margin * 0.8, 0.5))
        except (asyncio.TimeoutError, ApiFailure, ApiException) as exc:
            self.log.warning("Cleanup of %s's failed spawn unfinished (%r); stop() retries",
                             self._log_name, exc)

    async def _delete_attempt_objects(self) -> None:
        await exponential_backoff(
            lambda: self._delete_once("pod", self.pod_name, grace_seconds=0),
            f"Could not delete pod {self.pod_name}", timeout=self.k8s_api_request_retry_timeout,
        )
        if self._discard_pvc:
            await self._delete_pvc()

    async def _delete_once(self, kind: str, name: str, grace_seconds: int | None = None) -> bool:
        attempt = await servers.delete(self.api, kind, self.namespace, name,
                                       self.k8s_api_request_timeout, grace_seconds)
        return attempt.done

    async def _delete_pvc(self) -> None:
        await exponential_backoff(
            lambda: self._delete_once("persistent_volume_claim", self.pvc_name),
            f"Could not delete pvc {self.pvc_name}", timeout=self.k8s_api_request_retry_timeout,
        )
        self.log.info("Deleted PVC %s created by %s's failed spawn", self.pvc_name, self._log_name)
        self._discard_pvc = self._created_pvc = False
        self._pvc_exists = False  # not remembered in state: the next spawn creates it again

    # ------------------------------------------------------------------ API calls
    def _note(self, attempt: servers.Attempt, what: str) -> bool:
        if not attempt.done:
            self._last_transient = (attempt.status, what)
            self.log.warning("Retrying %s create for %s after %s", what, self._log_name,
                             attempt.status or "a request timeout")
        return attempt.done

    async def _make_create_pvc_request(self, pvc: Any, request_timeout: float) -> bool:
        attempt = await servers.create(self.api, "persistent_volume_claim", self.namespace, pvc,
                                       request_timeout)
        self._created_pvc = self._created_pvc or attempt.created
        return self._note(attempt, "pvc")

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> bool:
        home = (self._home_mount() or {}).get("name")
        if home:  # which volume is the home: the course page's home sizes read it (homes.py)
            pod.metadata.annotations = {**(pod.metadata.annotations or {}),
                                        HOME_VOLUME_ANNOTATION: self._expand_user_properties(home)}
        attempt = await servers.create(self.api, "pod", self.namespace, pod, request_timeout)
        created = self._created_pod_uid
        if attempt.created and created is not None and not created.done():
            created.set_result(attempt.uid)  # `_start_and_notice_running` waits for this pod
        if attempt.done and not attempt.created:
            # 409: a pod of an earlier server is still in the way; remove it and try again.
            self.log.info("Found existing pod %s, deleting it before starting again", self.pod_name)
            await KubeSpawner.stop(self, True)
            return False
        return self._note(attempt, "pod")

    # ------------------------------------------------------------------ progress, poll, stop
    async def progress(self):
        """KubeSpawner's event stream, with scheduler refusals worded for students."""
        try:
            async for event in super().progress():
                raw = event.get("raw_event") or {}
                if raw.get("reason") == "FailedScheduling":
                    event = {**event, "message": scheduling_sentence(raw.get("message") or "")}
                yield event
        except ReflectorStartCancelled:
            # The events reflector went down with a failed spawn (`_start_reflector`): no events
            # to report. Ending the stream lets the hub send the spawn's own outcome.
            return

    async def poll(self) -> int | None:
        await self._revive_reflectors()
        return await super().poll()

    async def load_user_options(self) -> None:
        """KubeSpawner's ``profile_list`` handling (unless classhub's profiles already applied the
        options in ``apply_user_options``), then revive the reflectors of the chosen namespace."""
        if not self.classhub_profiles_enabled():
            await super().load_user_options()
        await self._revive_reflectors()

    async def stop(self, now: bool = False) -> None:
        await self._revive_reflectors()
        await super().stop(now)
        if self._discard_pvc:
            await self._delete_pvc()

    async def _start_reflector(self, kind: str, reflector_class: Any, replace: bool = False,
                               **kwargs: Any) -> Any:
        """KubeSpawner's, except that a reflector whose start is cancelled fails its first load.

        ``_start`` starts the pods and events reflectors together and cancels one when the other
        fails. Cancelled during its first list, a reflector stays in the shared ``reflectors``
        with a first load that never resolves (``ResourceReflector.start`` only fails it on an
        ``Exception``), and every later spawn in its namespace awaits it until the start
        timeout. Failed, it wakes those spawns and ``_revive_reflectors`` replaces it."""
        created = []

        def make(**options: Any) -> Any:
            created.append(waking(reflector_class)(**options))
            return created[-1]

        try:
            return await super()._start_reflector(kind, make, replace=replace, **kwargs)
        except asyncio.CancelledError:
            if created and not created[0].first_load_future.done():
                created[0].first_load_future.set_exception(ReflectorStartCancelled(
                    f"the start of the {kind} reflector was cancelled"))
                mark_failure_seen(created[0].first_load_future)  # waiters still get it
            raise

    def _broken_reflectors(self) -> list[str]:
        """Kinds ("pods", "events") whose shared reflector's first list failed or watch gave up."""
        broken = []
        for kind in ("pods", "events"):
            reflector = self.reflectors.get(self._get_reflector_key(kind))
            if reflector is None:
                continue
            first = reflector.first_load_future
            failed = first.done() and (first.cancelled() or first.exception() is not None)
            watch = reflector.watch_task
            if failed or (watch is not None and watch.done()):
                broken.append(kind)
        return broken

    async def _revive_reflectors(self) -> None:
        """Restart broken reflectors; KubeSpawner would keep using them and fail every spawn."""
        for kind in self._broken_reflectors():
            self.log.warning("Restarting the %s reflector, which had stopped", kind)
            start = self._start_watching_pods if kind == "pods" else self._start_watching_events
            await start(replace=True)


__all__ = ["ClasshubKubeSpawner", "spawn_error"]
