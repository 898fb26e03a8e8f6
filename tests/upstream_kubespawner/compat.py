"""A pytest plugin for KubeSpawner's vendored suite: the one library difference it trips on.

KubeSpawner 7.1.0's test_objects.py serializes kubernetes_asyncio models with the *sync*
``kubernetes.client.ApiClient().sanitize_for_serialization``. Up to kubernetes 36 that method
turned any model with ``openapi_types``/``attribute_map`` into a dict of its non-None fields;
kubernetes 37 (what classhub installs) calls ``to_dict()`` on models of another package, which
keeps every None field, so the comparisons fail for reasons that have nothing to do with
KubeSpawner or the API server. This plugin gives such classic-generator models the old
treatment and leaves everything else to kubernetes 37. Loaded with ``-p compat``.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient

_sanitize = ApiClient.sanitize_for_serialization


def _classic_model(obj: Any) -> bool:
    return isinstance(getattr(obj, "openapi_types", None), dict) and isinstance(
        getattr(obj, "attribute_map", None), dict
    )


def sanitize_for_serialization(self: ApiClient, obj: Any) -> Any:
    """kubernetes <= 36 semantics for classic models: ``{json key: value}`` of non-None fields."""
    if _classic_model(obj):
        fields = {
            obj.attribute_map[attr]: getattr(obj, attr)
            for attr in obj.openapi_types
            if getattr(obj, attr) is not None
        }
        return {key: sanitize_for_serialization(self, value) for key, value in fields.items()}
    if isinstance(obj, list):
        return [sanitize_for_serialization(self, item) for item in obj]
    if isinstance(obj, dict):
        return {key: sanitize_for_serialization(self, value) for key, value in obj.items()}
    return _sanitize(self, obj)


ApiClient.sanitize_for_serialization = sanitize_for_serialization  # type: ignore[method-assign]
