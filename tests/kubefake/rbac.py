"""``rbac.authorization.k8s.io/v1``: Roles, ClusterRoles, RoleBindings, ClusterRoleBindings.

Stored and validated as kube-apiserver does for what classhub and z2jh use (the chart's hub Role
and RoleBinding, ``helm-values/capacity-rbac.yaml``): a rule needs verbs and, unless it names
non-resource URLs (ClusterRoles only), apiGroups and resources; a binding's roleRef must name a
Role or ClusterRole of this group and cannot change once made; subjects are ServiceAccounts
(with a namespace in a ClusterRoleBinding), Users or Groups, whose apiGroup defaults to this
group at decode time (``pkg/apis/rbac/validation/validation.go``, ``rbac/v1/defaults.go``).
Nothing is authorized by them: the fake has no authentication, every client may do anything.
"""

from __future__ import annotations

from typing import Any

GROUP = "rbac.authorization.k8s.io"
Cause = dict[str, str]


def _required(field: str, detail: str = "") -> Cause:
    message = "Required value" + (f": {detail}" if detail else "")
    return {"reason": "FieldValueRequired", "message": message, "field": field}


def _unsupported(field: str, value: Any, supported: list[str]) -> Cause:
    allowed = ", ".join(f'"{s}"' for s in supported)
    return {
        "reason": "FieldValueNotSupported",
        "message": f'Unsupported value: "{value}": supported values: {allowed}',
        "field": field,
    }


def _invalid(field: str, shown: str, detail: str) -> Cause:
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {shown}: {detail}", "field": field}


def _go_strings(values: list[Any]) -> str:
    return "[]string{" + ", ".join(f'"{v}"' for v in values) + "}"


def default_subjects(obj: dict[str, Any]) -> None:
    """``SetDefaults_Subject``: a User or Group subject without apiGroup gets this group."""
    for subject in obj.get("subjects") or []:
        if isinstance(subject, dict) and subject.get("kind") in ("User", "Group"):
            subject.setdefault("apiGroup", GROUP)


def check_rules(obj: dict[str, Any], namespaced: bool) -> list[Cause]:
    """``ValidatePolicyRule`` for each of ``rules``."""
    causes: list[Cause] = []
    for i, rule in enumerate(obj.get("rules") or []):
        path = f"rules[{i}]"
        rule = rule if isinstance(rule, dict) else {}
        if not rule.get("verbs"):
            causes.append(_required(f"{path}.verbs", "verbs must contain at least one value"))
        urls = rule.get("nonResourceURLs") or []
        if urls:
            if namespaced:
                causes.append(
                    _invalid(f"{path}.nonResourceURLs", _go_strings(urls),
                             "namespaced rules cannot apply to non-resource URLs")
                )  # fmt: skip
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                causes.append(
                    _invalid(f"{path}.nonResourceURLs", _go_strings(urls),
                             "rules cannot apply to both regular resources and non-resource URLs")
                )  # fmt: skip
            continue
        if not rule.get("apiGroups"):
            causes.append(_required(f"{path}.apiGroups", "resource rules must supply at least one api group"))
        if not rule.get("resources"):
            causes.append(_required(f"{path}.resources", "resource rules must supply at least one resource"))
    return causes


def check_binding(obj: dict[str, Any], namespaced: bool) -> list[Cause]:
    """``ValidateRoleBinding`` / ``ValidateClusterRoleBinding``: roleRef and subjects."""
    causes: list[Cause] = []
    ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
    if ref.get("apiGroup", "") != GROUP:
        causes.append(_unsupported("roleRef.apiGroup", ref.get("apiGroup", ""), [GROUP]))
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    if ref.get("kind", "") not in kinds:
        causes.append(_unsupported("roleRef.kind", ref.get("kind", ""), kinds))
    if not ref.get("name"):
        causes.append(_required("roleRef.name"))
    for i, subject in enumerate(obj.get("subjects") or []):
        path = f"subjects[{i}]"
        subject = subject if isinstance(subject, dict) else {}
        if not subject.get("name"):
            causes.append(_required(f"{path}.name"))
        kind, api_group = subject.get("kind", ""), subject.get("apiGroup", "")
        if kind == "ServiceAccount":
            if api_group:
                causes.append(_unsupported(f"{path}.apiGroup", api_group, [""]))
            if not namespaced and not subject.get("namespace"):
                causes.append(_required(f"{path}.namespace"))
        elif kind in ("User", "Group"):
            if api_group != GROUP:
                causes.append(_unsupported(f"{path}.apiGroup", api_group, [GROUP]))
        else:
            causes.append(_unsupported(f"{path}.kind", kind, ["ServiceAccount", "User", "Group"]))
    return causes


def check_role_ref_unchanged(old: dict[str, Any], new: dict[str, Any]) -> list[Cause]:
    """A binding's roleRef is immutable (``ValidateRoleBindingUpdate``): delete and re-create."""
    before, after = old.get("roleRef") or {}, new.get("roleRef") or {}
    if before == after:
        return []
    shown = (
        f'rbac.RoleRef{{APIGroup:"{after.get("apiGroup", "")}", Kind:"{after.get("kind", "")}", '
        f'Name:"{after.get("name", "")}"}}'
    )
    return [_invalid("roleRef", shown, "cannot change roleRef")]
