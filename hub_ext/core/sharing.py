"""Who may do what on a shared single-user server: one pure decision per request.

Why here: the single-user server (hub_ext.singleuser.authorizer) must refuse a read-only viewer's
write, kernel execution or terminal the same way every time, and that promise is tested
exhaustively without a server (tests/test_core_sharing.py) and through a real hub
(tests/test_sharing_hub.py).

How a caller's rights are read from their JupyterHub scopes (the hub computes them from roles
and shares; the server learns them from the hub's ``/api/user`` answer):

- the server's owner may do everything;
- ``access:servers`` for this server is needed for anything (the hub and JupyterHub's own
  singleuser extension already insist on it);
- full ("editable") access comes from ``custom:classhub:edit`` for this server (a classhub
  editable share, or a course role that lets TAs open students' servers) or from
  ``access:servers`` that is not limited to this one server (``!user=<owner>`` or unfiltered:
  static roles such as a hub admin's or a course role; shares are always ``!server=``-filtered);
- otherwise access is read-only: a classhub read-only share (``custom:classhub:read-only``),
  and also, failing closed, a bare JupyterHub share made without classhub's scopes;
- ``custom:classhub:one-path`` for this server limits the caller to the paths classhub recorded
  for them (the hub keeps no paths; the server asks the classhub service for them).

Read-only means: read contents and files, list kernels, sessions and kernelspecs, listen to
events; every write (``PUT/POST/PATCH/DELETE``), kernel execution (REST starts and the kernel
channels websocket, authorized as ``execute`` on ``kernels``), and terminals are refused.

Pure: standard library only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

__all__ = [
    "CUSTOM_SCOPES",
    "EDIT",
    "EDIT_SCOPE",
    "NONE",
    "ONE_PATH_SCOPE",
    "OWNER",
    "READ_ONLY",
    "READ_ONLY_SCOPE",
    "Grant",
    "Request",
    "Verdict",
    "background_request",
    "decide",
    "grant_from_scopes",
    "handler_resource",
    "normalise_path",
    "request_path",
    "share_scopes",
    "shared_children",
]

SCOPE_PREFIX = "custom:classhub:"
READ_ONLY_SCOPE = f"{SCOPE_PREFIX}read-only"
EDIT_SCOPE = f"{SCOPE_PREFIX}edit"
ONE_PATH_SCOPE = f"{SCOPE_PREFIX}one-path"
ACCESS_SCOPE = "access:servers"

#: For ``c.JupyterHub.custom_scopes`` (every custom scope needs a description).
CUSTOM_SCOPES: dict[str, dict[str, str]] = {
    READ_ONLY_SCOPE: {"description": "Read-only access to a shared single-user server: read files "
                                     "and outputs; no edits, no code execution, no terminals."},
    EDIT_SCOPE: {"description": "Editable access to a shared single-user server: edit files and "
                                "run code (everything but managing its shares)."},
    ONE_PATH_SCOPE: {"description": "Limits access to a shared single-user server to the paths "
                                    "classhub recorded for the share."},
}

# Access levels, least to most.
NONE = "none"
READ_ONLY = "read-only"
EDIT = "edit"
OWNER = "owner"
KINDS = (READ_ONLY, EDIT)

# jupyter-server authorization actions.
READ = "read"
WRITE = "write"
EXECUTE = "execute"
ACTIONS = (READ, WRITE, EXECUTE)

#: Resources whose requests name a file path (the rest of the URL after the prefix).
PATH_RESOURCES = {"contents": "api/contents", "files": "files", "nbconvert": "nbconvert", "view": "view"}
#: Resources a path-limited viewer may read because they reveal no files. Not ``events`` (the
#: server's event stream names every file the owner opens, saves, renames or deletes) nor
#: `WORKSPACES`; a resource not named here is refused to a path-limited viewer (deny by default).
NEUTRAL_RESOURCES = frozenset({"kernelspecs", "api", "config", "lab", "server", "csp", "security"})
#: JupyterLab's saved layouts (``lab/api/workspaces``), kept in the owner's home: they name the
#: owner's open files. Their handlers skip ``@authorized``; `handler_resource` names them.
WORKSPACES = "workspaces"
#: Resources an editable path-limited collaborator needs to run the shared notebook.
RUN_RESOURCES = frozenset({"kernels", "sessions"})


@dataclass(frozen=True)
class Grant:
    """What a caller holds on one server: a `level`, and the paths it is limited to (None: all)."""

    level: str
    paths: frozenset[str] | None = None


@dataclass(frozen=True)
class Request:
    """One request to the server: jupyter-server's `action` (read/write/execute) on `resource`
    (contents, files, kernels, sessions, terminals, ...), the HTTP `method`, and the file `path`
    it names (normalised, relative to the server's root; None when the resource has no path)."""

    action: str
    resource: str
    method: str = "GET"
    path: str | None = None
    checkpoint: bool = False  # a file's checkpoints (``.../checkpoints[/<id>]``), not the file


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOW = Verdict(True)


def _matches(scope: str, base: str, owner: str, server: str) -> tuple[bool, bool]:
    """(applies to this server, applies beyond this one server) for one expanded scope."""
    name, _, filt = scope.partition("!")
    if name != base:
        return False, False
    if not filt:
        return True, True
    if filt == f"user={owner}":
        return True, True
    if filt == f"server={owner}/{server}":
        return True, False
    return False, False  # another user or server, or a !group= filter a server cannot resolve


def grant_from_scopes(scopes: Iterable[str], owner: str, server: str, *, caller: str | None = None,
                      caller_kind: str = "user") -> Grant:
    """The caller's level on `owner`'s server `server` ("" for the default server) from their
    expanded scopes. Paths of a one-path grant are not in the scopes: `Grant.paths` is an empty
    set then, to be filled with `with_paths`."""
    if caller_kind == "user" and caller == owner:
        return Grant(OWNER)
    access = broad = edit = read_only = one_path = False
    for scope in scopes:
        ok, wide = _matches(scope, ACCESS_SCOPE, owner, server)
        access |= ok
        broad |= ok and wide
        edit |= _matches(scope, EDIT_SCOPE, owner, server)[0]
        read_only |= _matches(scope, READ_ONLY_SCOPE, owner, server)[0]
        one_path |= _matches(scope, ONE_PATH_SCOPE, owner, server)[0]
    if not access:
        return Grant(NONE)
    if broad:
        return Grant(EDIT)  # a static role (admin, course staff): never path-limited
    level = EDIT if edit else READ_ONLY
    return Grant(level, frozenset() if one_path else None)


def with_paths(grant: Grant, paths: Iterable[str]) -> Grant:
    """`grant` limited to `paths` when it is a one-path grant (others are returned unchanged)."""
    if grant.paths is None:
        return grant
    return Grant(grant.level, frozenset(paths))


def share_scopes(kind: str, owner: str, server: str = "", one_path: bool = False) -> list[str]:
    """The JupyterHub scopes a classhub share of `kind` grants on `owner`/`server`."""
    if kind not in KINDS:
        raise ValueError(f"kind must be 'read-only' or 'edit', not {kind!r}")
    target = f"!server={owner}/{server}"
    scopes = [f"{ACCESS_SCOPE}{target}", f"{READ_ONLY_SCOPE if kind == READ_ONLY else EDIT_SCOPE}{target}"]
    if one_path:
        scopes.append(f"{ONE_PATH_SCOPE}{target}")
    return scopes


def kind_of_scopes(scopes: Iterable[str]) -> tuple[str, bool]:
    """(kind, one_path) of a share's scopes as JupyterHub lists them (filters included)."""
    bases = {s.partition("!")[0] for s in scopes}
    return (EDIT if EDIT_SCOPE in bases else READ_ONLY), ONE_PATH_SCOPE in bases


def normalise_path(raw: str) -> str:
    """A file path as classhub compares it: URL-decoded once, relative to the server's root, with
    no empty or ``.`` segments, e.g. ``"a/b.ipynb"`` ("" is the root). Raises ValueError (with a
    sentence for the user) for ``..``, absolute-looking and control-character paths."""
    if not isinstance(raw, str):
        raise ValueError("The path must be a string, e.g. \"lecture/week1.ipynb\".")
    text = unquote(raw)
    if any(ord(ch) < 32 for ch in text) or "\\" in text:
        raise ValueError(f"The path {raw!r} contains control characters or backslashes; use "
                         "a path relative to the server's root, e.g. \"lecture/week1.ipynb\".")
    if text.startswith("~"):
        raise ValueError(f"The path {raw!r} is not relative to the server's root; drop the '~'.")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"The path {raw!r} leaves its folder with '..'; name the file inside the "
                         "server's root instead, e.g. \"lecture/week1.ipynb\".")
    return "/".join(parts)


def request_path(resource: str, url_path: str) -> str | None:
    """The file path a request names, from its URL path after the server's base URL, e.g.
    ``("contents", "api/contents/a/b.ipynb/checkpoints") -> "a/b.ipynb"``; None when the
    resource has no path. Raises ValueError for a path that leaves the root."""
    prefix = PATH_RESOURCES.get(resource)
    if prefix is None:
        return None
    rest = url_path.strip("/")
    if not (rest == prefix or rest.startswith(prefix + "/")):
        return None  # e.g. a lab page that reads contents through the API later
    rest = rest[len(prefix):].strip("/")
    if resource == "nbconvert":
        rest = rest.partition("/")[2]  # nbconvert/<format>/<path>
    if resource == "contents":
        rest = _CHECKPOINT.sub("", rest)  # a file's checkpoints belong to the file
    return normalise_path(rest)


#: jupyter-server's checkpoint routes: ``<path>/checkpoints`` and ``<path>/checkpoints/<id>``.
_CHECKPOINT = re.compile(r"(?:^|/)checkpoints(?:/[\w-]+)?$")


def is_checkpoint_url(resource: str, url_path: str) -> bool:
    """Whether a contents request is about a file's checkpoints (save points JupyterLab makes
    on save), e.g. ``api/contents/a.ipynb/checkpoints/checkpoint``."""
    return resource == "contents" and bool(_CHECKPOINT.search(url_path.strip("/")))


def _deny(message: str) -> Verdict:
    return Verdict(False, message)


def decide(grant: Grant, request: Request) -> Verdict:
    """May a caller holding `grant` make `request`? Refusals say why in one sentence."""
    if request.action not in ACTIONS:
        return _deny(f"Unknown action {request.action!r}.")
    if grant.level == OWNER:
        return ALLOW
    if grant.level == NONE:
        return _deny("This server is not shared with you.")
    resource = request.resource
    if grant.level == READ_ONLY:
        if resource == "terminals":
            return _deny("This server is shared with you read-only: terminals are not available.")
        if request.action == WRITE:
            return _deny("This server is shared with you read-only: you cannot change files, "
                         "kernels or settings. Ask the owner for an editable share, or copy the file.")
        if request.action == EXECUTE and resource != "events":
            return _deny("This server is shared with you read-only: you cannot run code.")
    if grant.paths is not None:
        return _decide_path(grant, request)
    return ALLOW


def _decide_path(grant: Grant, request: Request) -> Verdict:
    resource = request.resource
    shared = ", ".join(sorted(grant.paths)) or "no path"
    if resource in PATH_RESOURCES:
        if request.path is None or request.path not in grant.paths:
            return _deny(f"Only {shared} is shared with you on this server.")
        changes_files = request.method in ("PATCH", "POST", "DELETE") and not request.checkpoint
        if resource == "contents" and changes_files:
            return _deny(f"Only {shared} is shared with you: you may save it, not rename, copy, "
                         "create or delete files.")
        return ALLOW
    if resource in NEUTRAL_RESOURCES and request.action != WRITE:
        return ALLOW
    if resource in RUN_RESOURCES and grant.level == EDIT:
        return ALLOW
    return _deny(f"Only {shared} is shared with you on this server; {resource} is not part of it.")


# -- JupyterLab's background requests ----------------------------------------------------------

#: How a viewer's server answers a background request the viewer may not make (see
#: `background_request`): an empty list, a layout not kept, a folder listing only shared entries,
#: an empty layout (the owner's saved workspaces are not shown).
EMPTY_LIST = "empty-list"
NOT_KEPT = "not-kept"
SHARED_ONLY = "shared-only"
EMPTY_WORKSPACE = "empty-workspace"
SILENT_STREAM = "silent-stream"

_RUNNING_LISTS = {"api/kernels": "kernels", "api/sessions": "sessions", "api/terminals": "terminals"}


def background_request(method: str, url_path: str, level: str) -> tuple[str, str, str] | None:
    """(answer, action, resource) for a request JupyterLab repeats on its own, else None.

    Only for a viewer who still holds a share (`level` read-only or edit): a revoked or expired
    share keeps its refusals, so the viewer's JupyterLab learns that the access ended.

    Why: JupyterLab polls the running kernels, sessions and terminals, lists the file browser's
    folder and saves its layout (``PUT lab/api/workspaces/<id>``) every few seconds, whatever the
    viewer does. Refusing those with 403 filled the owner's log with warnings and the viewer's
    console with errors while protecting nothing. When `decide` refuses one of them, the server
    answers as JupyterLab expects instead: nothing runs that the viewer may see (`EMPTY_LIST`),
    the viewer's layout is not kept on the owner's server (`NOT_KEPT`), a folder above a shared
    file lists the shared entries only (`SHARED_ONLY`). Everything else keeps its refusal.
    """
    if level not in KINDS:
        return None
    path = url_path.strip("/")
    method = method.upper()
    if method == "GET" and path in _RUNNING_LISTS:
        return EMPTY_LIST, READ, _RUNNING_LISTS[path]
    if method == "PUT" and path.startswith("lab/api/workspaces/"):
        return NOT_KEPT, WRITE, "lab"
    if method == "GET" and path == "api/events/subscribe":  # opened, but carries no event
        return SILENT_STREAM, EXECUTE, "events"
    if method == "GET" and (path == "lab/api/workspaces" or path.startswith("lab/api/workspaces/")):
        return EMPTY_WORKSPACE, READ, WORKSPACES
    if method == "GET" and (path == "api/contents" or path.startswith("api/contents/")) \
            and not _CHECKPOINT.search(path):
        return SHARED_ONLY, READ, "contents"
    return None


def handler_resource(url_path: str, auth_resource: str | None) -> str:
    """The resource a request is checked against when its handler does not name one itself:
    `WORKSPACES` for JupyterLab's saved layouts, else the handler's ``auth_resource``, else
    ``lab`` (JupyterLab's pages, settings and static files)."""
    path = url_path.strip("/")
    if path == "lab/api/workspaces" or path.startswith("lab/api/workspaces/"):
        return WORKSPACES
    return auth_resource or "lab"


def shared_children(paths: Iterable[str], folder: str) -> tuple[str, ...]:
    """The entries directly in `folder` that are shared paths or lead to one, as paths from the
    root (sorted), e.g. ``({"lab1/a.ipynb"}, "") -> ("lab1",)``; empty when `folder` holds none."""
    prefix = f"{folder}/" if folder else ""
    found = set()
    for path in paths:
        if path != folder and path.startswith(prefix):
            found.add(prefix + path[len(prefix):].split("/", 1)[0])
    return tuple(sorted(found))


# -- share requests (the classhub API) ------------------------------------------------------------

TARGETS = ("user", "group", "link")
#: Longest broadcast or link, in minutes (JupyterHub's share codes allow a year; a lecture less).
MAX_MINUTES = 525600
#: Shortest expiry in seconds (``expires_in``; the service checks expiries every few seconds).
MIN_SECONDS = 5


@dataclass(frozen=True)
class ShareSpec:
    """A validated request to share a server: see `parse_share_request`."""

    owner: str
    server: str
    kind: str
    target_kind: str
    target: str
    path: str | None
    seconds: int | None
    auto_start: bool


def parse_share_request(body: object, caller: str) -> ShareSpec:
    """Validate the JSON body of ``POST /api/shares``; ValueError says what to change.

    ``{"kind": "read-only"|"edit", "user": name | "group": name | "link": true,
    "path": "dir/nb.ipynb" (optional), "minutes": N or "expires_in": seconds (expiry; required
    for links),
    "auto_start": bool, "owner": name (default: the caller), "server": "" (default server)}``
    """
    example = ' e.g. {"kind": "read-only", "user": "ta1", "path": "week1.ipynb"}'
    if not isinstance(body, dict):
        raise ValueError("The body must be a JSON object," + example)
    known = {"kind", "user", "group", "link", "path", "minutes", "expires_in", "auto_start", "owner",
             "server"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise ValueError(f"Unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}.")
    kind = body.get("kind", READ_ONLY)
    if kind not in KINDS:
        raise ValueError(f"kind must be 'read-only' or 'edit', not {kind!r}.")
    targets = [t for t in ("user", "group") if body.get(t) not in (None, "")]
    if body.get("link"):
        targets.append("link")
    if len(targets) != 1:
        raise ValueError("Name exactly one of 'user', 'group' or 'link': true," + example)
    target_kind = targets[0]
    target = "" if target_kind == "link" else body[target_kind]
    if not isinstance(target, str) or len(target) > 255:
        raise ValueError(f"{target_kind} must be a name (text of at most 255 characters).")
    path = body.get("path")
    if path is not None:
        path = normalise_path(path)
        if not path:
            raise ValueError("path names the whole server; leave it out to share everything.")
    minutes, expires_in = body.get("minutes"), body.get("expires_in")
    if minutes is not None and expires_in is not None:
        raise ValueError("Give either 'minutes' or 'expires_in' (seconds), not both.")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int)
                                or not 1 <= minutes <= MAX_MINUTES):
        raise ValueError(f"minutes must be a whole number from 1 to {MAX_MINUTES}.")
    if expires_in is not None and (isinstance(expires_in, bool) or not isinstance(expires_in, int)
                                   or not MIN_SECONDS <= expires_in <= MAX_MINUTES * 60):
        raise ValueError(f"expires_in must be a whole number of seconds from {MIN_SECONDS} to "
                         f"{MAX_MINUTES * 60}.")
    seconds = minutes * 60 if minutes is not None else expires_in
    if target_kind == "link" and seconds is None:
        raise ValueError("A link must expire: give 'minutes' (e.g. 1440 for one day).")
    auto_start = body.get("auto_start", False)
    if not isinstance(auto_start, bool):
        raise ValueError("auto_start must be true or false.")
    owner = body.get("owner", caller)
    server = body.get("server", "")
    if not isinstance(owner, str) or not isinstance(server, str):
        raise ValueError("owner and server must be names.")
    if not owner or len(owner) > 255 or len(server) > 255:
        raise ValueError("owner must be a user's name (leave it out for your own server) and "
                         "server a server's name, each at most 255 characters.")
    if target_kind == "user" and target == owner:
        raise ValueError("You cannot share a server with its owner.")
    return ShareSpec(owner, server, kind, target_kind, target, path, seconds, auto_start)


def may_share(caller: str, caller_is_admin: bool, owner: str) -> Verdict:
    """Only a server's owner (or a hub admin) shares it or revokes its shares."""
    if caller_is_admin or caller == owner:
        return ALLOW
    return _deny(f"Only {owner} (or a hub admin) can share or revoke shares of {owner}'s server.")
