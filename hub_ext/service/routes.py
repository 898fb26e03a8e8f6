"""Where each classhub API endpoint and page lives: ``ROUTES``, (path under the prefix, handler).

Why a module of its own: the OpenAPI document is made from these routes and is itself served by
the app, so the routes cannot live in the app module (hub_ext.service.openapi would import the
app that imports it). The app mounts them under its prefix, after the document's own route.
"""

from __future__ import annotations

from hub_ext.service import (
    assignments,
    cluster,
    competitions,
    coursedata,
    culling,
    handlers,
    invitations,
    jobs,
    pages,
    panel,
    sharing,
    templates,
)

_COURSE = r"courses/([^/]+)"

#: (path under the prefix, handler). Path groups are URL-decoded by tornado before the handler
#: sees them, so non-ASCII user names arrive as text.
ROUTES: list[tuple[str, type]] = [
    ("api/health", handlers.HealthHandler),
    ("api/me", handlers.MeHandler),
    (r"api/users/([^/]+)/server/profile", handlers.ServerProfileHandler),
    ("api/courses", handlers.CoursesHandler),
    (f"api/{_COURSE}", handlers.CourseHandler),
    (f"api/{_COURSE}/members", handlers.MembersHandler),
    (f"api/{_COURSE}/roster", handlers.RosterHandler),
    (f"api/{_COURSE}/quota", handlers.CourseQuotaHandler),
    (rf"api/{_COURSE}/quota/users/([^/]+)", handlers.UserQuotaHandler),
    (f"api/{_COURSE}/usage", handlers.CourseUsageHandler),
    ("api/usage/me", handlers.MyUsageHandler),
    ("api/usage", handlers.AllUsageHandler),
    ("metrics", handlers.MetricsHandler),
    *templates.ROUTES,
    *assignments.ROUTES,
    *competitions.ROUTES,
    *sharing.ROUTES,
    *culling.ROUTES,
    *invitations.ROUTES,
    *jobs.ROUTES,
    *panel.ROUTES,
    *cluster.ROUTES,
    *coursedata.ROUTES,
    *pages.ROUTES,
]
