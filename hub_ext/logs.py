"""Logging of classhub's processes (the service, the culler): one handler for module loggers."""

from __future__ import annotations

import logging

from traitlets.config import Application

#: Loggers of the modules the service runs (module loggers, ``logging.getLogger(__name__)``).
MODULE_LOGGERS = ("hub_ext", "culler", "spawner")


def route_module_logs(app: Application) -> None:
    """Send the module loggers' records through the application's handler, at its level (INFO
    unless configured: traitlets' default, WARN, would hide what the service does).

    Why: modules log with ``logging.getLogger(__name__)``, which has no handler of its own, so
    without this Python prints only their warnings (its last-resort handler) and the service's
    INFO lines (adopted groups, released reservations, expired shares) are lost.
    """
    if "log_level" not in app.config.get(type(app).__name__, {}):
        app.log_level = logging.INFO
    for name in MODULE_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(app.log_level)
        logger.propagate = False
        for handler in app.log.handlers:
            if handler not in logger.handlers:
                logger.addHandler(handler)
