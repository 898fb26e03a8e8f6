"""Traits that an environment variable may set: one documented way among others.

classhub's processes are configured as traitlets Configurables, like JupyterHub: from a config
file or the command line. The hub starts the service and the culler with an environment, so a
trait may also name a variable (``.tag(env="CLASSHUB_...")``); `apply_env` reads it through the
trait's own parser, after the config file and the command line (which win), and refuses a value
the trait cannot take with a sentence that names the variable, at start rather than at first use.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from traitlets import HasTraits, TraitError
from traitlets.config import Configurable


class ConfigError(ValueError):
    """A setting a process cannot start with; the message says which and what to change."""


def apply_env(obj: HasTraits, environ: Mapping[str, str] = os.environ, *,
              given: Iterable[str] = ()) -> None:
    """Set every ``env``-tagged trait of `obj` from its variable, unless configured otherwise
    (in its config, or `given` to its constructor)."""
    configured = set(given)
    if isinstance(obj, Configurable):
        for cls in type(obj).mro():
            configured.update(obj.config.get(cls.__name__, {}))
    for name, trait in obj.traits(env=lambda v: v is not None).items():
        var = trait.metadata["env"]
        raw = environ.get(var)
        if raw is None or name in configured:
            continue
        try:
            obj.set_trait(name, trait.from_string(raw))
        except (TraitError, ValueError) as e:
            help_text = (trait.help or "").split(". ")[0].rstrip(".")
            raise ConfigError(f"{var}={raw!r} cannot be used for {type(obj).__name__}.{name} "
                              f"({help_text}): {e}. Fix or unset {var}.") from None


def env_help(obj: HasTraits) -> dict[str, str]:
    """Variable -> trait, for documentation and ``--help-env``."""
    return {t.metadata["env"]: f"{type(obj).__name__}.{n}"
            for n, t in obj.traits(env=lambda v: v is not None).items()}
