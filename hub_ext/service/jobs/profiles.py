"""Jobs by profile: a job's ``profile`` becomes its replicas' request, checked like a notebook's.

Why the catalog comes from the hub: the profiles are the spawner's configuration (or what it
proposes from the hardware), and the hub is its one source (docs/architecture.md, rule 4). The
service asks the hub for the catalog of the caller's spawner (hub_ext.hubside.ProfilesHandler)
and decides with the same pure code a notebook's options go through
(hub_ext.core.profiles.Catalog.select, on the profiles the job's course offers, for the caller's
role in that course).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tornado import web

from hub_ext.core import authz, roles
from hub_ext.core.jobs import JobError
from hub_ext.core.profiles import Catalog, CatalogError, OptionsError, Viewer, resolve_job_roles
from hub_ext.hubapi import HubAPI

__all__ = ["resolve_profiles"]


def names_profile(fields: Mapping[str, Any]) -> bool:
    return any(isinstance(r, Mapping) and "profile" in r for r in fields.get("roles") or ())


async def resolve_profiles(hub: HubAPI, caller: authz.Caller, course: str,
                           fields: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job fields with every role's profile replaced by its request, and what the job keeps
    of each role's profile (role -> slug, display name, pod settings); a sentence
    naming the profiles the caller can choose when one is refused (JobError, a 400)."""
    fields = dict(fields)
    if not names_profile(fields):
        return fields, {}
    answer = await hub.profile_catalog(caller.name)
    if not answer.get("enabled"):
        raise JobError("This hub has no classhub profiles; give resources instead of profile")
    try:
        catalog = Catalog.from_config(answer.get("profiles") or [])
    except CatalogError as e:
        raise web.HTTPError(500, "classhub profile configuration is invalid: %s", str(e)) from None
    viewer = Viewer(name=caller.name, groups=frozenset(caller.courses),
                    role=caller.role_in(course) or roles.STUDENT, admin=caller.is_admin)
    try:
        fields["roles"], kept = resolve_job_roles(catalog, viewer, course, fields["roles"])
    except OptionsError as e:
        raise JobError(f"Cannot submit this job: {str(e).rstrip('.')}") from None
    return fields, kept
