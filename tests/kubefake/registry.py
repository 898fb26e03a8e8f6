"""The resource types the fake serves, and the one-liner to add a custom resource.

Each :class:`ResourceType` knows its group/version/plural/kind, whether it is namespaced,
its subresources and the DNS rule its names follow. ``Registry.add_crd(...)`` registers a
custom resource (``status`` subresource by default), e.g.::

    cluster.registry.add_crd("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    """One API resource, e.g. core/v1 pods."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    name_rule: str = "subdomain"  # subdomain | label | dns1035 | path
    singular: str = ""
    categories: tuple[str, ...] = ()
    custom: bool = False
    return_deleted: bool = False  # DELETE answers with the object instead of a Success Status

    @property
    def api_version(self) -> str:
        """``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: (group, plural)."""
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        """True when updates to the main resource ignore ``status``."""
        return "status" in self.subresources


@dataclass
class Registry:
    """All served resource types, indexed by (group, version, plural)."""

    types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    def add(self, rtype: ResourceType) -> ResourceType:
        """Register ``rtype`` (replacing one with the same group/version/plural)."""
        self.types[(rtype.group, rtype.version, rtype.plural)] = rtype
        return rtype

    def add_crd(
        self,
        group: str,
        version: str,
        kind: str,
        plural: str,
        namespaced: bool = True,
        status: bool = True,
        short_names: tuple[str, ...] = (),
    ) -> ResourceType:
        """Register a custom resource; it gets a ``status`` subresource unless ``status=False``."""
        return self.add(
            ResourceType(
                group,
                version,
                plural,
                kind,
                namespaced=namespaced,
                subresources=("status",) if status else (),
                short_names=short_names,
                singular=kind.lower(),
                categories=("all",),
                custom=True,
            )
        )

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/apis/group/version/plural`` or ``None``."""
        return self.types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        """The type for an object's apiVersion/kind (ownerReferences, involvedObject)."""
        for rtype in self.types.values():
            if rtype.api_version == api_version and rtype.kind == kind:
                return rtype
        return None

    def by_name(self, name: str) -> ResourceType:
        """Find a type by plural, ``plural.group``, kind or short name (for the Python API)."""
        for rtype in self.types.values():
            names = {
                rtype.plural,
                f"{rtype.plural}.{rtype.group}",
                rtype.kind,
                rtype.kind.lower(),
                *rtype.short_names,
            }
            if name in names:
                return rtype
        raise KeyError(name)

    def groups(self) -> dict[str, list[str]]:
        """Named API groups -> versions (core group excluded)."""
        out: dict[str, list[str]] = {}
        for rtype in self.types.values():
            if rtype.group and rtype.version not in out.setdefault(rtype.group, []):
                out[rtype.group].append(rtype.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        """Every type served under one group/version."""
        return [t for t in self.types.values() if t.group == group and t.version == version]


def default_registry() -> Registry:
    """Core types used by classhub/KubeSpawner, RBAC, plus kubeflow.org/v1 PyTorchJob."""
    reg = Registry()
    core = [
        ResourceType("", "v1", "namespaces", "Namespace", False, ("status", "finalize"), ("ns",), "label"),
        ResourceType("", "v1", "nodes", "Node", False, ("status", "proxy"), ("no",)),
        ResourceType(
            "",
            "v1",
            "pods",
            "Pod",
            True,
            ("status", "log", "binding", "eviction", "exec"),
            ("po",),
            categories=("all",),
            return_deleted=True,
        ),
        ResourceType("", "v1", "events", "Event", True, (), ("ev",)),
        ResourceType(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            True,
            ("status",),
            ("pvc",),
            return_deleted=True,
        ),
        ResourceType(
            "",
            "v1",
            "services",
            "Service",
            True,
            ("status",),
            ("svc",),
            "dns1035",
            categories=("all",),
            return_deleted=True,
        ),
        ResourceType("", "v1", "secrets", "Secret", True),
        ResourceType("", "v1", "configmaps", "ConfigMap", True, (), ("cm",)),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, (), ("sa",), return_deleted=True),
        ResourceType("", "v1", "endpoints", "Endpoints", True, (), ("ep",)),
    ]
    rbac = "rbac.authorization.k8s.io"  # z2jh's hub Role/RoleBinding, helm-values/*-rbac.yaml
    core += [
        ResourceType(rbac, "v1", "roles", "Role", True, name_rule="path"),
        ResourceType(rbac, "v1", "rolebindings", "RoleBinding", True, name_rule="path"),
        ResourceType(rbac, "v1", "clusterroles", "ClusterRole", False, name_rule="path"),
        ResourceType(rbac, "v1", "clusterrolebindings", "ClusterRoleBinding", False, name_rule="path"),
    ]
    # grading pods' NetworkPolicy (helm-values/grading-networkpolicy.yaml); stored, not enforced
    core.append(ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, (),
                             ("netpol",)))
    for rtype in core:
        reg.add(rtype)
    reg.add_crd("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
    return reg
