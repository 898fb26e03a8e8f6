"""Template seeding in a Kubernetes user pod: the seeding container and the template volume.

Why a container of the user pod (not the hub): the student's home is a volume only the pod
mounts. The container runs the same engine as the local mode
(``python -m hub_ext.backends.local.templates_cli seed``) with the template volume (a
ReadWriteMany PVC, :attr:`ClasshubTemplates.volume_claim`) mounted read-only and the home
volume read-write:

- templates up to :attr:`ClasshubTemplates.sidecar_threshold` bytes are copied by an *init
  container*: JupyterLab opens with every file in place;
- larger ones by a *sidecar* container started next to the notebook, so JupyterLab opens while
  the copy runs (files appear as they are written, each one whole); the sidecar then waits idle.

The kubelet's events for the container ("Started container classhub-seed") reach the spawn
page through KubeSpawner's progress stream; the container logs one line per phase.
"""

from __future__ import annotations

from typing import Any

from hub_ext.backends.local.templates import ClasshubTemplates
from hub_ext.backends.local.templates_spawn import SeedJob

__all__ = ["SEED_CONTAINER", "TEMPLATE_VOLUME", "seed_command", "seed_pod_parts"]

SEED_CONTAINER = "classhub-seed"
TEMPLATE_VOLUME = "classhub-templates"


def seed_command(job: SeedJob, settings: ClasshubTemplates, home: str, *, sidecar: bool) -> list[str]:
    """The argv of the seeding container (every value comes from the store, not from the user)."""
    argv = [settings.seed_python, "-m", "hub_ext.backends.local.templates_cli", "seed",
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
