"""Courses for the API: the classhub store is the truth, the hub group follows it.

Why this module: a course is a row in the classhub store (roles, quotas, the ledger) *and* a
JupyterHub group of the same name (so JupyterHub's own ``!group=`` role filters, profile
visibility and the admin page see the same members). Every change is written to the store first
and then the group is made to match the store (`sync_group`), which is idempotent: a sync that
failed half way (the hub was restarting) is finished by the next change or by `reconcile` when
the service starts (docs/architecture.md, rule 4). Handlers stay thin: they decide with hub_ext.core.authz and
call one method here.

Blocking database work runs in a worker thread (`asyncio.to_thread`); each call is one short
transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker
from tornado import web

from hub_ext import store
from hub_ext.core import authz, roles, roster
from hub_ext.core.jobs import FINAL as FINAL_JOB_STATES
from hub_ext.core.quota import Limits, Usage
from hub_ext.hubapi import HubAPI
from hub_ext.service.body_models import (  # noqa: F401 - the name checks, named here too
    COURSE_NAME,
    BodyError,
    course_name_problem,
    unknown_resources,
)
from hub_ext.store import (
    AuditLog,
    Course,
    CourseQuota,
    Invitation,
    Ledger,
    Membership,
    UserQuota,
    add_member,
    all_members,
    ensure_course,
    set_course_limits,
    set_user_limits,
)
from hub_ext.store.job_models import JobRecord
from hub_ext.store.share_models import ta_access_by_course

log = logging.getLogger(__name__)
T = TypeVar("T")

def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def usage_json(usage: Usage) -> dict[str, Any]:
    """Usage for JSON: Kubernetes quantities, servers, GPU hours of this week (a number)."""
    return {
        "resources": usage.resources.to_k8s(),
        "servers": usage.servers,
        "gpu_hours_week": round(float(usage.gpu_hours_week), 4),
    }


class Courses:
    """Course operations of the service: store transactions plus the hub group sync."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        hub: HubAPI,
        normalize: Callable[[str], str] = roster.default_normalize,
        ta_server_access: bool = True,
    ) -> None:
        self.sessions = sessions
        #: reads never wait on a writer (store.readers); writes use `sessions`
        self.reads = store.readers(sessions)
        self.hub = hub
        self.ledger = Ledger(sessions)
        self.normalize = normalize
        self._locks: dict[str, asyncio.Lock] = {}
        self._roles_lock = asyncio.Lock()
        #: TAs may open students' servers in courses that chose nothing (configure()'s default)
        self.ta_server_access = ta_server_access

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    # ------------------------------------------------------------------ who asks

    def _roles_of(self, username: str) -> dict[str, str]:
        with self.reads() as session:
            rows = session.execute(
                select(Course.name, Membership.role)
                .join(Membership, Membership.course_id == Course.id)
                .where(Membership.username == username)
            ).all()
        return dict(rows)

    async def roles_of(self, username: str) -> dict[str, str]:
        """{course: role} of `username`, from the store."""
        return await self._db(self._roles_of, username)

    async def caller(self, model: Mapping[str, Any], access: bool = True) -> authz.Caller:
        """The authz Caller for a hub user/service model (as HubOAuth returns it); `access`:
        whether the token grants access to classhub (checked by HubOAuth)."""
        kind = model.get("kind", "user")
        return authz.Caller(
            name=model["name"],
            kind=kind,
            admin=bool(model.get("admin")) if kind == "user" else False,
            courses=await self.roles_of(model["name"]) if kind == "user" and access else {},
            scopes=frozenset(model.get("scopes") or ()),
            access=access,
        )

    # ------------------------------------------------------------------ courses

    def _course(self, session: Session, name: str) -> Course:
        course = session.scalars(select(Course).where(Course.name == name)).one_or_none()
        if course is None:
            raise web.HTTPError(404, "No course %s; GET /api/courses lists the courses.", name)
        return course

    @staticmethod
    def _course_json(course: Course, counts: Mapping[str, int]) -> dict[str, Any]:
        return {
            "name": course.name,
            "display_name": course.display_name or course.name,
            "created_at": course.created_at.isoformat(),
            "members": {role: counts.get(role, 0) for role in (roles.TEACHER, roles.TA, roles.STUDENT)},
        }

    def _list(self, names: list[str] | None) -> list[dict[str, Any]]:
        with self.reads() as session:
            query = select(Course).order_by(Course.name)
            if names is not None:
                query = query.where(Course.name.in_(names))
            courses = session.scalars(query).all()
            counts: dict[int, dict[str, int]] = {}
            for course_id, role, n in session.execute(
                select(Membership.course_id, Membership.role, func.count()).group_by(
                    Membership.course_id, Membership.role
                )
            ):
                counts.setdefault(course_id, {})[role] = n
            return [self._course_json(c, counts.get(c.id, {})) for c in courses]

    async def list(self, caller: authz.Caller) -> list[dict[str, Any]]:
        """The courses `caller` may see (all for admins, their own for others)."""
        if caller.is_admin:
            return await self._db(self._list, None)
        return await self._db(self._list, authz.visible_courses(caller, caller.courses))

    async def get(self, name: str) -> dict[str, Any]:
        found = await self._db(self._list, [name])
        if not found:
            raise web.HTTPError(404, "No course %s; GET /api/courses lists the courses.", name)
        return found[0]

    async def create(self, actor: str, name: str, display_name: str) -> dict[str, Any]:
        """Create the course and its hub group.

        A hub group of that name that already exists is adopted: its members join the course,
        as teachers and TAs when the group's properties say so (the pre-store way of marking a
        course), as students otherwise; the reply lists them under "adopted".
        """
        async with self._lock(name):
            if await self._db(self._exists, name):
                raise web.HTTPError(409, "Course %s already exists; pick another name.", name)
            group = await self.hub.group(name)
            if group is None:
                await self.hub.create_group(name)
                adopted: dict[str, str] = {}
            else:
                adopted = _group_roles(group)
            await self._db(self._create, actor, name, display_name, adopted)
            if adopted:
                await self.push_roles()
        course = await self.get(name)
        course["adopted"] = sorted(adopted)
        return course

    def _exists(self, name: str) -> bool:
        with self.reads() as session:
            return session.scalars(select(Course.id).where(Course.name == name)).first() is not None

    def _create(self, actor: str, name: str, display_name: str, members: Mapping[str, str]) -> None:
        now = utcnow()
        with self.sessions.begin() as session:
            course = ensure_course(session, name, now, display_name)
            for username, role in sorted(members.items()):
                add_member(session, course, username, role)
            session.add(AuditLog(at=now, actor=actor, action="course.create",
                                 details={"course": name, "adopted": sorted(members)}))

    async def delete(self, actor: str, name: str) -> None:
        """Delete the course (members, quotas) and its hub group; 409 while servers hold quota."""
        async with self._lock(name):
            await self._db(self._delete, actor, name)
            await self.push_roles()
            await self.hub.delete_group(name)

    def _delete(self, actor: str, name: str) -> None:
        now = utcnow()
        with self.sessions.begin() as session:
            course = self._course(session, name)
            active = self.ledger.held_keys_in(session, course_id=course.id)
            # Jobs still waiting in the queue hold no reservation yet, but deleting the course
            # would orphan them (and a running one's processes): they count too.
            jobs = session.scalars(
                select(JobRecord.job_id).where(JobRecord.course_id == course.id,
                                               JobRecord.state.not_in(FINAL_JOB_STATES))
            ).all()
            held = sorted(set(active) | {Ledger.job_key(j) for j in jobs})
            if held:
                raise web.HTTPError(
                    409,
                    "Course %s still has %d running server(s) or queued or running job(s) (%s); "
                    "stop them first (jobs: cancel them).",
                    name, len(held), ", ".join(held[:5]),
                )
            # Finished reservations stay as GPU-hour history of their users, outside any course.
            self.ledger.detach_course_in(session, course.id)
            session.execute(delete(UserQuota).where(UserQuota.course_id == course.id))
            session.delete(course)
            session.add(AuditLog(at=now, actor=actor, action="course.delete", details={"course": name}))

    # ------------------------------------------------------------------ members

    def _members(self, name: str) -> dict[str, str]:
        with self.reads() as session:
            course = self._course(session, name)
            rows = session.execute(
                select(Membership.username, Membership.role).where(Membership.course_id == course.id)
            ).all()
        return dict(rows)

    async def members(self, name: str) -> list[dict[str, str]]:
        current = await self._db(self._members, name)
        return [{"username": u, "role": r} for u, r in sorted(current.items())]

    async def change_members(self, caller: authz.Caller, name: str, adds: Mapping[str, str],
                             removes: list[str]) -> dict[str, Any]:
        """Add ``adds`` ({username: role}, normalized) and remove ``removes``, all or nothing
        (the body is hub_ext.service.body_models.MemberChangeBody).

        New members who need consent (hub_ext.core.authz.enrolment) are invited instead of
        added; naming a hub admin is refused for the whole change. Removing someone with a
        pending invitation withdraws it.
        """
        async with self._lock(name):
            current = await self._db(self._members, name)
            for username, role in adds.items():
                verdict = authz.may_change_member(caller, name, current.get(username), role)
                if not verdict:
                    raise web.HTTPError(verdict.status, "%s: %s", username, verdict.message)
            for username in removes:
                verdict = authz.may_change_member(caller, name, current.get(username), None)
                if not verdict:
                    raise web.HTTPError(verdict.status, "%s: %s", username, verdict.message)
            direct, invited, refused = await self._enrolments(
                caller, name, {u: r for u, r in adds.items() if u not in current})
            if refused:
                user, reason = next(iter(sorted(refused.items())))
                raise web.HTTPError(403, "%s Nothing was changed.", reason)
            hub_refused = await self.hub.create_users(direct)
            if hub_refused:
                user, reason = next(iter(hub_refused.items()))
                raise BodyError(f"The hub refused the username {user!r}: {reason}. Nothing was changed.")
            set_roles = {u: r for u, r in adds.items() if u not in invited}
            result = {
                "added": sorted(direct),
                "invited": sorted(invited),
                "changed": sorted(u for u, r in adds.items() if u in current and current[u] != r),
                "unchanged": sorted(u for u, r in adds.items() if current.get(u) == r),
                "removed": sorted(u for u in removes if u in current),
            }
            withdrawn = await self._db(self._apply, caller.name, name, set_roles, removes,
                                       "members.change", invites=invited)
            result["withdrawn"] = withdrawn
            await self._sync(name, created=direct)
            await self.push_roles()
        return result

    async def _enrolments(self, caller: authz.Caller, name: str, wanted: Mapping[str, str]
                          ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """Split people who are not members yet into (added at once, invited {user: role},
        refused {user: sentence}) by hub_ext.core.authz.enrolment."""
        if not wanted:
            return [], {}, {}
        admins = await self.hub.admin_names()
        elsewhere = await self._db(self._courses_of, list(wanted))
        direct: list[str] = []
        invited: dict[str, str] = {}
        refused: dict[str, str] = {}
        for username, role in wanted.items():
            answer = authz.enrolment(caller, name, username, hub_admin=username in admins,
                                     other_courses=elsewhere.get(username, ()))
            if isinstance(answer, authz.Verdict):
                refused[username] = answer.message
            elif answer == authz.INVITE:
                invited[username] = role
            else:
                direct.append(username)
        return direct, invited, refused

    def _courses_of(self, usernames: list[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        with self.reads() as session:
            for i in range(0, len(usernames), 500):
                for username, course in session.execute(
                    select(Membership.username, Course.name)
                    .join(Course, Membership.course_id == Course.id)
                    .where(Membership.username.in_(usernames[i:i + 500]))
                ):
                    found.setdefault(username, []).append(course)
        return found

    def _apply(self, actor: str, name: str, set_roles: Mapping[str, str], removes: Iterable[str],
               action: str, invites: Mapping[str, str] | None = None, **details: object) -> list[str]:
        """Set roles, remove members, record invitations, in one transaction; returns the
        invitations withdrawn (people removed, or added at once, while invited)."""
        now = utcnow()
        removes = list(removes)
        invites = dict(invites or {})
        with self.sessions.begin() as session:
            course = self._course(session, name)
            for username, role in set_roles.items():
                add_member(session, course, username, role)
            if removes:
                session.execute(
                    delete(Membership).where(
                        Membership.course_id == course.id, Membership.username.in_(removes)
                    )
                )
            pending = {i.username: i for i in session.scalars(
                select(Invitation).where(Invitation.course_id == course.id))}
            withdrawn = sorted(u for u in pending if u in set_roles or u in removes)
            for username in withdrawn:
                session.delete(pending[username])
            for username, role in invites.items():
                row = pending.get(username) or Invitation(course_id=course.id, username=username)
                row.role, row.invited_by, row.created_at = role, actor, now
                session.add(row)
            session.add(AuditLog(at=now, actor=actor, action=action, details={
                "course": name, "set": dict(set_roles), "removed": removes,
                **({"invited": invites} if invites else {}),
                **({"withdrawn": withdrawn} if withdrawn else {}), **details}))
        log.info("%s in %s by %s: set %s, removed %s, invited %s, withdrew %s", action, name, actor,
                 dict(set_roles), removes, invites, withdrawn)
        return withdrawn

    # ------------------------------------------------------------------ invitations

    def _invitations(self, *, username: str | None = None, course: str | None = None
                     ) -> list[dict[str, Any]]:
        query = select(Invitation, Course.name).join(Course, Invitation.course_id == Course.id)
        if username is not None:
            query = query.where(Invitation.username == username)
        if course is not None:
            query = query.where(Course.name == course)
        with self.reads() as session:
            if course is not None:
                self._course(session, course)  # 404 for a missing course
            return [{"course": c, "username": i.username, "role": i.role, "invited_by": i.invited_by,
                     "created_at": i.created_at.isoformat()}
                    for i, c in session.execute(query.order_by(Course.name, Invitation.username))]

    async def invitations_of(self, username: str) -> list[dict[str, Any]]:
        """The invitations waiting for `username`'s answer."""
        return await self._db(self._invitations, username=username)

    async def course_invitations(self, name: str) -> list[dict[str, Any]]:
        """The invitations of course `name` nobody has answered yet."""
        return await self._db(self._invitations, course=name)

    async def answer_invitation(self, username: str, name: str, accept: bool) -> dict[str, Any]:
        """Accept (join with the invited role) or decline the invitation to course `name`."""
        async with self._lock(name):
            role = await self._db(self._answer, username, name, accept)
            if accept:
                await self._sync(name)
                await self.push_roles()
        return {"course": name, "username": username, "role": role,
                "answer": "accepted" if accept else "declined"}

    def _answer(self, username: str, name: str, accept: bool) -> str:
        with self.sessions.begin() as session:
            found = session.execute(
                select(Invitation).join(Course, Invitation.course_id == Course.id)
                .where(Course.name == name, Invitation.username == username)
            ).scalar_one_or_none()
            if found is None:
                raise web.HTTPError(404, "You have no invitation to %s; GET /api/invitations lists "
                                         "yours.", name)
            role, course = found.role, found.course
            if accept:
                add_member(session, course, username, role)
            session.delete(found)
            session.add(AuditLog(at=utcnow(), actor=username,
                                 action="invitation.accept" if accept else "invitation.decline",
                                 details={"course": name, "role": role}))
            return role

    async def import_roster(
        self, caller: authz.Caller, name: str, data: bytes, remove_missing: bool
    ) -> dict[str, Any]:
        """Import a roster CSV: valid rows join (or change role), bad rows are reported by line.

        Re-importing the same file changes nothing. Names the hub itself refuses (its
        authenticator's username rules) are reported on their line too and not imported. The
        enrolment rules of the members API apply line by line: people who belong to another
        course are invited (listed under "invited"), hub admins are refused on their line
        unless an admin imports.
        """
        actor = caller.name
        parsed = roster.parse_roster(data, self.normalize)
        errors = [
            {"line": e.line, "value": e.value, "message": e.message, "code": e.code}
            for e in parsed.errors
        ]
        async with self._lock(name):
            current = await self._db(self._members, name)
            plan = roster.diff_roster(current, parsed.rows, remove_missing)
            direct, invited, not_allowed = await self._enrolments(
                caller, name, {row.username: row.role for row in plan.adds})
            refused = await self.hub.create_users(direct)
            adds = [row for row in plan.adds if row.username in direct and row.username not in refused]
            for row in plan.adds:
                reason = not_allowed.get(row.username) or refused.get(row.username)
                if reason:
                    hub_admin = row.username in not_allowed
                    errors.append({
                        "line": row.line, "value": row.username,
                        "code": "hub-admin" if hub_admin else "hub-refused",
                        "message": f"{reason[0].lower()}{reason[1:].rstrip('.')}; delete the line"
                        if hub_admin else f"the hub refused the username {row.username!r} "
                                          f"({reason}); fix or delete the line",
                    })
            set_roles = {row.username: row.role for row in adds}
            set_roles.update({change.username: change.new for change in plan.role_changes})
            removed = [r.username for r in plan.removals]
            if set_roles or removed or invited:
                await self._db(self._apply, actor, name, set_roles, removed, "roster.import",
                               invites=invited, errors=len(errors))
            await self._sync(name, created=(row.username for row in adds))
            await self.push_roles()
        errors.sort(key=lambda e: e["line"])
        return {
            "imported": len(set_roles),
            "added": len(adds),
            "invited": sorted(invited),
            "changed": len(plan.role_changes),
            "unchanged": len(plan.unchanged),
            "removed": len(removed),
            "protected": list(plan.protected),
            "errors": errors,
            "encoding": parsed.encoding,
        }

    # ------------------------------------------------------------------ hub group sync

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _sync(self, name: str, created: Iterable[str] = ()) -> dict[str, list[str]]:
        """Make hub group `name` hold exactly the course's members (creating hub users as needed;
        `created` are users the caller just made sure exist).

        Returns what changed ({"added", "removed", "refused"}); refused are members the hub
        will not create (they stay in the store and are retried at the next sync).
        """
        wanted = set(await self._db(self._members, name))
        group = await self.hub.group(name)
        if group is None:
            await self.hub.create_group(name)
            have: set[str] = set()
        else:
            have = set(group.get("users") or [])
        missing, extra = sorted(wanted - have), sorted(have - wanted)
        done = set(created)
        refused = await self.hub.create_users([u for u in missing if u not in done])
        added = [u for u in missing if u not in refused]
        await self.hub.add_group_users(name, added)
        await self.hub.remove_group_users(name, extra)
        return {"added": added, "removed": extra, "refused": sorted(refused)}

    def _role_state(self) -> dict[str, Any]:
        with self.reads() as session:
            members = all_members(session)
            ta_access = ta_access_by_course(session)
        return {course: {"members": people,
                         "ta_server_access": ta_access.get(course, self.ta_server_access)}
                for course, people in members.items()}

    async def push_roles(self) -> None:
        """Make the hub's course roles match the store now (hub_ext.hubside): a new TA gets
        their powers and a removed one loses them without a hub restart. Serialised, so an
        older state never lands after a newer one."""
        async with self._roles_lock:
            await self.hub.set_course_roles(await self._db(self._role_state))

    async def sync_group(self, name: str) -> dict[str, list[str]]:
        async with self._lock(name):
            return await self._sync(name)

    async def reconcile(self) -> None:
        """At service start: adopt hub groups marked as courses in their properties that the
        store does not know yet, then make every course's hub group match the store."""
        known = set(await self._db(self._course_names))
        for group in await self.hub.groups():
            if group["name"] in known:
                continue
            if roles.CourseStaff.from_group_properties(group.get("properties")) is None:
                continue
            full = await self.hub.group(group["name"]) or group
            await self._db(self._create, "classhub-reconcile", group["name"], "", _group_roles(full))
            log.info("adopted hub group %s as a classhub course", group["name"])
            known.add(group["name"])
        for name in sorted(known):
            changed = await self.sync_group(name)
            if any(changed.values()):
                log.info("synced hub group %s with the course: %s", name, changed)
        await self.push_roles()

    def _course_names(self) -> list[str]:
        with self.reads() as session:
            return list(session.scalars(select(Course.name)))

    # ------------------------------------------------------------------ quotas

    def _course_limits(self, name: str) -> Limits:
        with self.reads() as session:
            course = self._course(session, name)
            quota = session.get(CourseQuota, course.id)
            return quota.limits if quota else Limits()

    async def course_quota(self, name: str) -> dict[str, Any]:
        return (await self._db(self._course_limits, name)).to_dict()

    async def set_course_quota(self, actor: str, name: str, limits: Limits) -> dict[str, Any]:
        await self._db(self._set_course_quota, actor, name, limits)
        return limits.to_dict()

    def _set_course_quota(self, actor: str, name: str, limits: Limits) -> None:
        with self.sessions.begin() as session:
            set_course_limits(session, self._course(session, name), limits, actor=actor, now=utcnow())

    def _user_limits(self, name: str, username: str) -> Limits:
        with self.reads() as session:
            course = self._course(session, name)
            self._require_member(session, course, username)
            quota = session.scalars(
                select(UserQuota).where(UserQuota.course_id == course.id, UserQuota.username == username)
            ).one_or_none()
            return quota.limits if quota else Limits()

    @staticmethod
    def _require_member(session: Session, course: Course, username: str) -> None:
        member = session.scalars(
            select(Membership.id).where(Membership.course_id == course.id, Membership.username == username)
        ).first()
        if member is None:
            raise web.HTTPError(
                404, "%s is not a member of %s; add them with PUT /api/courses/%s/members first.",
                username, course.name, course.name,
            )

    async def user_quota(self, name: str, username: str) -> dict[str, Any]:
        return (await self._db(self._user_limits, name, username)).to_dict()

    async def set_user_quota(self, actor: str, name: str, username: str, limits: Limits) -> dict[str, Any]:
        """Set one member's limits; a BodyError (400) when they are above the course ceiling."""
        await self._db(self._set_user_quota, actor, name, username, limits)
        return limits.to_dict()

    def _set_user_quota(self, actor: str, name: str, username: str, limits: Limits) -> None:
        with self.sessions.begin() as session:
            course = self._course(session, name)
            self._require_member(session, course, username)
            try:
                set_user_limits(session, course, username, limits, actor=actor, now=utcnow())
            except ValueError as e:  # hub_ext.core's meaning check: the limits fit the ceiling
                raise BodyError(f"Over the course ceiling: {e}. Lower the limit, or ask a hub admin "
                                f"to raise the ceiling of {name}.") from None

    # ------------------------------------------------------------------ usage

    def _course_usage(self, name: str) -> dict[str, Any]:
        """The course's usage and each member's, from one grouped ledger query (not one per
        member: a lecture has hundreds)."""
        limits = self._course_limits(name)  # 404 for a missing course
        total, users = self.ledger.usage_by_user(utcnow(), course=name)
        return {
            "course": name,
            "limits": limits.to_dict(),
            "usage": usage_json(total),
            "users": {user: usage_json(usage) for user, usage in sorted(users.items())},
        }

    async def course_usage(self, name: str) -> dict[str, Any]:
        return await self._db(self._course_usage, name)

    def _my_usage(self, username: str) -> dict[str, Any]:
        now = utcnow()
        courses = {}
        for course, role in sorted(self._roles_of(username).items()):
            courses[course] = {
                "role": role,
                "usage": usage_json(self.ledger.usage(now, course=course, username=username)),
                "limits": self._user_limits(course, username).to_dict(),
                "course_limits": self._course_limits(course).to_dict(),
            }
        return {
            "name": username,
            "usage": usage_json(self.ledger.usage(now, username=username)),
            "courses": courses,
        }

    async def my_usage(self, username: str) -> dict[str, Any]:
        return await self._db(self._my_usage, username)

    def _all_usage(self) -> dict[str, Any]:
        """Every course's usage and every user's, in two grouped ledger queries."""
        now = utcnow()
        by_course = self.ledger.usage_by_course(now)
        return {
            "courses": {
                name: {
                    "limits": self._course_limits(name).to_dict(),
                    "usage": usage_json(by_course.get(name, Usage())),
                }
                for name in sorted(self._course_names())
            },
            "users": {user: usage_json(usage)
                      for user, usage in sorted(self.ledger.usage_by_user(now)[1].items())},
        }

    async def all_usage(self) -> dict[str, Any]:
        return await self._db(self._all_usage)


def _group_roles(group: Mapping[str, Any]) -> dict[str, str]:
    """Members of a hub group with their roles, from the group's classhub properties if any."""
    staff = roles.CourseStaff.from_group_properties(group.get("properties")) or roles.CourseStaff()
    return {user: staff.role_of(user) for user in group.get("users") or []}
