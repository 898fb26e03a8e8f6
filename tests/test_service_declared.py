"""Every handler method of the service declares the authz action it performs.

Why: docs/architecture.md wants authorization declared once, on the method (hub_ext.service.declare,
as JupyterHub's ``@needs_scope``), so a reader sees from one line which rule of hub_ext.core.authz
guards an endpoint, and no endpoint is left to decide inline (or to forget). The test walks the
routes of the service's app (hub_ext.service.app.ROUTES) and names every method without one.
"""

from __future__ import annotations

import pytest
from tornado import web

from hub_ext.core import authz
from hub_ext.service import app
from hub_ext.service.declare import PUBLIC, action_of

pytestmark = pytest.mark.unit

METHODS = ("get", "head", "post", "put", "patch", "delete", "options")


def _methods(handler: type) -> list[tuple[str, object]]:
    """The HTTP methods ``handler`` defines (not tornado's defaults)."""
    return [(name, getattr(handler, name)) for name in METHODS
            if getattr(handler, name, None) is not getattr(web.RequestHandler, name, None)]


def test_every_handler_method_declares_its_action():
    undeclared = sorted({f"{h.__module__}.{h.__qualname__}.{name} ({path})"
                         for path, h in app.ROUTES for name, method in _methods(h)
                         if action_of(method) is None})
    assert not undeclared, (f"{len(undeclared)} handler methods declare no action (add "
                            "@needs(authz.X, ...) or @needs(PUBLIC)):\n" + "\n".join(undeclared))


def test_every_declared_action_is_one_authz_decides():
    known = set(authz.ACTIONS) | {PUBLIC}
    unknown = sorted({f"{h.__qualname__}.{name}: {action_of(method)!r}"
                      for _, h in app.ROUTES for name, method in _methods(h)
                      if action_of(method) is not None and action_of(method) not in known})
    assert not unknown, "actions hub_ext.core.authz does not know:\n" + "\n".join(unknown)
