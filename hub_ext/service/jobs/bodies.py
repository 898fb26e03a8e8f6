"""The body of ``POST /api/jobs``, declared once.

Why one model: the job body was described three times (a hand parser in core, a hand-written
OpenAPI dict, the lab extension's interfaces) and they drifted. `JobSubmission` is now the one
description: its fields, their types and limits are the OpenAPI schema of the body
(hub_ext.service.jobs.handlers), and unknown fields are refused. Each field is checked by the plain
function of hub_ext.core.jobs that knows what the field means (a job name, a command, an
environment without the variables the runner sets), so the sentences a student reads stay in
core, tested without the service (docs/architecture.md, rules 1 and 8). What needs more than the
body (the profile exists, the course's limits, a node that fits) is checked after the caller was
authorized: hub_ext.service.jobs.profiles, hub_ext.core.jobs.parse_job, hub_ext.core.admission.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from hub_ext.core import jobs
from hub_ext.service import body_models
from hub_ext.service.body_models import Body

__all__ = ["JobSubmission", "RoleBody", "parse_submission"]


def _checked(check: Callable[[Any], Any]) -> BeforeValidator:
    """Run core's check of a field (its sentence) before pydantic looks at the type."""
    return BeforeValidator(check)


def _count(what: str, low: int, high: int) -> BeforeValidator:
    return BeforeValidator(lambda value: jobs.check_count(what, value, low, high))


_NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


def _resources() -> Any:
    return Field(None, description='the request of each replica, e.g. {"nvidia.com/gpu": 1, "cpu": "4", '
                                   '"memory": "16Gi"}; not with profile')


def _gpu_product() -> Any:
    return Field(None, description="pin the replicas to one GPU model (the node label "
                                   "nvidia.com/gpu.product), e.g. NVIDIA-H200; not with profile")


class RoleBody(Body):
    """One role of a job: ``replicas`` identical pods, each with ``resources`` or a ``profile``."""

    example: ClassVar[str] = '{"name": "worker", "replicas": 2, "resources": {"nvidia.com/gpu": 1}}'

    name: Annotated[str, Field(pattern=_NAME, description="the role's name, e.g. master or worker")]
    replicas: Annotated[int, Field(ge=1, le=jobs.MAX_REPLICAS)] = 1
    resources: dict[str, str | int | float] = _resources()
    gpu_product: str | None = _gpu_product()
    profile: Annotated[str, Field(pattern=_NAME, description="this role's profile, in place of "
                                                              "resources")] = None  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        where = jobs.role_where(data.get("name"))
        jobs.check_known(where, data, set(cls.model_fields))
        jobs.check_name("role name", data.get("name"))
        return data

    @field_validator("replicas", "resources", "gpu_product", "profile", mode="before")
    @classmethod
    def _role_field(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.data.get("name")
        where = f"role {name}: "
        if info.field_name == "replicas":
            return jobs.check_count(f"{where}replicas", value, 1, jobs.MAX_REPLICAS)
        if info.field_name == "resources":
            return jobs.check_resources(where, value)
        if info.field_name == "gpu_product":
            return jobs.check_gpu_product(where, value)
        return jobs.check_profile(jobs.role_where(name), value)

    def given(self) -> dict[str, Any]:
        """The role as the student wrote it (only the fields they sent)."""
        return self.model_dump(exclude_unset=True)


class JobSubmission(Body):
    """``POST /api/jobs``: a command, where it runs, and what each replica gets.

    ``replicas``/``resources``/``gpu_product``/``profile`` are the shorthand for one role named
    ``worker``; give ``roles`` instead for a master and workers. ``id`` makes the submit
    idempotent: the same id again answers the job made the first time.
    """

    example: ClassVar[str] = ('{"id": "run-1", "name": "resnet-ddp", "command": ["python", "train.py"], '
                              '"replicas": 2, "resources": {"nvidia.com/gpu": 1}, "max_runtime": 3600}')

    id: Annotated[Annotated[str, Field(max_length=100)] | None, _checked(jobs.check_client_id),
                  Field(description="your idempotency key")] = None
    course: Annotated[str | None, _checked(jobs.check_course),
                      Field(description="the course (default: your only course)")] = None
    name: Annotated[str, _checked(lambda v: jobs.check_name("job name", v)),
                    Field(pattern=_NAME, max_length=63)] = "job"
    command: Annotated[list[str], _checked(jobs.check_command),
                       Field(min_length=1, max_length=jobs.MAX_COMMAND_ARGS,
                             description="the program and its arguments, run in workdir")]
    env: Annotated[dict[str, str], _checked(jobs.check_env),
                   Field(description="environment variables (not those classhub sets, e.g. RANK)")] = None  # type: ignore[assignment]
    workdir: Annotated[str, _checked(jobs.check_workdir),
                       Field(max_length=jobs.MAX_WORKDIR,
                             description="a folder of your home, relative to it (e.g. lab3)")] = ""
    replicas: Annotated[int, _count("replicas", 1, jobs.MAX_REPLICAS),
                        Field(ge=1, le=jobs.MAX_REPLICAS)] = 1
    resources: Annotated[dict[str, str | int | float],
                         _checked(lambda v: jobs.check_resources("", v))] = _resources()
    gpu_product: Annotated[str | None,
                           _checked(lambda v: jobs.check_gpu_product("", v))] = _gpu_product()
    profile: Annotated[str, _checked(lambda v: jobs.check_profile("", v)), Field(
        pattern=_NAME, description="a profile of the course (its slug, as in the spawn form): every "
        "replica gets what a notebook of that profile gets (CPU, memory, GPUs, node selection); not "
        "with resources or gpu_product. With roles, give it per role instead")] = None  # type: ignore[assignment]
    roles: Annotated[list[RoleBody], _checked(jobs.check_roles),
                     Field(min_length=1, max_length=jobs.MAX_ROLES)] = None  # type: ignore[assignment]
    main_role: Annotated[str | None, _checked(jobs.check_main_role),
                         Field(description="the role whose end ends the job (default: the first)")] = None
    priority: Annotated[int, _checked(lambda v: jobs.check_whole("priority", v, jobs.PRIORITY_MIN,
                                                                 jobs.PRIORITY_MAX)),
                        Field(json_schema_extra={"minimum": jobs.PRIORITY_MIN, "maximum": jobs.PRIORITY_MAX},
                              description="higher first; only the course's teachers and hub admins "
                              "set one")] = 0
    max_runtime: Annotated[Annotated[float, Field(gt=0, le=jobs.MAX_RUNTIME)] | None,
                           _checked(lambda v: v if v is None else jobs.check_seconds("max_runtime", v)),
                           Field(description="seconds (default: the course's); the job is stopped "
                                 "when it is reached")] = None
    success: Annotated[Literal["all", "main"], _checked(jobs.check_success)] = "all"
    tolerated_failures: Annotated[int, _count("tolerated_failures", 0,
                                              jobs.MAX_REPLICAS * jobs.MAX_ROLES),
                                  Field(ge=0, le=jobs.MAX_REPLICAS * jobs.MAX_ROLES)] = 0
    max_restarts: Annotated[int, _count("max_restarts", 0, 100), Field(ge=0, le=100)] = 0

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        if isinstance(data, dict):
            jobs.check_known("", data, set(cls.model_fields))
            jobs.check_one_form(data)
            if "command" not in data:
                jobs.check_command(None)
        return data

    @model_validator(mode="after")
    def _one_form(self) -> JobSubmission:
        self.submission()  # a profile with resources, say: refused with the body, before anything runs
        return self

    def submission(self) -> jobs.Submission:
        """The checked submission, the shorthand expanded into one role named ``worker``."""
        given = {k: getattr(self, k) for k in self.model_fields_set}
        if "roles" in given:
            given["roles"] = [role.given() for role in self.roles]
        return jobs.submission(given)


def parse_submission(data: Any) -> jobs.Submission:
    """A body (parsed JSON) as the service reads it: the `Submission`, or
    hub_ext.service.body_models.BodyError with the sentence naming the field to change."""
    return body_models.parse(JobSubmission, data).submission()
