"""The classhub service's competitions API (issue 34): create, list, submit predictions or a
notebook (run as a job), a teacher's scoring script, leaderboard.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS`
and `OPENAPI_PARAMETERS` are merged into the OpenAPI document by hub_ext.service.openapi.
"""

from __future__ import annotations

from typing import Any

from hub_ext.service.apidoc import ok, op
from hub_ext.service.competitions.handlers import (
    CompetitionHandler,
    CompetitionListHandler,
    LabelsHandler,
    LeaderboardHandler,
    NotebookHandler,
    PredictionsFileHandler,
    RescoreHandler,
    RunnerHandler,
    ScorerHandler,
    SubmissionsHandler,
)

__all__ = ["OPENAPI_PARAMETERS", "OPENAPI_PATHS", "ROUTES"]

_COMPETITION = r"courses/([^/]+)/competitions/([^/]+)"

ROUTES: list[tuple[str, type]] = [
    (r"api/courses/([^/]+)/competitions", CompetitionListHandler),
    (f"api/{_COMPETITION}", CompetitionHandler),
    (f"api/{_COMPETITION}/labels", LabelsHandler),
    (f"api/{_COMPETITION}/leaderboard", LeaderboardHandler),
    (f"api/{_COMPETITION}/submissions", SubmissionsHandler),
    (rf"api/{_COMPETITION}/submissions/([^/]+)/file", PredictionsFileHandler),
    (rf"api/{_COMPETITION}/submissions/([^/]+)/rescore", RescoreHandler),
    (f"api/{_COMPETITION}/notebooks", NotebookHandler),
    (f"api/{_COMPETITION}/runner", RunnerHandler),
    (f"api/{_COMPETITION}/scorer", ScorerHandler),
]

OPENAPI_PARAMETERS: dict[str, Any] = {
    "competition": {"name": "competition", "in": "path", "required": True, "schema": {"type": "string"}},
}


def _openapi_paths() -> dict[str, Any]:
    member, teacher = "members of the course and hub admins", "teachers of the course and hub admins"
    errs = ("401", "403", "404")
    entry = {"type": "object", "properties": {
        "id": {"type": "integer"}, "student": {"type": "string"}, "submitted_at": {"type": "string"},
        "kind": {"type": "string", "enum": ["predictions", "notebook"]},
        "state": {"type": "string", "enum": ["pending", "scored", "failed"]},
        "message": {"type": "string", "description": "why it failed, or what it waits for"},
        "has_file": {"type": "boolean", "description": "whether its predictions file is kept (a "
                     "notebook's, once it wrote one)"},
        "job": {"type": "string", "description": "the name of its last job (notebook or scoring)"},
        "detail": {"type": "string", "description": "staff: a scoring script's error"},
        "public_score": {"type": ["number", "null"]},
        "private_score": {"type": ["number", "null"], "description": "staff, or after the end"}}}
    runner = {"type": "object", "properties": {
        "takes_notebooks": {"type": "boolean"}, "profile": {"type": "string"},
        "time_limit": {"type": "integer"}, "memory_mib": {"type": ["integer", "null"]},
        "predictions_file": {"type": "string"}, "owner": {"type": "string"}}}
    scorer = {"type": "object", "properties": {
        "scored_by": {"type": "string", "enum": ["metric", "script"]},
        "higher_is_better": {"type": "boolean"}, "profile": {"type": "string"},
        "time_limit": {"type": "integer"}, "memory_mib": {"type": ["integer", "null"]},
        "owner": {"type": "string"}, "set_at": {"type": "string"}, "source": {"type": "string"}}}
    row = {"type": "object", "properties": {
        "rank": {"type": "integer"}, "student": {"type": "string"}, "score": {"type": ["number", "null"]},
        "submitted_at": {"type": "string"}, "submissions": {"type": "integer"}, "me": {"type": "boolean"}}}
    board = {"type": "object", "properties": {
        "shown": {"type": "string", "enum": ["public", "private"]},
        "public": {"type": ["array", "null"], "items": row},
        "private": {"type": ["array", "null"], "items": row}}}
    competition = {"type": "object", "properties": {
        "course": {"type": "string"}, "name": {"type": "string"}, "title": {"type": "string"},
        "description": {"type": "string"}, "metric": {"type": "string"},
        "public_fraction": {"type": "number"}, "rows": {"type": "integer"},
        "daily_limit": {"type": "integer"}, "anonymous": {"type": "boolean"},
        "opens_at": {"type": "string"}, "ends_at": {"type": "string"}, "has_labels": {"type": "boolean"},
        "accepting": {"type": "boolean"}, "ended": {"type": "boolean"},
        "higher_is_better": {"type": "boolean"}, "scored_by": {"type": "string"},
        "takes_notebooks": {"type": "boolean"}, "predictions_file": {"type": ["string", "null"]},
        "left_today": {"type": "integer"}, "my_submissions": {"type": "array", "items": entry},
        "leaderboard": board,
        "students_submitted": {"type": "integer", "description": "staff only"},
        "failed": {"type": "array", "items": entry,
                   "description": "staff only: failed submissions, to re-run (POST .../rescore)"}}}
    one = ("course", "competition")
    csv_body = {"required": True, "content": {
        "text/csv": {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {"schema": {"type": "object", "properties": {
            "file": {"type": "string", "format": "binary"}}, "required": ["file"]}},
    }}
    notebook_body = {"required": True, "content": {
        "application/x-ipynb+json": {"schema": {"type": "object", "description": "the notebook"}},
        "multipart/form-data": {"schema": {"type": "object", "properties": {
            "file": {"type": "string", "format": "binary"}}, "required": ["file"]}},
    }}
    return {
        "/api/courses/{course}/competitions": {
            "get": op("The course's competitions (students: those open), each with your submissions "
                      "and the leaderboard", member,
                      ok("Competitions", {"type": "array", "items": competition}), errors=errs,
                      params=("course",)),
            "post": op("Create a competition (then upload its hidden labels: PUT .../labels)", teacher,
                       ok("The competition", competition, "201"), errors=("400", *errs, "409"),
                       params=("course",)),
        },
        "/api/courses/{course}/competitions/{competition}": {
            "get": op("One competition", member, ok("The competition", competition), errors=errs,
                      params=one),
            "put": op("Change a competition's texts, times, daily limit or anonymity (not its labels, "
                      "metric or split)", teacher, ok("The competition", competition),
                      errors=("400", *errs), params=one)},
        "/api/courses/{course}/competitions/{competition}/labels": {
            "put": op("Upload the hidden labels (CSV id,label; kept by the service, never served); "
                      "replaceable until the first scored submission. Students see the competition "
                      "once they are there", teacher, ok("The competition", competition),
                      errors=("400", *errs, "409"), params=one, body=csv_body)},
        "/api/courses/{course}/competitions/{competition}/leaderboard": {
            "get": op("The leaderboard: each student's best submission, ties to the earlier one; the "
                      "public split during the competition, the private one after (staff: both)",
                      member, ok("The leaderboard", board), errors=errs, params=one)},
        "/api/courses/{course}/competitions/{competition}/submissions": {
            "get": op("Submissions: staff see everyone's, a student their own", member,
                      ok("Submissions", {"type": "array", "items": entry}), errors=errs, params=one),
            "post": op("Submit a predictions CSV (id,prediction for every id of the test set); it is "
                       "scored at once, and refused with a sentence if it cannot be (201). With a "
                       "teacher's scoring script it is kept and scored by a job in the grading "
                       "sandbox: 202, pending", member + " (their own predictions)",
                       {**ok("The scored submission", entry, "201"),
                        **ok("The pending submission (a scoring script scores it)", entry, "202")},
                       errors=("400", *errs, "409"), params=one, body=csv_body),
        },
        "/api/courses/{course}/competitions/{competition}/notebooks": {
            "post": op("Submit a notebook: it runs as a job in the grading sandbox (the competition's "
                       "profile and limits, not as the student), must write the competition's "
                       "predictions file in its folder, and that file is scored. 202 with the pending "
                       "submission; its state becomes scored or failed (with a sentence)",
                       member + " (their own notebook), when the teacher set a runner",
                       ok("The pending submission", entry, "202"), errors=("400", *errs, "409"),
                       params=one, body=notebook_body)},
        "/api/courses/{course}/competitions/{competition}/runner": {
            "get": op("Whether and how the competition takes notebooks", "teachers and TAs of the "
                      "course and hub admins", ok("The runner", runner), errors=errs, params=one),
            "put": op("Take notebooks that run as jobs (a profile of the course, time and memory "
                      "limits, the predictions file's name)", teacher, ok("The runner", runner),
                      errors=("400", *errs), params=one),
            "delete": op("Take predictions files only", teacher, ok("The runner", runner), errors=errs,
                         params=one)},
        "/api/courses/{course}/competitions/{competition}/scorer": {
            "get": op("The teacher's scoring script (with its text), or that the metric scores",
                      "teachers and TAs of the course and hub admins", ok("The scorer", scorer),
                      errors=errs, params=one),
            "put": op("Score with a Python script defining score(labels_path, predictions_path) -> "
                      "float, run as a job in the grading sandbox once per split; replaceable until "
                      "the first scored submission", teacher, ok("The scorer", scorer),
                      errors=("400", *errs, "409"), params=one),
            "delete": op("Score with the built-in metric again (before the first scored submission)",
                         teacher, ok("The scorer", scorer), errors=(*errs, "409"), params=one)},
        "/api/courses/{course}/competitions/{competition}/submissions/{submission}/rescore": {
            "post": op("Run a failed submission again (its notebook, or the scoring script on its "
                       "kept predictions)", teacher, ok("The pending submission", entry, "202"),
                       errors=(*errs, "409"), params=(*one, "submission"))},
        "/api/courses/{course}/competitions/{competition}/submissions/{submission}/file": {
            "get": op("A predictions file as it was sent, as plain text", "its student and the "
                      "teachers and TAs of the course and hub admins",
                      {"200": {"description": "the CSV", "content": {
                          "text/plain": {"schema": {"type": "string"}}}}},
                      errors=errs, params=(*one, "submission"))},
    }


OPENAPI_PATHS: dict[str, Any] = _openapi_paths()
