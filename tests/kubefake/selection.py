"""Label and field selectors in their query-string form.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``,
comma-separated (AND). Field selectors: ``f=v``, ``f==v``, ``f!=v`` over a per-resource set of
supported fields; anything else is a 400 like kube-apiserver's ``field label not supported``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .status import bad_request

Requirement = tuple[str, str, tuple[str, ...]]  # (key, operator, values)

_SET_RE = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in (s.strip() for s in parts) if p]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a label selector string into requirements; raise a 400 ApiError when malformed."""
    if not text:
        return []
    reqs: list[Requirement] = []
    for part in _split_top_level(text):
        m = _SET_RE.match(part)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append((m.group(1), m.group(2), values))
            continue
        for op in ("==", "!=", "="):
            if op in part:
                key, _, value = part.partition(op)
                key, value = key.strip(), value.strip()
                if not key or any(c in value for c in "=!() "):
                    raise bad_request(f"unable to parse requirement: invalid label selector: {text!r}")
                reqs.append((key, "!=" if op == "!=" else "=", (value,)))
                break
        else:
            if part.startswith("!"):
                key, op = part[1:].strip(), "!exists"
            else:
                key, op = part, "exists"
            if not key or any(c in key for c in " ()!="):
                raise bad_request(f"unable to parse requirement: invalid label selector: {text!r}")
            reqs.append((key, op, ()))
    return reqs


def match_labels(reqs: list[Requirement], labels: dict[str, str] | None) -> bool:
    """True when ``labels`` satisfies every requirement."""
    labels = labels or {}
    for key, op, values in reqs:
        present = key in labels
        value = labels.get(key)
        if op == "=" and value != values[0]:
            return False
        if op == "!=" and present and value == values[0]:
            return False
        if op == "in" and value not in values:
            return False
        if op == "notin" and present and value in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
    return True


def label_selector_from_dict(selector: dict[str, Any] | None) -> list[Requirement]:
    """Convert a structured ``LabelSelector`` (matchLabels/matchExpressions) to requirements."""
    if not selector:
        return []
    reqs: list[Requirement] = [(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append((expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ())))
    return reqs


FieldGetter = Callable[[dict[str, Any]], str]


def _path(*keys: str) -> FieldGetter:
    def get(obj: dict[str, Any]) -> str:
        cur: Any = obj
        for key in keys:
            cur = cur.get(key) if isinstance(cur, dict) else None
        if cur is None:
            return ""
        return str(cur).lower() if isinstance(cur, bool) else str(cur)

    return get


COMMON_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}

EXTRA_FIELDS: dict[str, dict[str, FieldGetter]] = {
    "pods": {
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": _path("spec", "hostNetwork"),
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    "events": {
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
    "nodes": {"spec.unschedulable": _path("spec", "unschedulable")},
    "namespaces": {"status.phase": _path("status", "phase")},
    "secrets": {"type": _path("type")},
}

FieldRequirement = tuple[FieldGetter, bool, str]  # (getter, equal?, value)


def parse_field_selector(text: str | None, plural: str) -> list[FieldRequirement]:
    """Parse a field selector for resource ``plural``; unsupported fields are a 400."""
    if not text:
        return []
    fields = {**COMMON_FIELDS, **EXTRA_FIELDS.get(plural, {})}
    reqs: list[FieldRequirement] = []
    for part in _split_top_level(text):
        for op in ("==", "!=", "="):
            if op in part:
                key, _, value = part.partition(op)
                key = key.strip()
                if key not in fields:
                    raise bad_request(f"field label not supported: {key}")
                reqs.append((fields[key], op != "!=", value.strip()))
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
    return reqs


def match_fields(reqs: list[FieldRequirement], obj: dict[str, Any]) -> bool:
    """True when ``obj`` satisfies every field requirement."""
    return all((getter(obj) == value) == equal for getter, equal, value in reqs)
