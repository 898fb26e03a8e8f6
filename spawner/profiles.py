"""What both classhub spawners share: the profile catalog, the form, and option validation.

The form and REST ``user_options`` go through the same :meth:`Catalog.select`; a rejected choice
raises HTTP 400 with the reason before anything is created (JupyterHub runs
``apply_user_options`` before ``start``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tornado import web
from traitlets import Bool, Dict, HasTraits, List, Unicode, default

from hub_ext import store
from hub_ext.backends import templates_spawn
from hub_ext.backends.templates_spawn import SeedJob
from hub_ext.core import roles
from hub_ext.core.profiles import (
    Catalog,
    CatalogError,
    ImagePolicy,
    Offer,
    OptionsError,
    Profile,
    Room,
    Selection,
    Viewer,
    viewer_from_hub,
)
from spawner import form, quota
from spawner.pressure import reclaim_notice

#: What every server classhub starts gets on its command line: JupyterLab's news toast off (each
#: student of a class would be asked on first start whether to fetch JupyterLab's news).
SERVER_ARGS = ("--LabApp.news_url=None",)


class ProfilesMixin(HasTraits):
    """Profile catalog, spawn form and validated ``user_options`` for a classhub spawner."""

    def get_args(self) -> list[str]:
        return [*super().get_args(), *SERVER_ARGS]

    profiles = List(
        Dict(),
        config=True,
        help="""The profile catalog: a list of dicts, one per profile.

        Fields: ``slug`` (required), ``display_name``, ``description``, ``kind`` (cpu, gpu, mig,
        shared), ``gpu_count``, ``gpu_product`` (node label ``nvidia.com/gpu.product``),
        ``mig_profile`` (e.g. ``1g.18gb``), ``mig_strategy`` (mixed or single),
        ``gpu_resource`` (shared only, default ``nvidia.com/gpu.shared``), ``cpu_guarantee``,
        ``cpu_limit``, ``mem_guarantee``, ``mem_limit``, ``shm_size``, ``images``,
        ``node_selector``, ``tolerations``, ``groups`` (courses that see it; empty = all),
        ``roles`` (student, ta, teacher, admin; empty = all), ``admin_only``, ``default``.
        Empty: the spawner proposes profiles from what the machine or cluster offers.
        """,
    )

    allow_course_images = Bool(
        False,
        config=True,
        help="Also offer the images that running servers of the user's courses already use.",
    )

    image_pattern = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""Regular expression (full match) for free-form images users may type; None: none.

        Example: ``r"registry\\.example\\.edu/courses/[a-z0-9-]+:[a-z0-9.-]+"``.
        """,
    )

    classhub_db_url = Unicode(
        "",
        config=True,
        help="""classhub's database (courses, quotas, reservation ledger); set by ``configure``.""",
    )

    show_images = Bool(
        True, config=True, help="Show the image choice in the form (the local mode has no images)."
    )

    selection: Selection | None = None

    # ---- the catalog and who is looking -----------------------------------------------------------

    def catalog_entries(self) -> list[dict[str, Any]]:
        """The catalog as configured, or as proposed from the hardware when none is (the hub
        hands these to the classhub service for jobs by profile, hub_ext.hubside)."""
        return list(self.profiles or self.proposed_profiles())

    def catalog(self) -> Catalog:
        entries = self.catalog_entries()
        try:
            return Catalog.from_config(entries)
        except CatalogError as e:
            raise web.HTTPError(500, f"classhub profile configuration is invalid: {e}") from None

    def proposed_profiles(self) -> list[dict[str, Any]]:
        """Profiles to offer when none are configured (subclasses look at their hardware)."""
        return [{"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True}]

    async def viewer(self) -> Viewer:
        """Who is choosing: hub groups and admin flag, course roles from the classhub store.

        The store is the one truth for who teaches what (a course created through the API has
        no group properties); without a store (a bare spawner in a test), group properties are
        read as before.
        """
        return (await self._viewer_and_courses())[0]

    async def _viewer_and_courses(self) -> tuple[Viewer, dict[str, str] | None, bool]:
        """`viewer`, the course roles it was built from (None without a store) and whether one
        of those courses re-seeds ``on_start``, from one read: a start charges one of those
        courses (the reservation reuses the roles) and seeds only when a course re-seeds or a
        ``template`` option asks (`_resolve_template`). The read runs on the store's threads,
        never on the hub's event loop (docs/architecture.md, rule 7)."""
        orm_user = self.user.orm_user if hasattr(self.user, "orm_user") else self.user
        groups = [g.name for g in getattr(orm_user, "groups", []) or []]
        admin = bool(self.user.admin)
        if self.classhub_db_url:
            in_courses, reseeds = await store.in_thread(
                templates_spawn.course_roles, self.classhub_db_url, self.user.name)
            return Viewer(name=self.user.name, groups=frozenset(groups) | frozenset(in_courses),
                          role=roles.overall_role(admin, in_courses), admin=admin), in_courses, reseeds
        courses = {
            g.name: staff
            for g in getattr(orm_user, "groups", []) or []
            if (staff := roles.CourseStaff.from_group_properties(getattr(g, "properties", None)))
        }
        return viewer_from_hub(self.user.name, admin, groups, courses), None, False

    def course_images_in_use(self, viewer: Viewer) -> frozenset[str]:
        """Images chosen by running servers of members of the viewer's groups."""
        if not self.allow_course_images:
            return frozenset()
        orm_user = getattr(self.user, "orm_user", self.user)
        images = set()
        for group in getattr(orm_user, "groups", []):
            for member in group.users:
                for spawner in member._orm_spawners:
                    image = (spawner.user_options or {}).get("image")
                    if spawner.server is not None and isinstance(image, str):
                        images.add(image)
        return frozenset(images)

    def image_policy(self, viewer: Viewer) -> ImagePolicy:
        return ImagePolicy(extra_images=self.course_images_in_use(viewer), pattern=self.image_pattern)

    # ---- availability (each spawner knows its own capacity) --------------------------------------

    async def capacity_view(self) -> Any:
        """One look at what is free (a cluster snapshot, the local GPU pool), shared by all
        profiles of one form or one check."""
        return None

    def free_count(self, profile: Profile, view: Any) -> int | None:
        """How many servers of ``profile`` could start now; None when nothing limits it."""
        return None

    def room_when_empty(self, profile: Profile, view: Any) -> Room | None:
        """How many servers of ``profile`` fit with nothing running (None: not known), so that a
        profile that can never start says so instead of "none free right now". Each spawner
        answers for its own view (the local GPU pool, the cluster's snapshot)."""
        return None

    def offer(self, profile: Profile, view: Any) -> Offer:
        """``profile`` as the form and a refused start show it: free now, and room when empty."""
        free = self.free_count(profile, view)
        # the room is looked up only for a profile with none free: a start must not pay for it
        room = self.room_when_empty(profile, view) if free is not None and free < 1 else None
        return Offer(profile, free, room)

    async def offers(self, viewer: Viewer) -> list[Offer]:
        view = await self.capacity_view()
        return [self.offer(p, view) for p in self.catalog().visible(viewer)]

    # ---- JupyterHub hooks ------------------------------------------------------------------------

    def classhub_profiles_enabled(self) -> bool:
        """Whether classhub's catalog drives the form and the options (subclasses may defer)."""
        return True

    @default("options_form")
    def _options_form_default(self):
        if not self.classhub_profiles_enabled():
            return super()._options_form_default()
        return self._classhub_options_form

    async def _classhub_options_form(self, spawner=None) -> str:
        viewer = await self.viewer()
        offers = await self.offers(viewer)
        if not offers:
            return "<p>No profile is available to you. Ask your teacher or an admin.</p>"
        if len(offers) == 1 and offers[0].available and not (
            self.show_images and (len(offers[0].profile.images) > 1 or self.image_pattern)
        ):
            return ""  # nothing to choose: JupyterHub starts the server without a form
        previous = (self.user_options or {}).get("profile")  # user input: may be anything
        previous = previous if isinstance(previous, str) else None
        extra = sorted(self.course_images_in_use(viewer))
        return form.render_form(offers, previous, self.show_images, extra, self.image_pattern)

    @default("options_from_form")
    def _options_from_form_default(self):
        if not self.classhub_profiles_enabled():
            return super()._options_from_form_default()
        return form.options_from_form

    @default("apply_user_options")
    def _apply_user_options_default(self):
        return self._apply_profile

    async def _apply_profile(self, spawner, user_options: dict) -> None:
        """Validate the choice (form or REST) and apply it; HTTP 400 with the reason if refused."""
        if not self.classhub_profiles_enabled():
            return
        viewer, in_courses, reseeds = await self._viewer_and_courses()
        user_options = await self._resolve_template(user_options, in_courses, reseeds)  # issue 6
        try:
            selection = self.catalog().select(viewer, user_options, self.image_policy(viewer))
        except OptionsError as e:
            raise web.HTTPError(400, f"Cannot start this server: {e}") from None
        if getattr(self, "_template_image", None):
            selection = dataclasses.replace(selection, image=self._template_image)
        offer = self.offer(selection.profile, await self.capacity_view())
        if not offer.available:
            notice = ""  # the culler frees idle holders (issue 8)
            if offer.fits_when_empty != 0:  # reclaiming frees nothing a profile that never fits needs
                notice = await reclaim_notice(self.classhub_db_url, self.user.name, selection.profile)
            raise web.HTTPError(
                409, f"Cannot start {selection.profile.display_name}: {offer.reason}.{notice}"
            )
        if self.classhub_db_url:
            self._released = False  # from here on, a reservation may be held (`clear_state`)
            await quota.reserve(self.classhub_db_url, self.user.name, self.name, selection,
                                courses=in_courses)
        self.selection = selection
        self.course_roles = dict(in_courses or {})  # whose course data the server shows
        await self.apply_selection(selection)

    # ---- templates (issue 6): the ``template`` option, checked against the store ----------------

    template_job: SeedJob | None = None
    #: The user's courses (course -> role) as this start read them: the course data folders
    #: the server shows (hub_ext.backends.coursedata).
    course_roles: dict[str, str] | None = None

    def template_seeded_from(self) -> tuple[str, str] | None:
        """(template key, version) the home was seeded from, when the spawner can read the home."""
        return None

    async def _resolve_template(self, user_options: dict, courses: Mapping[str, str] | None = None,
                                reseeds: bool = True) -> dict:
        """Decide what this start seeds (``template_job``); the options without ``template``.

        ``courses``: the user's course roles as the start just read them (None: read them);
        ``reseeds``: whether one of them re-seeds ``on_start``, from the same read.

        HTTP 400/403/404 with the sentence when the option names a template the user may not use.
        """
        options = dict(user_options or {})
        option = options.pop("template", None)
        self.template_job = None
        self._template_image = None  # a start from a template allows its image for that start only
        if option is not None:
            self._forget_template_option()
        if not self.classhub_db_url:
            if option is not None:
                raise web.HTTPError(400, "Cannot start this server: templates need the classhub store.")
            return options
        if option is None and courses is not None and not reseeds:
            return options  # nothing to seed (most starts): no worker thread
        try:
            self.template_job = await store.in_thread(
                templates_spawn.resolve, self.classhub_db_url, self.user.name, bool(self.user.admin),
                option, self.template_seeded_from, courses)
        except templates_spawn.TemplateDenied as e:
            raise web.HTTPError(e.status, e.message) from None
        job = self.template_job
        if job is not None and option is not None and job.profile and "profile" not in options:
            options["profile"] = job.profile  # the template's profile, unless the user chose one
        # The image a teacher published with the template is allowed for starts from it.
        if job is not None and job.image and options.get("image") == job.image:
            self._template_image = options.pop("image")
        return options

    def _forget_template_option(self) -> None:
        """A template option acts once: JupyterHub keeps a start's options as the defaults of the
        next start, which would re-seed (and, in ``manual`` courses, re-seed unasked) at every
        restart. The profile and image it chose stay."""
        orm = getattr(self, "orm_spawner", None)
        stored = getattr(orm, "user_options", None)
        if isinstance(stored, dict) and "template" in stored:
            orm.user_options = {k: v for k, v in stored.items() if k != "template"}
            self.db.commit()

    async def stop(self, now: bool = False) -> None:
        """Stop the server, then give back its reservation (`release_reservation`)."""
        await super().stop(now=now)
        await self.release_reservation()

    async def release_reservation(self) -> None:
        """Give back the server's reservation before the hub reports it stopped, so a student
        who sees the server stopped also sees the quota free (in a worker thread)."""
        if self.classhub_db_url and self.classhub_profiles_enabled():
            await quota.release_now(self.classhub_db_url, self.user.name, self.name)
            self._released = True

    #: Whether the last reservation of this server was given back by `release_reservation` and
    #: none was made since (False: unknown, e.g. a server that ran before a hub restart).
    _released = False

    def clear_state(self) -> None:
        """The server is gone (stopped, failed, found dead): release its quota reservation (a
        stop already did; a failed spawn or a server found dead did not)."""
        super().clear_state()
        if (self.classhub_db_url and self.classhub_profiles_enabled() and not self._released
                and not self._starting_afresh()):
            quota.release(self.classhub_db_url, self.user.name, self.name)

    def _starting_afresh(self) -> bool:
        """Whether this ``clear_state`` is the one JupyterHub's ``User.spawn`` makes before a new
        start ("make sure it doesn't restore state"): the spawn is pending, its ``start`` not yet
        called, no stop under way, and classhub's `_apply_profile` runs next.

        Why it releases nothing: that start either reserves, and the reservation releases a
        stale one under the same key in its own transaction (``replace_stale``), or it fails,
        and JupyterHub's ``User.stop`` then clears the state again, which releases. A release
        here was a second write transaction per start, queued beside the reservation for the
        database's write lock (bench/storm.py; docs/performance.md)."""
        return (self._spawn_pending and not self._start_pending and not self._stop_pending
                and getattr(self.apply_user_options, "__func__", None) is ProfilesMixin._apply_profile)

    async def apply_selection(self, selection: Selection) -> None:
        """Turn the validated selection into this spawner's settings (per spawner kind)."""
