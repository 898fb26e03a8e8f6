"""The course audit log as sentences a teacher reads ("teacher1 set student2's GPU-hours per
week to 2"), from the entries the store keeps (actor, action code, details).

The action codes come from several writers in two spellings (``quota.user.set``,
``template_seeded``); this is the one place that says what each means to a person. An action
not known here still reads as a sentence ("teacher1: some.action"), and the page shows every
entry's details folded beneath it, so nothing recorded is hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Details = Mapping[str, Any]


def _names(value: Any) -> str:
    """``["a", "b", "c"]`` as "a, b and c" (a mapping: its keys)."""
    items = sorted(value) if isinstance(value, (list, tuple, set, dict)) else [value]
    items = [str(i) for i in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _limits(limits: Any) -> str:
    """Quota limits as "GPU-hours per week 2, servers 1, cpu 4" ("no limits" when none is set)."""
    if not isinstance(limits, Mapping):
        return "no limits"
    parts = []
    if limits.get("gpu_hours_per_week") is not None:
        parts.append(f"GPU-hours per week {limits['gpu_hours_per_week']}")
    if limits.get("servers") is not None:
        parts.append(f"servers {limits['servers']}")
    for name, value in sorted((limits.get("resources") or {}).items()):
        parts.append(f"{name} {value}")
    return ", ".join(parts) or "no limits"


def _members(actor: str, d: Details, how: str) -> str:
    said = []
    roles: dict[str, list[str]] = {}
    for user, role in sorted((d.get("set") or {}).items()):
        roles.setdefault(str(role), []).append(str(user))
    for role, users in sorted(roles.items()):
        said.append(f"made {_names(users)} {role}{'s' if len(users) > 1 else ''}")
    if d.get("removed"):
        said.append(f"removed {_names(d['removed'])}")
    if d.get("invited"):
        said.append(f"invited {_names(d['invited'])}")
    if d.get("withdrawn"):
        said.append(f"withdrew the invitation of {_names(d['withdrawn'])}")
    return f"{actor} {how}" + (": " + "; ".join(said) if said else ", which changed nothing")


def _share_target(d: Details) -> str:
    kind, target = d.get("target_kind"), d.get("target")
    if kind == "link":
        return "anyone with the link"
    if kind == "group":
        return f"the course {target}"
    return str(target or "someone")


def _share_what(d: Details) -> str:
    owner = d.get("owner", "someone")
    return f"{owner}'s {d['path']}" if d.get("path") else f"{owner}'s server"


def _seeded(actor: str, d: Details) -> str:
    summary = d.get("summary") or {}
    done = ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in sorted(summary.items()) if n)
    return (f"{actor}'s home got the files of {d.get('template', 'a template')} "
            f"v{d.get('version', '?')}" + (f" ({done})" if done else ""))


_SENTENCES: dict[str, Callable[[str, Details], str]] = {
    "course.create": lambda a, d: f"{a} created the course {d.get('course', '')}",
    "course.delete": lambda a, d: f"{a} deleted the course {d.get('course', '')}",
    "members.change": lambda a, d: _members(a, d, "changed the members"),
    "roster.import": lambda a, d: _members(a, d, "imported a roster"),
    "invitation.accept": lambda a, d: f"{a} accepted the invitation to {d.get('course', 'the course')}",
    "invitation.decline": lambda a, d: f"{a} declined the invitation to {d.get('course', 'the course')}",
    "quota.course.set": lambda a, d: f"{a} set the course's limits to {_limits(d.get('limits'))}",
    "quota.user.set": lambda a, d: (f"{a} set {d.get('username', 'a member')}'s limits to "
                                    f"{_limits(d.get('limits'))}"),
    "template_published": lambda a, d: (f"{a} published {d.get('template', 'a template')} "
                                        f"v{d.get('version', '?')} ({d.get('files', '?')} files)"),
    "template_settings": lambda a, d: (
        f"{a} set homes to be re-seeded "
        + ("at every server start" if d.get("reseed") == "on_start" else "when a student presses Start")),
    "template_seeded": _seeded,
    "spawn_denied": lambda a, d: f"{a}'s server was not started: {d.get('message') or d.get('reason', '')}",
    "course_sharing_set": lambda a, d: (
        f"{a} " + ("let TAs open students' servers" if d.get("ta_server_access")
                   else "made TAs need a share to open a student's server")),
    "culling_policy_set": lambda a, d: f"{a} changed the idle-server policy ({d.get('kind', '')})",
    "no_cull_window_added": lambda a, d: (f"{a} kept servers running from {d.get('start', '?')} "
                                          f"to {d.get('end', '?')}"),
    "no_cull_window_removed": lambda a, d: f"{a} removed a time when servers keep running",
    "share_created": lambda a, d: (f"{a} shared {_share_what(d)} {d.get('kind', '')} with "
                                   f"{_share_target(d)}"),
    "share_revoked": lambda a, d: f"{a} stopped sharing {_share_what(d)} with {_share_target(d)}",
    "share_expired": lambda a, d: f"the share of {_share_what(d)} with {_share_target(d)} expired",
    "share_link_accepted": lambda a, d: f"{a} used a link to {_share_what(d)}",
    "share_opened": lambda a, d: f"{a} opened {_share_what(d)}",
    "share_accessed": lambda a, d: f"{a} opened {_share_what(d)}",
    "share_copied": lambda a, d: (f"{a} copied {d.get('path', 'a file')} from "
                                  f"{d.get('owner', 'someone')}'s server"),
    "share_auto_started": lambda a, d: f"{a} started {d.get('owner', 'someone')}'s server to open a share",
    "assignment_released": lambda a, d: (f"{a} released the assignment {d.get('assignment', '')} "
                                         f"({d.get('template', 'a template')} v{d.get('version', '?')})"),
    "assignment_changed": lambda a, d: (f"{a} changed {', '.join(d.get('changed') or []) or 'nothing'} "
                                        f"of the assignment {d.get('assignment', '')}"),
    "assignment_submitted": lambda a, d: (f"{a} submitted {d.get('assignment', 'an assignment')} "
                                          f"({d.get('files', '?')} files"
                                          + (", late)" if d.get("late") else ")")),
    "autograde_set": lambda a, d: (f"{a} turned autograding on for {d.get('assignment', 'an assignment')} "
                                   f"({', '.join(d.get('notebooks') or [])}, "
                                   f"profile {d.get('profile', '?')}, "
                                   f"{_points(d.get('max_score'))} points)"),
    "submission_graded": lambda a, d: (f"submission {d.get('submission', '?')} of {d.get('student', '?')} "
                                       f"to {d.get('assignment', 'an assignment')} was graded: "
                                       f"{_points(d.get('score'))} / {_points(d.get('max_score'))} "
                                       f"({d.get('outcome', '?')})"),
    "regrade_asked": lambda a, d: (f"{a} asked to regrade submission {d.get('submission', '?')} of "
                                   f"{d.get('student', '?')} to {d.get('assignment', 'an assignment')}"),
    "score_overridden": lambda a, d: (f"{a} set {d.get('cell', 'a cell')} of {d.get('student', '?')}'s "
                                      f"{d.get('assignment', 'assignment')} to {_points(d.get('score'))} "
                                      f"(was {_points(d.get('before'))})"
                                      + (f": {d['reason']}" if d.get("reason") else "")),
    "submissions_downloaded": lambda a, d: (f"{a} downloaded {d.get('submissions', '?')} submissions of "
                                            f"{d.get('assignment', 'an assignment')}"),
    "course_data_uploaded": lambda a, d: (f"{a} uploaded {d.get('path', 'a file')} "
                                          f"({_size(d.get('bytes'))}) to the course data"),
    "course_data_deleted": lambda a, d: (f"{a} deleted the {d.get('kind', 'file')} "
                                         f"{d.get('path', '')} from the course data"),
    "course_data_folder": lambda a, d: f"{a} made the folder {d.get('path', '')} in the course data",
    "course_data_limit": lambda a, d: (f"{a} set the course data limit to "
                                       + ("the hub's default" if d.get("max_bytes") is None
                                          else "no limit" if not d.get("max_bytes")
                                          else _size(d.get("max_bytes")))),
    "course_data_copied": lambda a, d: (f"{a} copied {d.get('source', 'a folder')} from their server to "
                                        f"{d.get('path', '')} in the course data ({d.get('files', '?')} "
                                        f"file{'' if d.get('files') == 1 else 's'}, "
                                        f"{_size(d.get('bytes'))})"),
    "competition_created": lambda a, d: (f"{a} created the competition {d.get('competition', '')} "
                                         f"({d.get('metric', 'a metric')})"),
    "competition_labels": lambda a, d: (f"{a} uploaded {d.get('rows', '?')} hidden labels of the "
                                        f"competition {d.get('competition', '')}"),
    "competition_changed": lambda a, d: (f"{a} changed {', '.join(d.get('changed') or []) or 'nothing'} "
                                         f"of the competition {d.get('competition', '')}"),
    "predictions_submitted": lambda a, d: (f"{a} submitted predictions to "
                                           f"{d.get('competition', 'a competition')}"
                                           + (f" (public score {d['public_score']:.4g})"
                                              if isinstance(d.get("public_score"), (int, float)) else "")),
    "notebook_submitted": lambda a, d: (f"{a} submitted a notebook to "
                                        f"{d.get('competition', 'a competition')} (submission "
                                        f"{d.get('submission', '?')}, runs as a job)"),
    "competition_scored": lambda a, d: (f"{d.get('student', 'a student')}'s submission "
                                        f"{d.get('submission', '?')} to "
                                        f"{d.get('competition', 'a competition')} was scored"
                                        + (f" (public score {d['public_score']:.4g})"
                                           if isinstance(d.get("public_score"), (int, float)) else "")),
    "competition_run_failed": lambda a, d: (f"{d.get('student', 'a student')}'s submission "
                                            f"{d.get('submission', '?')} to "
                                            f"{d.get('competition', 'a competition')} failed: "
                                            f"{d.get('message', '')}"),
    "competition_runner_set": lambda a, d: (f"{a} let the competition {d.get('competition', '')} take "
                                            f"notebooks (profile {d['profile']}, writing "
                                            f"{d.get('predictions_file', '?')})" if d.get("profile") else
                                            f"{a} stopped the competition {d.get('competition', '')} "
                                            "taking notebooks"),
    "competition_scorer_set": lambda a, d: (f"{a} set the competition {d.get('competition', '')} to be "
                                            + ("scored by a scoring script" if d.get("scored_by") == "script"
                                               else f"scored by its metric {d.get('scored_by', '')}")),
    "competition_rescore": lambda a, d: (f"{a} asked to run {d.get('student', 'a student')}'s submission "
                                         f"{d.get('submission', '?')} to {d.get('competition', '')} again"),
    "server_persistent": lambda a, d: f"{a} kept {d.get('user', 'a user')}'s server from being culled",
    "server_not_persistent": lambda a, d: f"{a} let {d.get('user', 'a user')}'s server be culled again",
}


def _points(value: object) -> str:
    """A score as a person writes it: 5, 4.5, or "no score"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "no score"
    return f"{value:g}"


def _size(n: object) -> str:
    if not isinstance(n, int):
        return "? bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return f"{n} bytes"


def audit_sentence(actor: str, action: str, details: Details | None) -> str:
    """What an audit entry says, as one sentence without its time (the page shows the time)."""
    details = details or {}
    write = _SENTENCES.get(action)
    if write is None:
        return f"{actor}: {action.replace('_', ' ')}"
    try:
        text = write(actor, details)
    except (AttributeError, TypeError, ValueError):  # an entry of an older shape
        return f"{actor}: {action.replace('_', ' ')}"
    return " ".join(text.split())


def login_sentence(authenticator_class: str | None) -> str:
    """How people added to a course log in, from the hub's authenticator class (the hub's
    ``/hub/api/info``; None when the service may not read it: the generic sentence)."""
    name = (authenticator_class or "").rsplit(".", 1)[-1]
    lowered = (authenticator_class or "").lower()
    if name == "DemoAuthenticator":
        return ("People you add log in on this hub's login page with their username and the demo "
                "password (printed when classhub local started; kept in the data folder's "
                "demo-password file).")
    if name == "DummyAuthenticator":
        return ("People you add log in on this hub's login page with their username; this test "
                "hub's DummyAuthenticator checks no real password.")
    if "nativeauthenticator" in lowered or name == "NativeAuthenticator":
        return ("People you add sign up on this hub's sign-up page with exactly the username you "
                "gave, then log in (an admin may have to approve the sign-up).")
    if "oauthenticator" in lowered or name.endswith("OAuthenticator"):
        provider = name[: -len("OAuthenticator")] or "single sign-on"
        return (f"People you add log in with their {provider} account; the username you give must "
                "be the one that account has on this hub.")
    if name in ("PAMAuthenticator", "LocalAuthenticator", "SystemdAuthenticator"):
        return ("People you add log in with their account on this machine (its username and "
                "password).")
    if name:
        return f"People you add log in on this hub's login page ({name}) with the username you give."
    return "People you add log in on this hub's login page with the username you give."
