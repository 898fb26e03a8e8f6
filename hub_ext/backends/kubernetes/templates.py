"""Template seeding in a Kubernetes user pod: the seeding container and the template volume.

Why a container of the user pod (not the hub): the student's home is a volume only the pod
mounts. The container runs the same engine as the local mode
(``python -m hub_ext.backends.templates_cli seed``) with the template volume (a
ReadWriteMany PVC, :attr:`ClasshubTemplates.volume_claim`) mounted read-only and the home
volume read-write:

- templates up to :attr:`ClasshubTemplates.sidecar_threshold` bytes are copied by an *init
  container*: JupyterLab opens with every file in place;
- larger ones by a *sidecar* container started next to the notebook, so JupyterLab opens while
  the copy runs (files appear as they are written, each one whole); the sidecar then waits idle.

The kubelet's events for the container ("Started container classhub-seed") reach the spawn
page through KubeSpawner's progress stream; the container logs one line per phase.

Publishing writes the volume through a short-lived pod (:func:`publish_with_pod`): the service
checks the upload or the teacher's folder first (limits, names, links), then the pod, which
mounts the volume read-write, fetches that checked tree from the service with a one-time token,
unpacks it again with the same checks, and moves it into place only if its manifest is exactly
the one the service found. No user pod ever mounts the volume writable.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

from hub_ext.backends.templates import ClasshubTemplates
from hub_ext.backends.templates_spawn import SeedJob

__all__ = ["SEED_CONTAINER", "TEMPLATE_VOLUME", "PublishFailed", "publish_with_pod", "publisher_pod",
           "seed_command", "seed_pod_parts"]

SEED_CONTAINER = "classhub-seed"
TEMPLATE_VOLUME = "classhub-templates"


def seed_command(job: SeedJob, settings: ClasshubTemplates, home: str, *, sidecar: bool) -> list[str]:
    """The argv of the seeding container (every value comes from the store, not from the user)."""
    argv = [settings.seed_python, "-m", "hub_ext.backends.templates_cli", "seed",
            "--root", settings.mount_path, "--location", job.location,
            "--manifest-sha256", job.manifest_sha256, "--home", home,
            "--course", job.course, "--name", job.name, "--version", str(job.version),
            "--max-files", str(settings.max_files), "--max-bytes", str(settings.max_bytes)]
    if job.restore_deleted:
        argv.append("--restore-deleted")
    if job.only_if_from:
        argv += ["--only-if-from", job.only_if_from]
    if sidecar:
        argv.append("--then-wait")
    return argv


def seed_pod_parts(job: SeedJob, settings: ClasshubTemplates, *, image: str, home_volume: str,
                   home: str, uid: int | None, gid: int | None,
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(init containers, extra containers, volume) that seed ``job`` into the pod's home.

    One of the two container lists holds the seeding container, chosen by the template's size.
    """
    sidecar = job.bytes > settings.sidecar_threshold
    container: dict[str, Any] = {
        "name": SEED_CONTAINER,
        "image": settings.seed_image or image,
        "command": seed_command(job, settings, home, sidecar=sidecar),
        "volumeMounts": [
            {"name": TEMPLATE_VOLUME, "mountPath": settings.mount_path, "readOnly": True},
            {"name": home_volume, "mountPath": home},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    }
    security: dict[str, Any] = {"allowPrivilegeEscalation": False}
    if uid is not None:
        security["runAsUser"] = uid
    if gid is not None:
        security["runAsGroup"] = gid
    container["securityContext"] = security
    volume = {"name": TEMPLATE_VOLUME,
              "persistentVolumeClaim": {"claimName": settings.volume_claim, "readOnly": True}}
    return ([], [container], volume) if sidecar else ([container], [], volume)


# ---------------------------------------------------------------------------------------------
# Publishing: a short-lived pod writes the version onto the template volume


class PublishFailed(RuntimeError):
    """The publisher pod did not store the version; the message says why (its log's last line)."""


def publisher_pod(name: str, settings: ClasshubTemplates, *, url: str, token: str, location: str,
                  digest: str) -> dict[str, Any]:
    """The pod that stores one checked upload as a version (``templates_cli install``)."""
    if not settings.publisher_image:
        raise PublishFailed("ClasshubTemplates.publisher_image is not set: it names an image with "
                            "classhub installed (e.g. the hub image) for the publisher pod")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/name": "classhub-template-publisher", "app.kubernetes.io/part-of": "classhub",
            # z2jh's network policy lets pods with this label reach the hub pod (the service).
            "hub.jupyter.org/network-access-hub": "true"}},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": int(settings.publish_timeout),
            "containers": [{
                "name": "publish",
                "image": settings.publisher_image,
                "command": [settings.seed_python, "-m", "hub_ext.backends.templates_cli", "install",
                            "--url", url, "--root", settings.mount_path, "--location", location,
                            "--manifest-sha256", digest, "--max-files", str(settings.max_files),
                            "--max-bytes", str(settings.max_bytes)],
                "env": [{"name": "CLASSHUB_UPLOAD_TOKEN", "value": token}],
                "volumeMounts": [{"name": TEMPLATE_VOLUME, "mountPath": settings.mount_path}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False},
            }],
            "volumes": [{"name": TEMPLATE_VOLUME,
                         "persistentVolumeClaim": {"claimName": settings.volume_claim}}],
        },
    }


async def publish_with_pod(api: Any, settings: ClasshubTemplates, *, url: str, token: str,
                           location: str, digest: str) -> None:
    """Run the publisher pod to completion; :class:`PublishFailed` with its reason otherwise.

    The pod is deleted afterwards whatever happened (it holds a one-time token only).
    """
    name = f"classhub-publish-{secrets.token_hex(5)}"
    namespace = settings.namespace
    await api.create_namespaced_pod(namespace, publisher_pod(
        name, settings, url=url, token=token, location=location, digest=digest))
    try:
        deadline = asyncio.get_running_loop().time() + settings.publish_timeout
        while True:
            pod = await api.read_namespaced_pod(name, namespace)
            phase = pod.status.phase if pod.status else None
            if phase == "Succeeded":
                return
            if phase == "Failed":
                try:  # the reason is the log's last line (needs pods/log; else the pod's status)
                    log = str(await api.read_namespaced_pod_log(name, namespace))
                except Exception:
                    log = (pod.status.message or pod.status.reason or "") if pod.status else ""
                last = [line for line in log.splitlines() if line.strip()][-1:] or ["it exited with an error"]
                raise PublishFailed(last[0].removeprefix("classhub: "))
            if asyncio.get_running_loop().time() > deadline:
                raise PublishFailed(f"the publisher pod did not finish in {settings.publish_timeout:.0f}s "
                                    f"(phase {phase})")
            await asyncio.sleep(0.5)
    finally:
        with contextlib.suppress(Exception):
            await api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
