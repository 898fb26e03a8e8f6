"""The classhub service's assignments API (issue 34): release, list, start, submit, collect.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS`
and `OPENAPI_PARAMETERS` are merged into the OpenAPI document by hub_ext.service.openapi.
"""

from __future__ import annotations

from typing import Any

from hub_ext.service.apidoc import ok, op
from hub_ext.service.assignments.grading_handlers import (
    AutogradeHandler,
    GradesHandler,
    RegradeHandler,
    ScoresHandler,
)
from hub_ext.service.assignments.handlers import (
    AssignmentHandler,
    AssignmentListHandler,
    DownloadHandler,
    StartAssignmentHandler,
    SubmissionFileHandler,
    SubmissionHandler,
    SubmissionsHandler,
    settings_of,
)

__all__ = ["OPENAPI_PARAMETERS", "OPENAPI_PATHS", "ROUTES", "settings_of"]

_ASSIGNMENT = r"courses/([^/]+)/assignments/([^/]+)"

ROUTES: list[tuple[str, type]] = [
    (r"api/courses/([^/]+)/assignments", AssignmentListHandler),
    (f"api/{_ASSIGNMENT}", AssignmentHandler),
    (f"api/{_ASSIGNMENT}/start", StartAssignmentHandler),
    (f"api/{_ASSIGNMENT}/submissions", SubmissionsHandler),
    (rf"api/{_ASSIGNMENT}/submissions/([^/]+)", SubmissionHandler),
    (rf"api/{_ASSIGNMENT}/submissions/([^/]+)/files/(.+)", SubmissionFileHandler),
    (f"api/{_ASSIGNMENT}/download", DownloadHandler),
    (f"api/{_ASSIGNMENT}/autograde", AutogradeHandler),
    (rf"api/{_ASSIGNMENT}/submissions/([^/]+)/grade", RegradeHandler),
    (rf"api/{_ASSIGNMENT}/submissions/([^/]+)/scores", ScoresHandler),
    (f"api/{_ASSIGNMENT}/grades.csv", GradesHandler),
]

OPENAPI_PARAMETERS: dict[str, Any] = {
    "assignment": {"name": "assignment", "in": "path", "required": True, "schema": {"type": "string"}},
    "submission": {"name": "submission", "in": "path", "required": True, "schema": {"type": "integer"}},
    "path": {"name": "path", "in": "path", "required": True, "schema": {"type": "string"},
             "description": "a file's path inside the submission, e.g. lab1.ipynb"},
    "student": {"name": "student", "in": "query", "required": False, "schema": {"type": "string"},
                "description": "staff: only this student's submissions"},
    "all": {"name": "all", "in": "query", "required": False, "schema": {"type": "string", "enum": ["1"]},
            "description": "every submission, not only each student's last one"},
}


def _openapi_paths() -> dict[str, Any]:
    member, teacher = "members of the course and hub admins", "teachers of the course and hub admins"
    staff = "teachers and TAs of the course and hub admins"
    errs = ("401", "403", "404")
    submission = {"type": "object", "properties": {
        "id": {"type": "integer"}, "student": {"type": "string"}, "submitted_at": {"type": "string"},
        "late": {"type": "boolean"}, "files": {"type": "integer"}, "bytes": {"type": "integer"},
        "skipped": {"type": "array", "items": {"type": "string"}}, "latest": {"type": "boolean"},
        "score": {"type": ["number", "null"]}, "max_score": {"type": ["number", "null"]},
        "feedback": {"type": ["object", "null"], "description": (
            "the last grading: state (queued, done, failed), a sentence, and per notebook each "
            "graded cell's status, score (a staff override where given) and message")}}}
    assignment = {"type": "object", "properties": {
        "course": {"type": "string"}, "name": {"type": "string"}, "title": {"type": "string"},
        "template": {"type": "string"}, "version": {"type": "integer"}, "folder": {"type": "string"},
        "opens_at": {"type": "string"}, "due_at": {"type": "string"},
        "cutoff_at": {"type": ["string", "null"]}, "late_policy": {"type": "string"},
        "accepting": {"type": "boolean"}, "late_now": {"type": "boolean"},
        "my_submissions": {"type": "array", "items": submission},
        "students_submitted": {"type": "integer"}, "autograded": {"type": "boolean"},
        "max_score": {"type": ["number", "null"]}}}
    autograde = {"type": "object", "properties": {
        "autograded": {"type": "boolean"}, "notebooks": {"type": "array", "items": {"type": "string"}},
        "profile": {"type": "string"}, "time_limit": {"type": "integer"},
        "memory_mib": {"type": ["integer", "null"]}, "max_score": {"type": "number"},
        "owner": {"type": "string"}, "cells": {"type": "object"}}}
    one = ("course", "assignment")
    return {
        "/api/courses/{course}/assignments": {
            "get": op("The course's assignments (students: those open), each with your submissions",
                      member, ok("Assignments", {"type": "array", "items": assignment}), errors=errs,
                      params=("course",)),
            "post": op("Release an assignment from a template version", teacher,
                       ok("The assignment", assignment, "201"), errors=("400", *errs, "409"),
                       params=("course",)),
        },
        "/api/courses/{course}/assignments/{assignment}": {
            "get": op("One assignment", member, ok("The assignment", assignment), errors=errs, params=one),
            "put": op("Change an assignment's title, times or late policy", teacher,
                      ok("The assignment", assignment), errors=("400", *errs), params=one),
        },
        "/api/courses/{course}/assignments/{assignment}/start": {"post": op(
            "(Re)start your server with the assignment's files seeded into your home (your edits "
            "are kept)", member + " (their own server)", ok("The server and what seeding did",
                                                            {"type": "object"}),
            errors=("400", *errs, "409"), params=one)},
        "/api/courses/{course}/assignments/{assignment}/submissions": {
            "get": op("Submissions: staff see everyone's, a student their own", member,
                      ok("Submissions", {"type": "array", "items": submission}), errors=errs,
                      params=(*one, "student")),
            "post": op("Submit your assignment folder now (a snapshot; resubmit until the due date, "
                       "the last one counts)", member + " (their own home)",
                       ok("The submission", submission, "201"), errors=("400", *errs, "409"), params=one),
        },
        "/api/courses/{course}/assignments/{assignment}/submissions/{submission}": {"get": op(
            "One submission and its files", "its student and " + staff,
            ok("The submission", {**submission, "properties": {
                **submission["properties"], "listing": {"type": "array", "items": {"type": "object"}}}}),
            errors=errs, params=(*one, "submission"))},
        "/api/courses/{course}/assignments/{assignment}/submissions/{submission}/files/{path}": {"get": op(
            "One file of a submission, read-only, as plain text", "its student and " + staff,
            {"200": {"description": "the file", "content": {"text/plain": {"schema": {"type": "string"}}}}},
            errors=errs, params=(*one, "submission", "path"))},
        "/api/courses/{course}/assignments/{assignment}/download": {"get": op(
            "Every student's last submission (all of them with ?all=1) as one zip", staff,
            {"200": {"description": "a zip, one folder per student", "content": {
                "application/zip": {"schema": {"type": "string", "format": "binary"}}}}},
            errors=errs, params=(*one, "all"))},
        "/api/courses/{course}/assignments/{assignment}/autograde": {
            "get": op("The assignment's autograding settings (never the source notebooks)", staff,
                      ok("The settings", autograde), errors=errs, params=one),
            "put": op("Grade every new submission as a job, from the teacher's source notebooks in "
                      "nbgrader's format (hidden tests stay with the service)", teacher,
                      ok("The settings", autograde), errors=("400", *errs), params=one),
        },
        "/api/courses/{course}/assignments/{assignment}/submissions/{submission}/grade": {"post": op(
            "Grade the submission (again) as a job; the last grading counts", staff,
            ok("The submission, its grading queued", submission, "202"), errors=(*errs, "409"),
            params=(*one, "submission"))},
        "/api/courses/{course}/assignments/{assignment}/submissions/{submission}/scores": {"put": op(
            "Set one graded cell's score by hand (kept over regrades; in the audit log)", staff,
            ok("The submission", submission), errors=("400", *errs), params=(*one, "submission"))},
        "/api/courses/{course}/assignments/{assignment}/grades.csv": {"get": op(
            "Grades as CSV for an LMS gradebook: username,score,max,late,submitted, one row per "
            "student of the course whether they submitted or not (the last submission counts; no "
            "submission: an empty score and submitted 0)", staff,
            {"200": {"description": "the CSV", "content": {"text/csv": {"schema": {"type": "string"}}}}},
            errors=errs, params=one)},
    }


OPENAPI_PATHS: dict[str, Any] = _openapi_paths()
