"""Invitations: enrolments that wait for the invited person's consent, and the classhub home page.

Why: joining a course gives its teachers and TAs power over the member's server, so a teacher
cannot enrol someone who already belongs to another course; they are invited instead
(hub_ext.core.authz.enrolment, README "Security model"). The invited person answers on the
classhub home page (the hub's Services menu links to it) or through the API:

- ``GET /api/invitations``: the caller's pending invitations;
- ``POST /api/invitations/<course>``: accept (join the course with the invited role);
- ``DELETE /api/invitations/<course>``: decline;
- ``GET /api/courses/<course>/invitations``: the course's unanswered invitations (its staff);
  a teacher withdraws one with the members API's ``remove``.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS` are
merged into the OpenAPI document by hub_ext.service.openapi.document().
"""

from __future__ import annotations

import json
from typing import Any

from tornado import web
from tornado.escape import xhtml_escape

from hub_ext.core import authz
from hub_ext.service.apidoc import ok, op
from hub_ext.service.handlers import APIHandler

_COURSE = r"([^/]+)"


class _InvitationHandler(APIHandler):
    async def _user(self) -> str:
        model = self.require_user()
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, "Invitations are for users; ask with a user's token.")
        return model["name"]


class MyInvitationsHandler(_InvitationHandler):
    """``GET /api/invitations``: the invitations waiting for my answer."""

    async def get(self) -> None:
        self.write_json({"invitations": await self.courses.invitations_of(await self._user())})


class InvitationHandler(_InvitationHandler):
    """``POST /api/invitations/<course>`` accepts, ``DELETE`` declines; only the invited person."""

    async def post(self, course: str) -> None:
        self.write_json(await self.courses.answer_invitation(await self._user(), course, True))

    async def delete(self, course: str) -> None:
        self.write_json(await self.courses.answer_invitation(await self._user(), course, False))


class CourseInvitationsHandler(APIHandler):
    """``GET /api/courses/<course>/invitations``: unanswered invitations (teachers, TAs, admins)."""

    async def get(self, course: str) -> None:
        await self.authorize(authz.READ_MEMBERS, course=course)
        self.write_json({"invitations": await self.courses.course_invitations(course)})


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>classhub</title>
<style>body{{font-family:sans-serif;max-width:50em;margin:2em auto}} li{{margin:.6em 0}}
small{{color:#555}}</style></head><body>
<p><a href="/hub/home">&larr; Hub home</a></p>
<h1>classhub</h1>
<h2>My courses</h2>
{courses}
<h2>Invitations</h2>
{invitations}
<p id="status" role="status"></p>
<h2>More</h2>
<ul><li><a href="templates">Course templates</a></li><li><a href="shares">Share my server</a></li></ul>
<script>
async function answer(course, accept) {{
  const status = document.getElementById("status");
  const r = await fetch("api/invitations/" + encodeURIComponent(course), {{
      method: accept ? "POST" : "DELETE", headers: {{"X-XSRFToken": {xsrf}}}}});
  const data = await r.json();
  if (r.ok) {{ window.location.reload(); }} else {{ status.textContent = data.message; }}
}}
</script></body></html>"""


class HomePageHandler(_InvitationHandler):
    """``GET /``: my courses and roles, the invitations waiting for my answer (Accept /
    Decline), and links to the other classhub pages. The hub's Services menu links here."""

    async def get(self) -> None:
        name = await self._user()
        mine = await self.courses.roles_of(name)
        invitations = await self.courses.invitations_of(name)
        courses = "".join(f"<li><strong>{xhtml_escape(c)}</strong>: {xhtml_escape(r)}</li>"
                          for c, r in sorted(mine.items()))
        rows = []
        for inv in invitations:
            course = xhtml_escape(inv["course"])
            rows.append(
                f"<li><strong>{course}</strong> invites you as <em>{xhtml_escape(inv['role'])}</em> "
                f"<small>(by {xhtml_escape(inv['invited_by'])}; its teachers and TAs will be able to "
                f"open your server)</small> "
                f'<button data-course="{course}" onclick="answer(this.dataset.course, true)">'
                f"Accept</button> "
                f'<button data-course="{course}" onclick="answer(this.dataset.course, false)">'
                f"Decline</button></li>")
        xsrf = self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes) else self.xsrf_token
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(_PAGE.format(
            courses=f"<ul>{courses}</ul>" if courses else "<p>You are in no course yet.</p>",
            invitations=f"<ul>{''.join(rows)}</ul>" if rows else "<p>No invitations.</p>",
            xsrf=json.dumps(xsrf).replace("<", "\\u003c")))


ROUTES: list[tuple[str, type]] = [
    ("", HomePageHandler),
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
    "/": {"get": op("The classhub home page (my courses, invitations, links)", "any hub user",
                     {"200": {"description": "HTML page", "content": {"text/html": {}}}})},
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
