"""What a handler method does and what it reads, declared on the method itself.

Why: a reader (and a test, and the OpenAPI document) must see from one line above a method which
action of hub_ext.core.authz it performs and which request body model it takes, as JupyterHub's
``@needs_scope`` says which scope an API method needs. No handler decides a role inline.

- ``@needs(authz.EDIT_MEMBERS, course="course")``: before the method runs, the caller is
  identified and ``authz.decide(caller, action, course=<the path argument "course">)`` is asked;
  a refusal is answered with its status and sentence. The method finds the caller in
  ``self.caller``. A keyword's value names a path argument of the method, or is a callable
  ``(handler, arguments) -> value`` (sync or async) for what must be looked up first (a job's
  course and owner, say); ``arguments`` maps the method's parameter names to their values.
- ``@needs(PUBLIC)``: anyone, even without a token (health, the OpenAPI document).
- ``@takes(Model)``: the JSON body parsed as the pydantic ``Model`` (hub_ext.service.body_models)
  is in ``self.body`` when the method runs; a wrong body gets a 400 naming the field.
- ``@refuses(JobError, ...)``: the errors of hub_ext.core's meaning checks (a profile the course
  does not offer, a job no node could hold) that the method lets through are the caller's to fix:
  they become hub_ext.service.body_models.BodyError, which the handler answers with a 400 and the
  error's sentence (APIHandler.send_error), not a 500. Above ``@needs`` when a lookup may raise one.

Order: ``@needs`` above ``@takes``, so a caller who may not act learns nothing from a 400 about
the body (403 first, as the hub answers).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from hub_ext.service.body_models import BodyError

__all__ = ["PUBLIC", "action_of", "body_of", "needs", "refuses", "takes"]

#: The action of a method that anyone may call, without a token.
PUBLIC = "public"

_ACTION = "__classhub_action__"
_BODY = "__classhub_body__"


Method = Callable[..., Any]


def needs(action: str, **about: str | Callable[..., Any]) -> Callable[[Method], Method]:
    """Declare (and enforce) the authz action a handler method performs; see the module doc."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(method)

        @functools.wraps(method)
        async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if action != PUBLIC:
                arguments = signature.bind(self, *args, **kwargs).arguments
                values = {}
                for key, source in about.items():
                    value = source(self, arguments) if callable(source) else arguments[source]
                    values[key] = await value if inspect.isawaitable(value) else value
                self.caller = await self.authorize(action, **values)
            result = method(self, *args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        setattr(run, _ACTION, action)
        setattr(run, _BODY, getattr(method, _BODY, None))
        return run

    return wrap


def takes(model: type) -> Callable[[Method], Method]:
    """Declare the pydantic model of a method's JSON body; ``self.body`` holds it parsed."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            self.body = self.body_as(model)
            result = method(self, *args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        setattr(run, _BODY, model)
        return run

    return wrap


def refuses(*errors: type[Exception]) -> Callable[[Method], Method]:
    """Declare the core errors a method answers with a 400 carrying their sentence (a full stop
    added when it has none: core's sentences end without one)."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                result = method(self, *args, **kwargs)
                return await result if inspect.isawaitable(result) else result
            except errors as e:
                raise BodyError(str(e).strip().rstrip(".") + ".") from None

        return run

    return wrap


def action_of(method: Callable[..., Any]) -> str | None:
    """The action ``method`` declared with `needs`, or None when it declared none."""
    return getattr(inspect.unwrap(method, stop=lambda f: hasattr(f, _ACTION)), _ACTION, None)


def body_of(method: Callable[..., Any]) -> type | None:
    """The body model ``method`` declared with `takes`, or None."""
    return getattr(inspect.unwrap(method, stop=lambda f: hasattr(f, _BODY)), _BODY, None)
