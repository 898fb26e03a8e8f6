"""The JSON body of the competitions API, declared once (docs/architecture.md, rule 8).

A pydantic model on hub_ext.service.body_models.Body (unknown fields refused, an ``example``);
its OpenAPI schema is generated from it. The hidden labels and a student's predictions are no
JSON body: they are raw CSV uploads (``PUT .../labels``, ``POST .../submissions``), parsed off the
event loop by hub_ext.core.competitions (a JSON body is parsed on it, docs/architecture.md, rule 7).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from hub_ext.core import competitions as rules
from hub_ext.service.assignments.bodies import MAX_TITLE, _instant, _name
from hub_ext.service.body_models import Body

__all__ = ["CompetitionBody", "CompetitionChange", "NotebookRunner", "ScorerBody"]

#: Characters of a competition's description (shown on the course page as plain text).
MAX_DESCRIPTION = 10_000


class CompetitionBody(Body):
    """``POST /api/courses/<course>/competitions``: create a competition; its hidden labels follow
    with ``PUT .../labels`` (students see it once they are there)."""

    example: ClassVar[str] = ('{"name": "digits", "title": "Digits", "metric": "accuracy", '
                              '"public_fraction": 0.5, "ends_at": "2026-12-14T17:00:00+00:00", '
                              '"daily_limit": 5}')

    name: Annotated[str, _name("a competition name"),
                    Field(description="the competition's name, e.g. digits")]
    title: Annotated[str, Field(max_length=MAX_TITLE)] = ""
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION,
                                      description="what to predict and where the public data is")] = ""
    metric: Annotated[Literal["accuracy", "rmse", "macro_f1"], Field(
        description="accuracy or macro_f1 for class labels (higher is better), rmse for numbers "
                    "(lower is better)")]
    public_fraction: Annotated[float, Field(gt=0, lt=1, description=(
        "the share of ids scored on the public leaderboard during the competition (a fixed, "
        "seeded split); the rest decide the private leaderboard at the end"))] = 0.5
    opens_at: Annotated[datetime | None, _instant("opens_at", null_ok=True),
                        Field(description="when students see it and may submit (default: now)")] = None
    ends_at: Annotated[datetime, _instant("ends_at")]
    daily_limit: Annotated[int, Field(ge=1, le=1000, description=(
        "accepted submissions per student per UTC day"))] = 5
    anonymous: Annotated[bool, Field(description=(
        "show students the others on the leaderboard as 'participant N' instead of their user "
        "names (staff always see names)"))] = False


class CompetitionChange(Body):
    """``PUT /api/courses/<course>/competitions/<name>``: change the texts, the times, the daily
    limit or anonymity (fields not sent stay as they are). The labels, the metric and the split
    never change: scores already given would no longer mean the same."""

    example: ClassVar[str] = '{"ends_at": "2026-12-15T17:00:00+00:00"}'

    title: Annotated[str | None, Field(max_length=MAX_TITLE)] = None
    description: Annotated[str | None, Field(max_length=MAX_DESCRIPTION)] = None
    opens_at: Annotated[datetime | None, _instant("opens_at", null_ok=True)] = None
    ends_at: Annotated[datetime | None, _instant("ends_at", null_ok=True)] = None
    daily_limit: Annotated[int | None, Field(ge=1, le=1000)] = None
    anonymous: bool | None = None


#: Characters of a teacher's scoring script.
MAX_SCORER = 200_000


def _file_name(value: str) -> str:
    try:
        return rules.check_file_name(value)
    except rules.CompetitionError as e:
        raise ValueError(str(e)) from None


_PROFILE = Field(min_length=1, max_length=63, description=(
    "the course profile the jobs run with (its CPU, memory and GPUs), chosen with the teacher's rights"))
_MEMORY = Field(ge=64, le=4 * 1024 * 1024, description=(
    "local mode: the job's address-space limit in MiB (Kubernetes: the profile's memory limit)"))


class NotebookRunner(Body):
    """``PUT /api/courses/<course>/competitions/<name>/runner``: take notebooks too. A submitted
    notebook runs as a job in the grading sandbox (the profile's resources, the time and memory
    limits; not as the student, not as the service) and must write ``predictions_file`` in its
    folder; that file is then scored like an uploaded one."""

    example: ClassVar[str] = ('{"profile": "cpu", "time_limit": 600, "memory_mib": 4096, '
                              '"predictions_file": "predictions.csv"}')

    profile: Annotated[str, _PROFILE]
    time_limit: Annotated[int, Field(ge=10, le=86400, description=(
        "seconds a notebook may run; one still running then fails with a sentence"))] = 600
    memory_mib: Annotated[int | None, _MEMORY] = None
    predictions_file: Annotated[str, Field(max_length=64, description=(
        "the file the notebook writes in its own folder, e.g. predictions.csv")),
        AfterValidator(_file_name)] = "predictions.csv"


class ScorerBody(Body):
    """``PUT /api/courses/<course>/competitions/<name>/scorer``: score with a teacher's script
    instead of the built-in metric. The script defines ``score(labels_path, predictions_path)``
    returning a finite number; it runs as a job in the grading sandbox (never in the service),
    once per split, with that split's hidden labels (``id,label`` CSV) and the predictions file
    as the student sent it (docs/teachers/competitions.md, "Scoring scripts")."""

    example: ClassVar[str] = ('{"source": "def score(labels_path, predictions_path):\\n    return 1.0\\n", '
                              '"higher_is_better": true, "profile": "cpu", "time_limit": 120}')

    source: Annotated[str, Field(min_length=1, max_length=MAX_SCORER, description=(
        "the Python script (UTF-8 text) defining score(labels_path, predictions_path) -> float"))]
    higher_is_better: Annotated[bool, Field(description=(
        "whether a larger score ranks first (false: a smaller one, as for an error)"))] = True
    profile: Annotated[str, _PROFILE]
    time_limit: Annotated[int, Field(ge=10, le=86400, description=(
        "seconds the script may run for one submission"))] = 300
    memory_mib: Annotated[int | None, _MEMORY] = None
