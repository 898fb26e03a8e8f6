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
from collections.abc import Mapping
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
    "may_change",
    "outcome",
    "parse_job",
    "parse_submission",
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
    unknown = sorted(set(data) - _JOB_KEYS)
    if unknown:
        raise JobError(f"unknown field {_shown(unknown[0])}; allowed: {', '.join(sorted(_JOB_KEYS))}")
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
    unknown = sorted(set(raw) - _ROLE_KEYS)
    if unknown:
        raise JobError(
            f"roles[{index}]: unknown field {_shown(unknown[0])}; allowed: {', '.join(sorted(_ROLE_KEYS))}"
        )
    name = _check_name(f"roles[{index}].name", raw.get("name"))
    replicas = _check_count(f"role {name}: replicas", raw.get("replicas", 1), 1, MAX_REPLICAS)
    resources = raw.get("resources")
    if not isinstance(resources, Mapping) or not resources:
        raise JobError(
            f'role {name}: resources must be an object such as {{"nvidia.com/gpu": 1, "cpu": "4"}}'
        )
    for resource, value in resources.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise JobError(f"role {name}: {_shown(resource)}: {_shown(value)} is not a number or "
                           'quantity, e.g. 2 or "500m" or "16Gi"')
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
_SUBMIT_KEYS = frozenset({"id", "course", "command", "env", "workdir", "replicas", "resources",
                          "gpu_product", "profile"}) | _JOB_KEYS
#: Environment variables the runner sets for every replica; a job may not set them itself.
RESERVED_ENV = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK",
    "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES",
    "PET_NPROC_PER_NODE", "PET_NODE_RANK", "CLASSHUB_JOB_ID", "CLASSHUB_JOB_ROLE",
    "CLASSHUB_REPLICA_INDEX", "HOME", "USER",
})
MAX_COMMAND_ARGS = 256
MAX_ARG_CHARS = 4096


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


def parse_submission(data: Any) -> Submission:
    """Check a submitted job (JSON) and expand the shorthand; `JobError` names what to change.

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
    if not isinstance(data, Mapping):
        raise JobError("a job must be a JSON object such as "
                       '{"command": ["python", "train.py"], "replicas": 2, '
                       '"resources": {"nvidia.com/gpu": 1}}')
    unknown = sorted(set(data) - _SUBMIT_KEYS)
    if unknown:
        raise JobError(f"unknown field {_shown(unknown[0])}; allowed: {', '.join(sorted(_SUBMIT_KEYS))}")
    client_id = data.get("id")
    if client_id is not None and (not isinstance(client_id, str) or not _CLIENT_ID_RE.match(client_id)):
        raise JobError(f"id {_shown(client_id)} is not valid: use 1 to 100 letters, digits, '.', '_', ':' "
                       "or '-' (a name of your choosing, unique among your jobs)")
    course = data.get("course")
    if course is not None and (not isinstance(course, str) or not course):
        raise JobError(f"course must be the name of one of your courses, not {_shown(course)}")
    name = data.get("name", "job")
    _check_name("job name", name)
    command = data.get("command")
    if (not isinstance(command, list) or not command or len(command) > MAX_COMMAND_ARGS
            or not all(isinstance(a, str) and a and len(a) <= MAX_ARG_CHARS and "\x00" not in a
                       for a in command)):
        raise JobError('command must be a list of 1 to 256 non-empty strings, e.g. '
                       '["python", "train.py", "--epochs", "3"]')
    env = data.get("env")
    env = {} if env is None else env
    if not isinstance(env, Mapping) or len(env) > 256:
        raise JobError('env must be an object of at most 256 variables, e.g. {"EPOCHS": "3"}')
    for key, value in env.items():
        if not _ENV_NAME_RE.match(str(key)):
            raise JobError(f"env: {_shown(key)} is not a variable name (letters, digits and _)")
        if key in RESERVED_ENV:
            raise JobError(f"env: {key} is set by classhub for every replica; leave it out")
        if not isinstance(value, str) or "\x00" in value or len(value) > MAX_ARG_CHARS:
            raise JobError(f"env: {key} must be a string of at most {MAX_ARG_CHARS} characters")
    workdir = data.get("workdir", "")
    if not isinstance(workdir, str) or workdir.startswith("/") or ".." in workdir.split("/") or (
            "\x00" in workdir) or len(workdir) > 1024:
        raise JobError("workdir must be a folder inside your home, relative to it (e.g. lab3)")
    fields = {k: data[k] for k in _JOB_KEYS if k in data and k != "name"}
    shorthand = {k for k in ("replicas", "resources", "gpu_product", "profile") if k in data}
    if shorthand and "roles" in data:
        raise JobError("give either roles or replicas/resources/profile (one role named worker), "
                       "not both; in roles, each role may name its own profile")
    if "roles" not in data:
        role: dict[str, Any] = {"name": "worker", "replicas": data.get("replicas", 1)}
        for key in ("resources", "gpu_product", "profile"):
            if key in data:
                role[key] = data[key]
        if "profile" not in data:
            role.setdefault("resources", {"cpu": "1"})
        fields["roles"] = [role]
    else:
        fields["roles"] = _roles_list(data["roles"])
    for role in fields["roles"]:
        if "profile" in role:
            _check_profile(role)
    return Submission(client_id, course, name, tuple(command), dict(env), workdir, fields)


def _roles_list(raw: object) -> list[dict[str, Any]]:
    """``roles`` as a list of objects (copied), or `JobError` saying what to send: the profile
    resolution and `parse_job` read each role as an object."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_ROLES:
        raise JobError(
            f"roles must be a list of 1 to {MAX_ROLES} {{name, replicas, resources}} objects (or "
            '{name, replicas, profile}), e.g. [{"name": "worker", "replicas": 2, '
            f'"resources": {{"nvidia.com/gpu": 1}}}}], not {_shown(raw)}'
        )
    for index, role in enumerate(raw):
        if not isinstance(role, Mapping):
            raise JobError(
                f"roles[{index}] must be an object with name, replicas and resources (or profile), "
                f'e.g. {{"name": "worker", "replicas": 2, "resources": {{"cpu": "1"}}}}, '
                f"not {_shown(role)}"
            )
    return [dict(role) for role in raw]


def _check_profile(role: Mapping[str, Any]) -> None:
    """A role names a profile (what a notebook of that profile gets) or its own resources, not
    both: a profile is a whole request, as in KubeSpawner's profile list."""
    where = "" if role.get("name") == "worker" else f"role {role.get('name')}: "
    slug = role["profile"]
    if not isinstance(slug, str) or not _NAME_RE.match(slug):
        raise JobError(f"{where}profile must be the slug of a profile of your course, such as "
                       f"gpu-1, not {_shown(slug)}")
    given = [k for k in ("resources", "gpu_product") if k in role]
    if given:
        raise JobError(f"{where}give either profile or {'/'.join(given)}, not both: profile "
                       f"{slug} sets the CPU, memory and GPUs of each replica")
