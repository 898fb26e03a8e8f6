"""Distributed jobs: what a student submits, checked once, in sentences a student can act on.

Why this module exists: a distributed training run is several pods that only make progress
together (a master and its workers, as OpenI's TaskSets). Gang admission (`hub_ext.core.admission`)
decides when *all* of them start; this module says what a job is and refuses, at submit, what could
never be admitted, so nothing waits in a queue forever because of a typo or an impossible shape.

The job model:
- `Role`: a name, a number of identical replicas and the per-replica request (a `ResourceVector`:
  whole GPUs, MIG slices, shared GPUs, CPU, memory), optionally pinned to one GPU model
  (`gpu_product`, the `nvidia.com/gpu.product` node label, e.g. NVIDIA-H200).
- `Job`: owner, course, priority (higher first), submit time, `max_runtime` (the course default
  when the student gives none: the admission core plans with it, and the backend stops the job
  when it is reached), its roles, the main role whose end ends the job, and a `FailurePolicy`.
- `FailurePolicy`: the job succeeds when all replicas succeed (`all`) or when the main role does
  (`main`); `tolerated_failures` failed replicas are accepted; a failed replica is restarted at
  most `max_restarts` times. Executing it is the backend's job (issue 17); it is validated here.

Times are seconds on one clock chosen by the caller (epoch seconds in the service, simulated
seconds in bench/admission.py); priorities are integers.

Pure: standard library and hub_ext.core only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hub_ext.core.resources import (
    PODS,
    ResourceVector,
    is_gpu_resource,
    sum_vectors,
)

__all__ = [
    "FINAL",
    "HOLDING",
    "MAX_REPLICAS",
    "MAX_ROLES",
    "MAX_RUNTIME",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "STATES",
    "STOP_REASONS",
    "SUCCESS_ALL",
    "SUCCESS_MAIN",
    "TRANSITIONS",
    "FailurePolicy",
    "Job",
    "JobError",
    "Role",
    "Submission",
    "choose_course",
    "choose_replica",
    "may_change",
    "outcome",
    "parse_job",
    "parse_states",
    "submission",
]

SUCCESS_ALL = "all"
SUCCESS_MAIN = "main"
MAX_ROLES = 8
"""A job has at most this many roles (master, workers, parameter servers, ...)."""
MAX_REPLICAS = 1024
"""A role has at most this many replicas: beyond any classroom cluster, and it bounds the work."""
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1
"""A job's priority is stored in an Integer column: 32 bits on PostgreSQL."""
MAX_RUNTIME = 100 * 365 * 86400
"""The longest max_runtime a job may give, 100 years, whatever the course allows: times computed
from it (its end, an estimated start) must stay times."""

_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
#: A GPU model is the value of a node label (nvidia.com/gpu.product): 1 to 63 characters, once
#: spaces are dashes as GPU feature discovery writes them ("NVIDIA H200" is NVIDIA-H200).
_LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
_NANO = 10**9
_JOB_KEYS = frozenset(
    {"name", "priority", "max_runtime", "roles", "main_role", "success", "tolerated_failures",
     "max_restarts"}
)
_ROLE_KEYS = frozenset({"name", "replicas", "resources", "gpu_product"})


class JobError(ValueError):
    """A job that cannot be submitted; the message is one sentence saying what to change."""


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise JobError(
            f"{what} {_shown(value)} is not valid: use 1 to 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (e.g. resnet-ddp)"
        )
    return value


def _check_count(what: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise JobError(f"{what} must be a whole number from {low} to {high}, not {_shown(value)}")
    return value


def _check_seconds(what: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_RUNTIME
    ):
        raise JobError(f"{what} must be a positive number of seconds, at most {MAX_RUNTIME} "
                       f"(100 years), not {_shown(value)}")
    return float(value)


def _shown(value: object) -> str:
    """`value` for a message: its repr, cut short (a refused field may be a megabyte long)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


@dataclass(frozen=True)
class Role:
    """`replicas` identical pods, each asking for `request` (on a `gpu_product` node, if set)."""

    name: str
    replicas: int
    request: ResourceVector
    gpu_product: str | None = None

    def __post_init__(self) -> None:
        _check_name("role name", self.name)
        _check_count(f"role {self.name}: replicas", self.replicas, 1, MAX_REPLICAS)
        if not isinstance(self.request, ResourceVector):
            raise JobError(f"role {self.name}: the request must be a ResourceVector")
        if not self.request.is_nonnegative():
            raise JobError(f"role {self.name}: a request must not be negative ({self.request.human()})")
        if self.request.select(lambda n: n != PODS).is_zero():
            raise JobError(
                f"role {self.name}: ask for something, e.g. "
                '{"nvidia.com/gpu": 1, "cpu": "4", "memory": "16Gi"}'
            )
        if self.gpu_product is not None and (
            not isinstance(self.gpu_product, str)
            or not _LABEL_VALUE_RE.match("-".join(self.gpu_product.split()))
        ):
            raise JobError(f"role {self.name}: gpu_product must be a GPU model such as NVIDIA-H200 "
                           "(1 to 63 letters, digits, '-', '_' or '.'), or left out")

    @cached_property
    def total(self) -> ResourceVector:
        """What all replicas of the role hold together."""
        return self.request * self.replicas

    @cached_property
    def need(self) -> tuple[tuple[str, int], ...]:
        """The per-replica request in nano-units (exact ints): the admission hot path's form."""
        return tuple((name, int(amount * _NANO)) for name, amount in self.request.items())

    @cached_property
    def key_resource(self) -> str | None:
        """The GPU resource this role asks most of (None for a CPU-only role): nodes are indexed by it."""
        gpus = [(amount, name) for name, amount in self.request.items() if is_gpu_resource(name)]
        return max(gpus, key=lambda pair: (pair[0], pair[1]))[1] if gpus else None


@dataclass(frozen=True)
class FailurePolicy:
    """When the job has succeeded or failed; enforced by the backend, validated here."""

    success: str = SUCCESS_ALL
    tolerated_failures: int = 0
    max_restarts: int = 0

    def __post_init__(self) -> None:
        if self.success not in (SUCCESS_ALL, SUCCESS_MAIN):
            raise JobError(
                f"success must be {SUCCESS_ALL!r} (every replica succeeds) or {SUCCESS_MAIN!r} "
                f"(the main role succeeds), not {_shown(self.success)}"
            )
        _check_count("tolerated_failures", self.tolerated_failures, 0, MAX_REPLICAS * MAX_ROLES)
        _check_count("max_restarts", self.max_restarts, 0, 100)


@dataclass(frozen=True)
class Job:
    """One distributed job: all of its replicas start together or none does."""

    name: str
    owner: str
    course: str
    roles: tuple[Role, ...]
    max_runtime: float
    submit_time: float = 0.0
    priority: int = 0
    main_role: str = ""
    policy: FailurePolicy = field(default_factory=FailurePolicy)

    def __post_init__(self) -> None:
        _check_name("job name", self.name)
        if not isinstance(self.owner, str) or not self.owner:
            raise JobError("a job needs an owner")
        if not isinstance(self.course, str) or not self.course:
            raise JobError("a job needs a course: submit it in one of your courses")
        if not isinstance(self.roles, tuple) or not self.roles:
            raise JobError("a job needs at least one role, e.g. one worker with 1 nvidia.com/gpu")
        if len(self.roles) > MAX_ROLES:
            raise JobError(f"a job has at most {MAX_ROLES} roles, not {len(self.roles)}")
        names = [role.name for role in self.roles]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise JobError(f"role {twice[0]!r} is given twice: give every role its own name")
        main = self.main_role or self.roles[0].name
        if main not in names:
            raise JobError(f"main_role {main!r} is not one of the roles ({', '.join(names)})")
        object.__setattr__(self, "main_role", main)
        _check_seconds("max_runtime", self.max_runtime)
        if isinstance(self.submit_time, bool) or not isinstance(self.submit_time, int | float) or not (
            math.isfinite(self.submit_time)
        ):
            raise JobError(f"submit_time must be a number of seconds, not {self.submit_time!r}")
        _check_count("priority", self.priority, PRIORITY_MIN, PRIORITY_MAX)
        if self.policy.tolerated_failures >= self.replicas:
            raise JobError(
                f"tolerated_failures ({self.policy.tolerated_failures}) must be below the job's "
                f"{self.replicas} replicas, or a job with every replica failed would succeed"
            )

    @cached_property
    def total(self) -> ResourceVector:
        """What the whole gang holds while it runs: the amount quotas and fairness count."""
        return sum_vectors(role.total for role in self.roles)

    @cached_property
    def total_need(self) -> dict[str, int]:
        """`total` in exact nano-units (the admission hot path's form); do not mutate."""
        return {name: int(amount * _NANO) for name, amount in self.total.items()}

    @cached_property
    def replicas(self) -> int:
        return sum(role.replicas for role in self.roles)

    @cached_property
    def gpus(self) -> float:
        """GPU devices of any kind (whole, MIG, shared) the gang holds; for metrics and "big job"."""
        return float(sum(a for n, a in self.total.items() if is_gpu_resource(n)))

    def describe(self) -> str:
        """"2 x 4 nvidia.com/gpu": the shape a student recognises in messages."""
        return " + ".join(
            f"{role.replicas} x {role.request.human()}" for role in self.roles
        )


def parse_job(
    data: Mapping[str, Any],
    *,
    owner: str,
    course: str,
    submit_time: float,
    default_max_runtime: float,
    max_runtime_limit: float | None = None,
) -> Job:
    """A `Job` from JSON as a student submits it; `JobError` names the field to fix.

    ```json
    {"name": "resnet-ddp", "priority": 0, "max_runtime": 7200, "main_role": "master",
     "success": "main", "tolerated_failures": 0, "max_restarts": 1,
     "roles": [{"name": "master", "replicas": 1, "resources": {"nvidia.com/gpu": 4, "cpu": "8"}},
               {"name": "worker", "replicas": 3, "resources": {"nvidia.com/gpu": 4},
                "gpu_product": "NVIDIA-H200"}]}
    ```
    `max_runtime` defaults to the course's `default_max_runtime` and may not exceed
    `max_runtime_limit` (when the course sets one).
    """
    if not isinstance(data, Mapping):
        raise JobError(f"a job must be a JSON object, not {type(data).__name__}")
    check_known("", data, _JOB_KEYS)
    raw_roles = data.get("roles")
    if not isinstance(raw_roles, list) or not raw_roles:
        raise JobError(
            "roles must be a non-empty list of {name, replicas, resources} objects, e.g. "
            '[{"name": "worker", "replicas": 2, "resources": {"nvidia.com/gpu": 1}}]'
        )
    if len(raw_roles) > MAX_ROLES:
        raise JobError(f"a job has at most {MAX_ROLES} roles, not {len(raw_roles)}")
    roles = tuple(_parse_role(i, raw) for i, raw in enumerate(raw_roles))
    main_role = data.get("main_role")
    if main_role is not None and not isinstance(main_role, str):
        raise JobError(f"main_role must be the name of one of the roles "
                       f"({', '.join(role.name for role in roles)}), not {_shown(main_role)}")
    runtime = data.get("max_runtime")
    runtime = default_max_runtime if runtime is None else _check_seconds("max_runtime", runtime)
    if max_runtime_limit is not None and runtime > max_runtime_limit:
        raise JobError(
            f"max_runtime {runtime:g} s is above your course's limit of {max_runtime_limit:g} s: "
            "ask for less, or save checkpoints and submit the run in parts"
        )
    policy = FailurePolicy(
        success=data.get("success", SUCCESS_ALL),
        tolerated_failures=data.get("tolerated_failures", 0),
        max_restarts=data.get("max_restarts", 0),
    )
    return Job(
        name=data.get("name"),  # type: ignore[arg-type]  # checked by Job
        owner=owner,
        course=course,
        roles=roles,
        max_runtime=runtime,
        submit_time=submit_time,
        priority=data.get("priority", 0),
        main_role=main_role or "",
        policy=policy,
    )


def _parse_role(index: int, raw: object) -> Role:
    if not isinstance(raw, Mapping):
        raise JobError(f"roles[{index}] must be an object with name, replicas and resources")
    check_known(f"roles[{index}]: ", raw, _ROLE_KEYS)
    name = _check_name(f"roles[{index}].name", raw.get("name"))
    replicas = _check_count(f"role {name}: replicas", raw.get("replicas", 1), 1, MAX_REPLICAS)
    resources = check_resources(f"role {name}: ", raw.get("resources"))
    try:
        request = ResourceVector.from_k8s(resources)
    except (ValueError, TypeError) as exc:
        raise JobError(f"role {name}: {exc}") from None
    product = raw.get("gpu_product")
    return Role(name=name, replicas=replicas, request=request, gpu_product=product)


# ---------------------------------------------------------------------------------------------
# A job's life (issue 17): states, the changes allowed between them, and what a student submits.

QUEUED = "queued"
ADMITTED = "admitted"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
PREEMPTED = "preempted"
STATES = (QUEUED, ADMITTED, RUNNING, SUCCEEDED, FAILED, CANCELLED, PREEMPTED)
#: States a job never leaves.
FINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
#: States in which a job holds capacity (and its ledger reservation).
HOLDING = frozenset({ADMITTED, RUNNING})

#: Allowed changes. A preempted job goes back to the queue once its replicas are gone (it is
#: "re-queued", never lost); a job that can no longer start (its course was deleted, its command
#: cannot run) fails with a sentence.
TRANSITIONS: Mapping[str, frozenset[str]] = {
    QUEUED: frozenset({ADMITTED, CANCELLED, FAILED}),
    ADMITTED: frozenset({RUNNING, SUCCEEDED, FAILED, CANCELLED, PREEMPTED}),
    RUNNING: frozenset({SUCCEEDED, FAILED, CANCELLED, PREEMPTED}),
    PREEMPTED: frozenset({QUEUED, CANCELLED}),
    SUCCEEDED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}

#: Why a job's replicas are stopped: stable strings (metric labels, API answers).
STOP_CANCEL = "cancel"
STOP_MAX_RUNTIME = "max_runtime"
STOP_PREEMPT = "preempted"
STOP_FAILURE = "replica_failed"
STOP_REASONS = (STOP_CANCEL, STOP_MAX_RUNTIME, STOP_PREEMPT, STOP_FAILURE)


def may_change(current: str, new: str) -> bool:
    """Whether a job in state `current` may move to `new` (the store refuses anything else)."""
    return new in TRANSITIONS.get(current, frozenset())


def outcome(policy: FailurePolicy, main_role: str, role_replicas: Mapping[str, int],
            ended: Mapping[tuple[str, int], int | None]) -> str | None:
    """The job's end from the replicas that ended: SUCCEEDED, FAILED, or None (still running).

    `ended` maps (role, index) -> exit code (None: killed without one). A job fails as soon as
    more replicas failed than `tolerated_failures`; with the `main` policy it succeeds when every
    replica of the main role exited 0, with `all` when every replica ended (tolerated failures
    aside).
    """
    failed = sum(1 for code in ended.values() if code != 0)
    if failed > policy.tolerated_failures:
        return FAILED
    if policy.success == SUCCESS_MAIN:
        main = [code for (role, _i), code in ended.items() if role == main_role]
        done = len(main) == role_replicas.get(main_role, 0) and all(code == 0 for code in main)
        return SUCCEEDED if done else None
    return SUCCEEDED if len(ended) == sum(role_replicas.values()) else None


_CLIENT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}\Z")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
#: The shorthand for one role named ``worker``: these fields of a body, in place of ``roles``.
SHORTHAND = ("replicas", "resources", "gpu_product", "profile")
#: Environment variables the runner sets for every replica; a job may not set them itself.
RESERVED_ENV = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK",
    "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES",
    "PET_NPROC_PER_NODE", "PET_NODE_RANK", "CLASSHUB_JOB_ID", "CLASSHUB_JOB_ROLE",
    "CLASSHUB_REPLICA_INDEX", "HOME", "USER",
})
MAX_COMMAND_ARGS = 256
MAX_ARG_CHARS = 4096
MAX_ENV = 256
MAX_WORKDIR = 1024


@dataclass(frozen=True)
class Submission:
    """What a student asked for, checked: the course, the command and its environment, the
    idempotency key, and the job fields `parse_job` reads (roles expanded from the shorthand)."""

    client_id: str | None
    course: str | None
    name: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    job_fields: Mapping[str, Any]


# The checks of a submitted body's fields. The body itself is described once, as the pydantic
# model of the service (hub_ext.service.jobs.bodies.JobSubmission, which is also its OpenAPI
# schema); each of its fields is checked by one of these plain functions, so the sentences (and
# what a job may be) stay here, tested without the service. Each returns the value or raises
# JobError with the sentence that says what to change.


def check_name(what: str, value: object) -> str:
    """A job, role or profile name: 1 to 63 lowercase letters, digits and '-'."""
    return _check_name(what, value)


def check_count(what: str, value: object, low: int, high: int) -> int:
    """A whole number (not a bool) from ``low`` to ``high``."""
    return _check_count(what, value, low, high)


def check_seconds(what: str, value: object) -> float:
    """A positive, finite number of seconds, at most `MAX_RUNTIME`."""
    return _check_seconds(what, value)


def check_whole(what: str, value: object, low: int, high: int) -> int:
    """A whole number (not a bool) of any size; the range ``low``..``high`` is only named (it is
    checked later, by the job itself: a priority is first a question of who may set one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobError(f"{what} must be a whole number from {low} to {high}, not {_shown(value)}")
    return value


def check_known(where: str, data: Mapping[str, Any], allowed: frozenset[str] | set[str]) -> None:
    """Every key of ``data`` is one of ``allowed`` (a typo must not be silently ignored)."""
    unknown = sorted(str(k) for k in set(data) - set(allowed))
    if unknown:
        raise JobError(f"{where}unknown field {_shown(unknown[0])}; allowed: {', '.join(sorted(allowed))}")


def check_one_form(given: Mapping[str, Any] | set[str] | frozenset[str]) -> None:
    """Either ``roles`` or the shorthand of one role (`SHORTHAND`), not both."""
    if "roles" in given and any(k in given for k in SHORTHAND):
        raise JobError("give either roles or replicas/resources/profile (one role named worker), "
                       "not both; in roles, each role may name its own profile")


def check_client_id(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not _CLIENT_ID_RE.match(value)):
        raise JobError(f"id {_shown(value)} is not valid: use 1 to 100 letters, digits, '.', '_', ':' "
                       "or '-' (a name of your choosing, unique among your jobs)")
    return value


def check_course(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise JobError(f"course must be the name of one of your courses, not {_shown(value)}")
    return value


def check_command(value: object) -> list[str]:
    if (not isinstance(value, list) or not value or len(value) > MAX_COMMAND_ARGS
            or not all(isinstance(a, str) and a and len(a) <= MAX_ARG_CHARS and "\x00" not in a
                       for a in value)):
        raise JobError(f"command must be a list of 1 to {MAX_COMMAND_ARGS} non-empty strings, e.g. "
                       '["python", "train.py", "--epochs", "3"]')
    return value


def check_env(value: object) -> dict[str, str]:
    """The job's environment (None: none); names the runner sets itself are refused."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > MAX_ENV:
        raise JobError(f'env must be an object of at most {MAX_ENV} variables, e.g. {{"EPOCHS": "3"}}')
    for key, item in value.items():
        if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
            raise JobError(f"env: {_shown(key)} is not a variable name (letters, digits and _)")
        if key in RESERVED_ENV:
            raise JobError(f"env: {key} is set by classhub for every replica; leave it out")
        if not isinstance(item, str) or "\x00" in item or len(item) > MAX_ARG_CHARS:
            raise JobError(f"env: {key} must be a string of at most {MAX_ARG_CHARS} characters")
    return dict(value)


def check_workdir(value: object) -> str:
    if not isinstance(value, str) or value.startswith("/") or ".." in value.split("/") or (
            "\x00" in value) or len(value) > MAX_WORKDIR:
        raise JobError("workdir must be a folder inside your home, relative to it (e.g. lab3)")
    return value


def check_roles(value: object) -> list[Any]:
    """``roles``: a list of 1 to `MAX_ROLES` objects (each is then checked as a role)."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_ROLES:
        raise JobError(
            f"roles must be a list of 1 to {MAX_ROLES} {{name, replicas, resources}} objects (or "
            '{name, replicas, profile}), e.g. [{"name": "worker", "replicas": 2, '
            f'"resources": {{"nvidia.com/gpu": 1}}}}], not {_shown(value)}'
        )
    for index, role in enumerate(value):
        if not isinstance(role, Mapping):
            raise JobError(
                f"roles[{index}] must be an object with name, replicas and resources (or profile), "
                f'e.g. {{"name": "worker", "replicas": 2, "resources": {{"cpu": "1"}}}}, '
                f"not {_shown(role)}"
            )
    return value


def check_resources(where: str, value: object) -> dict[str, Any]:
    """A role's per-replica request: an object of resource names and amounts (whether the
    names and quantities make sense is `parse_job`'s question, hub_ext.core.resources)."""
    if not isinstance(value, Mapping) or not value:
        raise JobError(f'{where}resources must be an object such as {{"nvidia.com/gpu": 1, "cpu": "4"}}')
    for resource, amount in value.items():
        if isinstance(amount, bool) or not isinstance(amount, str | int | float):
            raise JobError(f"{where}{_shown(resource)}: {_shown(amount)} is not a number or "
                           'quantity, e.g. 2 or "500m" or "16Gi"')
    return dict(value)


def check_gpu_product(where: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str)
                              or not _LABEL_VALUE_RE.match("-".join(value.split()))):
        raise JobError(f"{where}gpu_product must be a GPU model such as NVIDIA-H200 "
                       "(1 to 63 letters, digits, '-', '_' or '.'), or left out")
    return value


def check_profile(where: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise JobError(f"{where}profile must be the slug of a profile of your course, such as "
                       f"gpu-1, not {_shown(value)}")
    return value


def check_main_role(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise JobError(f"main_role must be the name of one of the roles, not {_shown(value)}")
    return value


def check_success(value: object) -> str:
    if value not in (SUCCESS_ALL, SUCCESS_MAIN) or not isinstance(value, str):
        raise JobError(
            f"success must be {SUCCESS_ALL!r} (every replica succeeds) or {SUCCESS_MAIN!r} "
            f"(the main role succeeds), not {_shown(value)}"
        )
    return value


def role_where(name: object) -> str:
    """How a sentence about a role begins: "" for the shorthand's worker, "role <name>: " else."""
    return "" if name == "worker" else f"role {name}: "


def check_profile_alone(role: Mapping[str, Any]) -> None:
    """A role names a profile (what a notebook of that profile gets) or its own resources, not
    both: a profile is a whole request, as in KubeSpawner's profile list."""
    given = [k for k in ("resources", "gpu_product") if k in role]
    if "profile" in role and given:
        raise JobError(f"{role_where(role.get('name'))}give either profile or {'/'.join(given)}, not "
                       f"both: profile {role['profile']} sets the CPU, memory and GPUs of each replica")


def submission(given: Mapping[str, Any]) -> Submission:
    """The `Submission` of a body whose fields passed their checks (``given``: the fields the
    student sent, roles as dicts), the shorthand expanded into one role named ``worker``.

    ```json
    {"id": "run-42", "course": "cs101", "name": "resnet-ddp", "command": ["python", "train.py"],
     "replicas": 2, "resources": {"nvidia.com/gpu": 1}, "max_runtime": 3600}
    ```
    `replicas`/`resources`/`gpu_product` are the shorthand for one role named `worker`; give
    `roles` instead for a master and workers. `profile` (in the shorthand or in a role) names a
    profile of the course in place of `resources`/`gpu_product`; the service resolves it
    (hub_ext.core.profiles.resolve_job_roles) before `parse_job`. `id` (optional) makes the
    submit idempotent: sending the same id again returns the job made the first time.
    """
    check_one_form(given)
    fields = {k: given[k] for k in _JOB_KEYS if k in given and k != "name"}
    if "roles" in given:
        fields["roles"] = [dict(role) for role in given["roles"]]
    else:
        role: dict[str, Any] = {"name": "worker", "replicas": given.get("replicas", 1)}
        for key in ("resources", "gpu_product", "profile"):
            if key in given:
                role[key] = given[key]
        if "profile" not in given:
            role.setdefault("resources", {"cpu": "1"})
        fields["roles"] = [role]
    for role in fields["roles"]:
        check_profile_alone(role)
    return Submission(given.get("id"), given.get("course"), given.get("name", "job"),
                      tuple(given["command"]), dict(given.get("env") or {}), given.get("workdir", ""),
                      fields)


def choose_course(given: str | None, member_of: Iterable[str]) -> str:
    """The course a job runs in: the one named, else the student's only course."""
    if given is not None:
        return given
    courses = sorted(member_of)
    if len(courses) == 1:
        return courses[0]
    if not courses:
        raise JobError('Jobs run in a course, and you are in none; ask your teacher to add you, or '
                       'name the course with "course"')
    raise JobError(f'You are in several courses ({", ".join(courses)}); say which one with "course"')


def parse_states(raw: str | None) -> list[str] | None:
    """``?state=queued,running`` as a list of states (None: any state)."""
    if not raw:
        return None
    states = [s.strip() for s in raw.split(",") if s.strip()]
    bad = [s for s in states if s not in STATES]
    if bad:
        raise JobError(f"state {_shown(bad[0])} is not one of {', '.join(STATES)}")
    return states


def choose_replica(job_id: str, role: str | None, index: int,
                   replicas: Iterable[tuple[str, int]]) -> tuple[str, int]:
    """The replica (role, index) whose log is asked for (role None: the first role); JobError
    naming the replicas there are when the job has no such one."""
    there = list(dict.fromkeys(replicas))
    role = there[0][0] if role is None and there else role
    if (role, index) not in there:
        names = ", ".join(f"role={r}&index={i}" for r, i in sorted(there))
        raise JobError(f"No replica {role}-{index} in job {job_id}; choose one of: {names}")
    return role, index  # type: ignore[return-value]
