"""What the job service asks of a backend that runs distributed jobs, in plain data.

Why an interface of its own: the admission loop (hub_ext.service.jobs.loop) is the same in both
run modes; only where replicas run differs (processes on this machine: `local.jobs.LocalJobs`;
Kubernetes PyTorchJobs: a kubernetes backend). The loop hands a backend an admitted job as a
`Launch`, asks what its replicas do (`ReplicaStatus`), stops it and reads its logs. Every call is
idempotent, so the loop can repeat any of them after a crash: launching a job whose replicas
exist starts nothing new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hub_ext.core.admission import NodeState
from hub_ext.core.resources import ResourceVector

__all__ = ["JobBackend", "Launch", "ReplicaLaunch", "ReplicaStatus", "replica_name"]

PENDING = "pending"
RUNNING = "running"
ENDED = "ended"


def replica_name(role: str, index: int) -> str:
    """The deterministic name of a replica inside its job ("worker-1")."""
    return f"{role}-{index}"


@dataclass(frozen=True)
class ReplicaLaunch:
    """One replica to start: its rank, the node the admission core placed it on, its devices."""

    role: str
    index: int
    rank: int
    node: str
    gpu_uuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launch:
    """An admitted job as a backend starts it (all replicas together)."""

    job_id: str
    owner: str
    course: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    master_port: int
    replicas: tuple[ReplicaLaunch, ...]
    max_runtime: float
    requests: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """role -> Kubernetes resource requests of one replica (for pods)."""
    max_restarts: int = 0
    """How often a failed replica is started again."""
    pods: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """role -> what a notebook of the role's profile would get besides its requests: ``limits``,
    ``node_selector``, ``tolerations`` (roles that named a profile; Kubernetes)."""
    sandbox: Mapping[str, str] = field(default_factory=dict)
    """A grading job (issue 34): where its one-time inputs are (``folder``: local mode's private
    per-job folder; ``secret``: a Kubernetes Secret), made by the backend's `prepare_sandbox`.
    Such a job runs under neither its owner's nor the service's account, outside every home,
    with no service-account token (docs/teachers/autograding.md, "Isolation")."""

    @property
    def world_size(self) -> int:
        return len(self.replicas)


@dataclass(frozen=True)
class ReplicaStatus:
    """What one replica does now: PENDING (not started yet), RUNNING or ENDED (`exit_code`
    None when it was killed without one)."""

    state: str
    exit_code: int | None = None
    node: str = ""


class JobBackend(Protocol):
    """Runs admitted jobs. All methods may be repeated safely."""

    async def nodes(self, held: Mapping[str, Sequence[str]], other: ResourceVector | None = None,
                    running: Sequence[Launch] = ()) -> tuple[NodeState, ...]:
        """Nodes with what is free now. `held`: running job id -> devices it holds (local);
        `other`: what running jobs hold besides devices (local); `running`: the admitted jobs
        (a cluster subtracts the replicas whose pods do not exist yet)."""

    def devices_for(self, node: str, resource: str, count: int, taken: set[str],
                    product: str | None = None) -> list[str]:
        """`count` devices of `resource` on `node` not in `taken`, of GPU model `product` when
        given (local mode; [] elsewhere)."""

    async def launch(self, launch: Launch) -> None:
        """Start every replica that does not exist yet."""

    async def status(self, launch: Launch) -> dict[tuple[str, int], ReplicaStatus]:
        """(role, index) -> what that replica does."""

    async def stop(self, launch: Launch, grace: float) -> None:
        """SIGTERM (or delete) every replica, SIGKILL what is left after `grace`; returns when
        nothing of the job runs."""

    async def logs(self, launch: Launch, role: str, index: int, offset: int, limit: int) -> bytes:
        """Up to `limit` bytes of a replica's log from byte `offset` (b"" when none yet)."""

    async def prepare_sandbox(self, files: Mapping[str, bytes]) -> dict[str, str]:
        """Put a grading job's inputs (relative path -> content) where only that job's grader
        reads them; the `Launch.sandbox` that names them."""

    async def drop_sandbox(self, sandbox: Mapping[str, str]) -> None:
        """Remove what `prepare_sandbox` made (nothing when it is gone already)."""
