"""The JSON bodies of the assignments API, declared once (docs/architecture.md, rule 8).

Each is a pydantic model on hub_ext.service.body_models.Body (unknown fields refused, an
``example``); its OpenAPI schema is generated from it. What the times mean together (due after
open, a cut-off only with accept-late) is hub_ext.core.assignments.check_timing's, answered with
its sentence.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from hub_ext.core import templates as template_rules
from hub_ext.service import body_models
from hub_ext.service.body_models import Body

__all__ = ["AssignmentBody", "AssignmentChange", "AutogradeBody", "ScoreOverride"]

MAX_TITLE = 255
MAX_FOLDER = 255


def _name(what: str) -> BeforeValidator:
    def check(value: Any) -> str:
        problem = template_rules.name_problem(value)
        if problem:
            raise ValueError(problem.replace("a template name", what) + ".")
        return value
    return BeforeValidator(check)


def _folder(value: Any) -> str:
    if not isinstance(value, str) or not value.strip("/") or len(value) > MAX_FOLDER:
        raise ValueError(f'folder must be a folder of the home of at most {MAX_FOLDER} characters, '
                         'e.g. "lab1".')
    path = value.strip("/")
    if any(part in ("", ".", "..") for part in path.split("/")) or "\\" in path or "\x00" in path:
        raise ValueError(f'folder must be a folder inside the home, without "..", "." or '
                         f'backslashes (not {value!r}), e.g. "lab1".')
    return path


def _instant(field: str, null_ok: bool = False) -> Any:
    def check(value: Any) -> Any:
        if value is None and null_ok:
            return None
        return body_models.instant(value, field)
    return BeforeValidator(check)


Policy = Literal["refuse", "accept-late"]
_POLICY = Field(description="after due_at: refuse submissions, or accept them marked late "
                            "(until cutoff_at, if given)")


class AssignmentBody(Body):
    """``POST /api/courses/<course>/assignments``: release an assignment from a template version."""

    example: ClassVar[str] = ('{"name": "lab1", "template": "lab1", "version": 1, "folder": "lab1", '
                              '"opens_at": "2026-12-07T09:00:00+00:00", '
                              '"due_at": "2026-12-14T17:00:00+00:00", '
                              '"late_policy": "accept-late", "cutoff_at": "2026-12-16T17:00:00+00:00"}')

    name: Annotated[str, _name("an assignment name"), Field(description="the assignment's name, e.g. lab1")]
    title: Annotated[str, Field(max_length=MAX_TITLE)] = ""
    template: Annotated[str, _name("a template name"),
                        Field(description="the course template whose files students start from")]
    version: Annotated[int | None, Field(ge=1, le=template_rules.MAX_VERSION, description=(
        "the template version released (default: the newest now; it stays fixed)"))] = None
    folder: Annotated[str | None, BeforeValidator(lambda v: None if v is None else _folder(v)), Field(
        description="the folder of each home that is the work and is submitted (default: the "
                    "assignment's name); publish the template with this home_folder")] = None
    opens_at: Annotated[datetime | None, _instant("opens_at", null_ok=True),
                        Field(description="when students see it and may submit (default: now)")] = None
    due_at: Annotated[datetime, _instant("due_at")]
    cutoff_at: Annotated[datetime | None, _instant("cutoff_at", null_ok=True)] = None
    late_policy: Annotated[Policy, _POLICY] = "refuse"


class AssignmentChange(Body):
    """``PUT /api/courses/<course>/assignments/<name>``: change the title or the times (fields
    not sent stay as they are; ``cutoff_at: null`` removes the cut-off)."""

    example: ClassVar[str] = '{"due_at": "2026-12-15T17:00:00+00:00"}'

    title: Annotated[str | None, Field(max_length=MAX_TITLE)] = None
    opens_at: Annotated[datetime | None, _instant("opens_at", null_ok=True)] = None
    due_at: Annotated[datetime | None, _instant("due_at", null_ok=True)] = None
    cutoff_at: Annotated[datetime | None, _instant("cutoff_at", null_ok=True)] = None
    late_policy: Annotated[Policy | None, _POLICY] = None


MAX_NOTEBOOKS = 8


def _notebooks(value: Any) -> Any:
    if not isinstance(value, dict) or not 1 <= len(value) <= MAX_NOTEBOOKS:
        raise ValueError(f"notebooks must map 1 to {MAX_NOTEBOOKS} notebook paths of the assignment's "
                         'folder to the teacher\'s source notebooks, e.g. {"lab1.ipynb": {...}}.')
    for path, nb in value.items():
        if not isinstance(path, str) or not path.endswith(".ipynb"):
            raise ValueError(f"{path!r} is not a notebook path (….ipynb) inside the assignment's folder.")
        _folder(path)
        if not isinstance(nb, dict):
            raise ValueError(f"notebooks[{path!r}] must be the notebook itself (its JSON), with its "
                             "hidden tests.")
    return {p.strip("/"): nb for p, nb in value.items()}


class AutogradeBody(Body):
    """``PUT /api/courses/<course>/assignments/<name>/autograde``: grade each submission as a job,
    from the teacher's source notebooks in nbgrader's format (hidden tests included; they stay
    with the service)."""

    example: ClassVar[str] = ('{"notebooks": {"lab1.ipynb": {"cells": [], "metadata": {}, '
                              '"nbformat": 4, "nbformat_minor": 5}}, "profile": "cpu", '
                              '"time_limit": 300, "memory_mib": 2048}')

    notebooks: Annotated[dict[str, dict[str, Any]], BeforeValidator(_notebooks), Field(
        description="path in the assignment's folder -> the teacher's source notebook (nbformat 4 "
                    "JSON, nbgrader cell metadata, hidden tests between ### BEGIN HIDDEN TESTS "
                    "and ### END HIDDEN TESTS)")]
    profile: Annotated[str, Field(min_length=1, max_length=63, description=(
        "the course profile the grading jobs run with (its CPU, memory and GPUs)"))]
    time_limit: Annotated[int, Field(ge=10, le=86400, description=(
        "seconds the grader may run the notebook; cells after it are not run"))] = 300
    memory_mib: Annotated[int | None, Field(ge=64, le=4 * 1024 * 1024, description=(
        "local mode: the grader's address-space limit in MiB (Kubernetes: the profile's memory "
        "limit)"))] = None


class ScoreOverride(Body):
    """``PUT .../submissions/<id>/scores``: staff set one graded cell's score by hand."""

    example: ClassVar[str] = '{"cell": "lab1.ipynb:q1", "score": 2, "reason": "partial credit"}'

    cell: Annotated[str, Field(min_length=3, max_length=400, description=(
        "the graded cell, as <notebook>:<grade_id> (the feedback's cell field)"))]
    score: Annotated[float, Field(ge=0, le=10000)]
    reason: Annotated[str, Field(max_length=500)] = ""
