"""How a classhub process gets its traits: the hub's configuration, handed over whole.

classhub's processes are configured as traitlets Configurables, like JupyterHub. A deployer sets
every knob in ``jupyterhub_config.py`` (z2jh: ``hub.config``) as ``c.<Class>.<name>``; the hub
starts the service and the culler as its managed services, and ``configure()`` hands each of them
its whole sections (`CONFIG_ENV`, one JSON variable, no list of forwarded settings). The process
loads them as its traitlets config (`handed_config`), under its own config file and command line,
and refuses a value it cannot take with one sentence naming ``c.<Class>.<name>``
(`check_sections`), at start rather than at first use (docs/configuration.md, "Configuration: one channel,
traits").

The ``CLASSHUB_*`` variables that used to set these traits (each trait's ``.tag(env=...)`` names
its old variable) are no longer read: a process that finds one set stops with a sentence naming
the trait to set instead (`apply_env`, `retired_variables`), rather than silently ignoring it.
Only the variables JupyterHub sets for every managed service (``JUPYTERHUB_SERVICE_URL``,
``JUPYTERHUB_SERVICE_PREFIX``) are still read as trait defaults: they are how the hub tells a
service where it routes it, and the service cannot learn that any other way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from traitlets import HasTraits, TraitError
from traitlets.config import Config, Configurable
from traitlets.config.loader import DeferredConfig, LazyConfigValue


class ConfigError(ValueError):
    """A setting a process cannot start with; the message says which and what to change."""


#: Settings that moved to another section, and where (``c.<Class>.<name>``): one fact has one
#: setting (docs/configuration.md, "What changed for deployers"). A process (and the hub, when it
#: hands the sections over) that finds an old one set stops with `moved_sentence`.
MOVED_SETTINGS = {
    f"{old}.{name}": f"ClasshubPrometheus.{new}"
    for old in ("ClasshubCuller", "ClasshubService")
    for name, new in (("prometheus_url", "url"), ("gpu_utilization_query", "gpu_utilization_query"),
                      ("gpu_pod_label", "gpu_pod_label"))
}


def moved_sentence(old: str) -> str:
    """What a process says when it finds the moved setting ``old`` (``Class.name``) set."""
    new = MOVED_SETTINGS[old]
    section, name = new.split(".", 1)
    return (f"c.{old} has moved: set c.{new} in jupyterhub_config.py (hub.config.{section}.{name} "
            f"on Zero to JupyterHub), one setting for every classhub process that uses it, and "
            f"remove c.{old}.")


#: The prefix of the retired variables (docs/configuration.md, "What changed for deployers").
RETIRED_PREFIX = "CLASSHUB_"


def retired_sentence(var: str, setting: str) -> str:
    """What a process says when it finds the retired variable ``var`` set; ``setting``:
    ``Class.name``."""
    section, name = setting.split(".", 1)
    return (f"{var} is set, but classhub no longer reads it: set c.{setting} in jupyterhub_config.py "
            f"(hub.config.{section}.{name} on Zero to JupyterHub) and unset {var}.")


def apply_env(obj: HasTraits, environ: Mapping[str, str] = os.environ, *,
              given: Iterable[str] = ()) -> None:
    """The environment's part in `obj`'s traits: refuse a retired ``CLASSHUB_*`` variable that is
    set (ConfigError naming the trait, `retired_sentence`), and set a trait tagged with a variable
    of JupyterHub's managed-service contract (``JUPYTERHUB_*``) from it unless configured
    otherwise (in its config, or `given` to its constructor)."""
    configured = set(given)
    if isinstance(obj, Configurable):
        for cls in type(obj).mro():
            configured.update(obj.config.get(cls.__name__, {}))
    for name, trait in obj.traits(env=lambda v: v is not None).items():
        var = trait.metadata["env"]
        raw = environ.get(var)
        if raw is None:
            continue
        if var.startswith(RETIRED_PREFIX):
            raise ConfigError(retired_sentence(var, f"{type(obj).__name__}.{name}"))
        if name in configured:
            continue
        try:
            obj.set_trait(name, trait.from_string(raw))
        except (TraitError, ValueError) as e:
            help_text = (trait.help or "").split(". ")[0].rstrip(".")
            raise ConfigError(f"{var}={raw!r} cannot be used for {type(obj).__name__}.{name} "
                              f"({help_text}): {e}. Fix or unset {var}.") from None


def retired_variables(classes: Iterable[type[HasTraits]], environ: Mapping[str, str] = os.environ,
                      *, keep: Iterable[str] = ()) -> list[str]:
    """The sentences (`retired_sentence`) for every retired variable of ``classes``' traits set in
    ``environ``, but those in ``keep``: for a process to stop at start rather than at the first
    use of a configurable."""
    kept = set(keep)
    found = []
    for cls in classes:
        for name, trait in cls.class_traits(env=lambda v: v is not None).items():
            var = trait.metadata["env"]
            if var.startswith(RETIRED_PREFIX) and var in environ and var not in kept:
                found.append(retired_sentence(var, f"{cls.__name__}.{name}"))
    return found


# ---- the hub's configuration, handed to the services it starts --------------------------------

#: The one variable through which the hub hands a service its configuration sections: JSON
#: ``{"ClasshubJobs": {"image": "..."}, ...}``, made by ``configure()`` from the hub's own config
#: (docs/configuration.md, "Configuration: one channel, traits"; docs/architecture.md, rule 5).
CONFIG_ENV = "CLASSHUB_CONFIG"


def sections_json(config: Config, names: Iterable[str]) -> str:
    """The sections ``names`` of the hub's ``config`` as JSON, for `CONFIG_ENV`.

    A value JSON cannot carry (a function, an object) is refused with a sentence naming it: a
    service is a separate process and receives values, not objects."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name not in config:
            continue
        for key in config[name]:
            if f"{name}.{key}" in MOVED_SETTINGS:
                raise ConfigError(moved_sentence(f"{name}.{key}"))
        section = {k: v for k, v in config[name].items() if not isinstance(v, (Config, LazyConfigValue))}
        for key, value in section.items():
            if isinstance(value, DeferredConfig):  # from the hub's command line: the text as given
                section[key] = value.get_value(_TextTrait())
                continue
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"c.{name}.{key} = {value!r} cannot be handed to the classhub services, which "
                    f"run in their own processes: set it to a plain value (text, number, true/false, "
                    f"list or dict).") from None
        if section:
            out[name] = section
    return json.dumps(out, sort_keys=True)


class _TextTrait:
    """What `DeferredConfig.get_value` needs to give back the text the command line held."""

    def from_string(self, s: str) -> str:
        return s


def handed_config(environ: Mapping[str, str] = os.environ) -> Config:
    """The configuration the hub handed this process (`CONFIG_ENV`), empty when none."""
    raw = environ.get(CONFIG_ENV)
    if not raw:
        return Config()
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ValueError("not an object of sections")
    except ValueError as e:
        raise ConfigError(f"{CONFIG_ENV} is not the JSON configure() writes ({e}): start this "
                          "process through the hub, or unset it.") from None
    return Config(data)


def check_sections(config: Config, classes: Iterable[type[HasTraits]]) -> None:
    """Refuse, with one sentence naming the setting, what the classes' traits cannot take.

    traitlets would raise a bare TraitError at first construction (or only warn, for a name no
    trait has); a deployer should read which ``c.<Class>.<name>`` to change instead."""
    for cls in classes:
        name = cls.__name__
        if name not in config:
            continue
        traits = cls.class_traits(config=True)
        probe: HasTraits | None = None
        for key, value in config[name].items():
            if isinstance(value, (Config, LazyConfigValue)):
                continue
            trait = traits.get(key)
            if trait is None and f"{name}.{key}" in MOVED_SETTINGS:
                raise ConfigError(moved_sentence(f"{name}.{key}"))
            if trait is None:
                known = ", ".join(sorted(traits))
                raise ConfigError(f"c.{name}.{key} is not a setting of {name}: remove it or use one "
                                  f"of {known}.")
            if probe is None:
                probe = cls.__new__(cls)
                HasTraits.__init__(probe)
            try:
                raw = value.get_value(trait) if isinstance(value, DeferredConfig) else value
                probe.set_trait(key, raw)
            except (TraitError, ValueError) as e:
                help_text = (trait.help or "").split(". ")[0].rstrip(".").strip()
                help_text = " ".join(help_text.split())
                reason = str(e).rstrip(".")
                raise ConfigError(f"c.{name}.{key} = {value!r} cannot be used ({help_text}): {reason}. "
                                  f"Change c.{name}.{key} in jupyterhub_config.py "
                                  f"(hub.config.{name}.{key} on Zero to JupyterHub).") from None
