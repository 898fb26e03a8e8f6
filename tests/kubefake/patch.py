"""PATCH bodies: JSON merge patch (RFC 7386), an approximation of strategic merge patch,
and JSON patch (RFC 6902).

Strategic merge here merges lists of objects by their Kubernetes merge key (containers and
volumes by ``name``, ports by ``containerPort``, conditions by ``type``, ...), honours
``$patch: delete``/``replace`` directives, and unions ``finalizers``; other lists are replaced.
"""

from __future__ import annotations

import copy
from typing import Any

MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "hostAliases": "ip",
    "taints": "key",
}
PRIMITIVE_MERGE = {"finalizers"}


class PatchError(ValueError):
    """The patch could not be applied (the server answers 422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Approximate strategic merge patch over plain dicts."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None or (isinstance(value, dict) and value.get("$patch") == "delete"):
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, MERGE_KEYS[key])
        elif isinstance(value, list) and key in PRIMITIVE_MERGE and isinstance(result.get(key), list):
            result[key] = list(result[key]) + [v for v in value if v not in result[key]]
        elif isinstance(value, dict):
            result[key] = strategic_merge_patch(result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _merge_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    out = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            out.append(copy.deepcopy(item))
            continue
        index = next(
            (
                i
                for i, existing in enumerate(out)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                out.pop(index)
        elif index is None:
            out.append(strategic_merge_patch({}, item))
        else:
            out[index] = strategic_merge_patch(out[index], item)
    return out


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _walk(doc: Any, pointer: str) -> tuple[Any, str]:
    """Return (parent container, last token) for a JSON pointer."""
    if pointer == "":
        raise PatchError("cannot operate on the document root")
    if not pointer.startswith("/"):
        raise PatchError(f"invalid JSON pointer {pointer!r}")
    tokens = [_unescape(t) for t in pointer[1:].split("/")]
    parent = doc
    for token in tokens[:-1]:
        parent = _child(parent, token, pointer)
    return parent, tokens[-1]


def _child(node: Any, token: str, pointer: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PatchError(f"doc is missing path: {pointer}")
        return node[token]
    if isinstance(node, list):
        try:
            return node[int(token)]
        except (ValueError, IndexError) as exc:
            raise PatchError(f"doc is missing path: {pointer}") from exc
    raise PatchError(f"doc is missing path: {pointer}")


def _get(doc: Any, pointer: str) -> Any:
    if pointer == "":
        return doc
    parent, token = _walk(doc, pointer)
    return _child(parent, token, pointer)


def _add(doc: Any, pointer: str, value: Any) -> None:
    parent, token = _walk(doc, pointer)
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        if token == "-":
            parent.append(value)
        else:
            try:
                index = int(token)
            except ValueError as exc:
                raise PatchError(f"invalid array index {token!r}") from exc
            if not 0 <= index <= len(parent):
                raise PatchError(f"add operation index out of bounds: {index}")
            parent.insert(index, value)
    else:
        raise PatchError(f"doc is missing path: {pointer}")


def _remove(doc: Any, pointer: str) -> Any:
    parent, token = _walk(doc, pointer)
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"Unable to remove nonexistent key: {token}: missing value")
        return parent.pop(token)
    if isinstance(parent, list):
        try:
            return parent.pop(int(token))
        except (ValueError, IndexError) as exc:
            raise PatchError(f"Unable to access invalid index: {token}") from exc
    raise PatchError(f"doc is missing path: {pointer}")


def json_patch(target: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations (add, remove, replace, move, copy, test)."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            _remove(doc, path)
            _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "move":
            value = _remove(doc, op["from"])
            _add(doc, path, value)
        elif kind == "copy":
            _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc
