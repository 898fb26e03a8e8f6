"""Invitations: enrolments that wait for the invited person's consent.

Why: joining a course gives its teachers and TAs power over the member's server, so a teacher
cannot enrol someone who already belongs to another course; they are invited instead
(hub_ext.core.authz.enrolment, docs/admins/security.md, "Security model"). The invited person answers on the
classhub home page (hub_ext.service.pages; the hub's Services menu links to it) or through
the API:

- ``GET /api/invitations``: the caller's pending invitations;
- ``POST /api/invitations/<course>``: accept (join the course with the invited role);
- ``DELETE /api/invitations/<course>``: decline;
- ``GET /api/courses/<course>/invitations``: the course's unanswered invitations (its staff);
  a teacher withdraws one with the members API's ``remove``.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS` are
merged into the OpenAPI document by hub_ext.service.openapi.document().
"""

from __future__ import annotations

from typing import Any

from hub_ext.core import authz
from hub_ext.service import pages
from hub_ext.service.apidoc import ok, op
from hub_ext.service.declare import needs
from hub_ext.service.handlers import APIHandler

_COURSE = r"([^/]+)"


class MyInvitationsHandler(APIHandler):
    """``GET /api/invitations``: the invitations waiting for my answer."""

    @needs(authz.READ_OWN_INVITATIONS)
    async def get(self) -> None:
        self.write_json({"invitations": await self.courses.invitations_of(self.caller.name)})


class InvitationHandler(APIHandler):
    """``POST /api/invitations/<course>`` accepts, ``DELETE`` declines; only the invited person
    (the invitation is looked up by the caller's own name)."""

    @needs(authz.ANSWER_INVITATION)
    async def post(self, course: str) -> None:
        self.write_json(await self.courses.answer_invitation(self.caller.name, course, True))

    @needs(authz.ANSWER_INVITATION)
    async def delete(self, course: str) -> None:
        self.write_json(await self.courses.answer_invitation(self.caller.name, course, False))


class CourseInvitationsHandler(APIHandler):
    """``GET /api/courses/<course>/invitations``: unanswered invitations (teachers, TAs, admins)."""

    @needs(authz.READ_MEMBERS, course="course")
    async def get(self, course: str) -> None:
        self.write_json({"invitations": await self.courses.course_invitations(course)})


ROUTES: list[tuple[str, type]] = [
    ("api/invitations", MyInvitationsHandler),
    (rf"api/invitations/{_COURSE}", InvitationHandler),
    (rf"api/courses/{_COURSE}/invitations", CourseInvitationsHandler),
]

_INVITATION = {"type": "object", "properties": {
    "course": {"type": "string"}, "username": {"type": "string"},
    "role": {"type": "string", "enum": ["student", "ta", "teacher"]},
    "invited_by": {"type": "string"}, "created_at": {"type": "string", "format": "date-time"}}}
_LIST = {"type": "object", "properties": {"invitations": {"type": "array", "items": _INVITATION}}}
_ANSWER = {"type": "object", "properties": {
    "course": {"type": "string"}, "username": {"type": "string"}, "role": {"type": "string"},
    "answer": {"type": "string", "enum": ["accepted", "declined"]}}}
_ME = "the invited user"

OPENAPI_PATHS: dict[str, Any] = {
    # the pages (the home page answers invitations) and their helper endpoints
    **pages.OPENAPI_PATHS,
    "/api/invitations": {"get": op("My pending invitations", "any hub user", ok("Invitations", _LIST))},
    "/api/invitations/{course}": {
        "post": op("Accept the invitation (join the course)", _ME, ok("Joined", _ANSWER),
                    errors=("401", "403", "404"), params=("course",)),
        "delete": op("Decline the invitation", _ME, ok("Declined", _ANSWER),
                      errors=("401", "403", "404"), params=("course",)),
    },
    "/api/courses/{course}/invitations": {
        "get": op("The course's unanswered invitations", "teachers and TAs of the course, and hub "
                   "admins", ok("Invitations", _LIST), errors=("401", "403", "404"),
                   params=("course",)),
    },
}
