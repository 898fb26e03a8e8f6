"""Create/update validation that kube-apiserver performs and clients rely on (422 Invalid).

Covers: object names per resource rule (DNS-1123 subdomain/label, DNS-1035 label), label
keys/values, pods without containers, container names, extended-resource requests vs limits,
container ports (range, IANA names), volumes (names, one source, claimName) and volume mounts
(known volume, unique path), and PVC specs (access modes, storage request). Messages are the
field errors' ``ErrorBody()`` text, as kube-apiserver's StatusReasonInvalid causes carry them.
"""

from __future__ import annotations

import re
from typing import Any

from . import rbac
from .quantity import is_quantity, parse_quantity
from .registry import ResourceType

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_LABEL_RE = re.compile(rf"^{_LABEL}$")
_DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NATIVE_PREFIXES = ("kubernetes.io/", "requests.", "")
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "storage", "pods"}

Cause = dict[str, str]


def _cause(field: str, kind: str, detail: str, value: Any = None) -> Cause:
    if kind == "FieldValueRequired":
        message = "Required value" + (f": {detail}" if detail else "")
    elif kind == "FieldValueInvalid":
        message = f"Invalid value: {_repr(value)}: {detail}"
    elif kind == "FieldValueTooLong":
        message = f"Too long: {detail}"
    else:
        message = detail
    return {"reason": kind, "message": message, "field": field}


def _repr(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def check_name(name: str, rule: str, field: str = "metadata.name") -> list[Cause]:
    """Validate an object name against ``rule`` (subdomain, label, dns1035 or path: RBAC objects
    take any valid path segment, e.g. ``system:controller:x``, ``ValidatePathSegmentName``)."""
    if rule == "path":
        if name in (".", ".."):
            return [_cause(field, "FieldValueInvalid", f"may not be '{name}'", name)]
        return [_cause(field, "FieldValueInvalid", f"may not contain '{c}'", name) for c in "/%" if c in name]
    if rule == "label":
        ok, limit, msg = bool(_LABEL_RE.match(name)), 63, LABEL_MSG
    elif rule == "dns1035":
        ok, limit, msg = bool(_DNS1035_RE.match(name)), 63, DNS1035_MSG
    else:
        ok, limit, msg = bool(_SUBDOMAIN_RE.match(name)), 253, SUBDOMAIN_MSG
    causes = []
    if len(name) > limit:
        causes.append(_cause(field, "FieldValueInvalid", f"must be no more than {limit} characters", name))
    if not ok:
        causes.append(_cause(field, "FieldValueInvalid", msg, name))
    return causes


def check_label_key(key: str, field: str) -> list[Cause]:
    """Validate a label/annotation key (optional DNS subdomain prefix + qualified name)."""
    prefix, _, name = key.rpartition("/")
    causes = []
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN_RE.match(prefix)):
        causes.append(_cause(field, "FieldValueInvalid", "prefix part " + SUBDOMAIN_MSG, key))
    if not name or len(name) > 63 or not _QUALIFIED_NAME_RE.match(name):
        causes.append(
            _cause(
                field,
                "FieldValueInvalid",
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                key,
            )
        )
    return causes


def check_labels(labels: Any, field: str = "metadata.labels") -> list[Cause]:
    """Validate label keys and values."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [_cause(field, "FieldValueInvalid", "must be a map", labels)]
    causes = []
    for key, value in labels.items():
        causes += check_label_key(key, field)
        if not isinstance(value, str):
            causes.append(_cause(f"{field}", "FieldValueInvalid", "label values must be strings", value))
        elif len(value) > 63:
            causes.append(_cause(field, "FieldValueInvalid", "must be no more than 63 characters", value))
        elif not _LABEL_VALUE_RE.match(value):
            causes.append(_cause(field, "FieldValueInvalid", LABEL_VALUE_MSG, value))
    return causes


def check_meta(obj: dict[str, Any], rtype: ResourceType, creating: bool) -> list[Cause]:
    """Validate ``metadata`` (name presence and format, labels, annotation keys)."""
    meta = obj.get("metadata") or {}
    causes: list[Cause] = []
    name = meta.get("name") or ""
    if not name:
        if not (creating and meta.get("generateName")):
            causes.append(_cause("metadata.name", "FieldValueRequired", "name or generateName is required"))
    else:
        causes += check_name(name, rtype.name_rule)
    causes += check_labels(meta.get("labels"))
    for key in meta.get("annotations") or {}:
        causes += check_label_key(key, "metadata.annotations")
    return causes


def _is_extended(resource: str) -> bool:
    if resource in STANDARD_RESOURCES or resource.startswith("hugepages-"):
        return False
    return "/" in resource and not resource.startswith("kubernetes.io/")


def check_container(container: Any, path: str, names: set[str], volumes: set[str]) -> list[Cause]:
    """Validate one container: name, image, ports, volume mounts, resources."""
    if not isinstance(container, dict):
        return [_cause(path, "FieldValueInvalid", "must be an object", container)]
    causes: list[Cause] = []
    name = container.get("name")
    if not name:
        causes.append(_cause(f"{path}.name", "FieldValueRequired", ""))
    else:
        causes += check_name(name, "label", f"{path}.name")
        if name in names:
            causes.append(_cause(f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
        names.add(name)
    if not container.get("image"):
        causes.append(_cause(f"{path}.image", "FieldValueRequired", ""))
    causes += check_ports(container.get("ports") or [], f"{path}.ports")
    causes += check_volume_mounts(container.get("volumeMounts") or [], f"{path}.volumeMounts", volumes)
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    for kind, values in (("requests", requests), ("limits", limits)):
        for res, qty in values.items():
            if not is_quantity(qty):
                causes.append(
                    _cause(
                        f"{path}.resources.{kind}[{res}]",
                        "FieldValueInvalid",
                        "must be a valid quantity",
                        qty,
                    )
                )
    for res, qty in requests.items():
        field = f"{path}.resources.requests[{res}]"
        if not is_quantity(qty):
            continue
        if _is_extended(res):
            if res not in limits:
                causes.append(
                    _cause(field, "FieldValueRequired", "Limit must be set for non overcommitable resources")
                )
            elif is_quantity(limits[res]) and parse_quantity(limits[res]) != parse_quantity(qty):
                causes.append(_cause(field, "FieldValueInvalid", f"must be equal to {res} limit", qty))
        elif res in limits and is_quantity(limits[res]) and parse_quantity(qty) > parse_quantity(limits[res]):
            causes.append(
                _cause(field, "FieldValueInvalid", f"must be less than or equal to {res} limit", qty)
            )
    return causes


_PORT_NAME_RE = re.compile(r"^[-a-z0-9]+$")
VOLUME_SOURCES = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI",
    "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk",
    "projected", "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
)  # fmt: skip


def port_name_errors(name: str) -> list[str]:
    """The messages of IsValidPortName (an IANA_SVC_NAME), in its order."""
    errors = []
    if len(name) > 15:
        errors.append("must be no more than 15 characters")
    if not _PORT_NAME_RE.match(name):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search("[a-z]", name):
        errors.append("must contain at least one letter (a-z)")
    if "--" in name:
        errors.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def check_ports(ports: list[Any], path: str) -> list[Cause]:
    """Container ports: IANA port names (unique), 1..65535, TCP/UDP/SCTP (validateContainerPorts)."""
    causes: list[Cause] = []
    names: set[str] = set()
    for i, port in enumerate(ports):
        here = f"{path}[{i}]"
        name = port.get("name") or ""
        if name:
            errors = port_name_errors(name)
            causes += [_cause(f"{here}.name", "FieldValueInvalid", msg, name) for msg in errors]
            if not errors and name in names:
                causes.append(_cause(f"{here}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
            names.add(name)
        number = port.get("containerPort")
        if not number:
            causes.append(_cause(f"{here}.containerPort", "FieldValueRequired", ""))
        elif not isinstance(number, int) or not 1 <= number <= 65535:
            causes.append(
                _cause(
                    f"{here}.containerPort",
                    "FieldValueInvalid",
                    "must be between 1 and 65535, inclusive",
                    number,
                )
            )
        protocol = port.get("protocol")
        if protocol is not None and protocol not in ("TCP", "UDP", "SCTP"):
            causes.append(
                _cause(
                    f"{here}.protocol",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{protocol}": supported values: "SCTP", "TCP", "UDP"',
                )
            )
    return causes


def check_volumes(volumes: list[Any], path: str) -> tuple[list[Cause], set[str]]:
    """Pod volumes: DNS-label names, unique, exactly one source, a claimName (validateVolumes).

    Returns the causes and the set of valid volume names (what volumeMounts may refer to)."""
    causes: list[Cause] = []
    names: set[str] = set()
    for i, volume in enumerate(volumes):
        here = f"{path}[{i}]"
        name = volume.get("name") or ""
        name_causes = (
            check_name(name, "label", f"{here}.name")
            if name
            else [_cause(f"{here}.name", "FieldValueRequired", "")]
        )
        causes += name_causes
        if name and name in names:
            causes.append(_cause(f"{here}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
        elif not name_causes:
            names.add(name)
        sources = [key for key in VOLUME_SOURCES if volume.get(key) is not None]
        if not sources:
            causes.append(_cause(here, "FieldValueRequired", "must specify a volume type"))
        elif len(sources) > 1:
            causes.append(
                _cause(
                    f"{here}.{sources[1]}",
                    "FieldValueForbidden",
                    "Forbidden: may not specify more than 1 volume type",
                )
            )
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict) and not claim.get("claimName"):
            causes.append(_cause(f"{here}.persistentVolumeClaim.claimName", "FieldValueRequired", ""))
    return causes, names


def check_volume_mounts(mounts: list[Any], path: str, volumes: set[str]) -> list[Cause]:
    """Volume mounts: the volume exists, mountPath set and unique (ValidateVolumeMounts)."""
    causes: list[Cause] = []
    paths: set[str] = set()
    for i, mount in enumerate(mounts):
        here = f"{path}[{i}]"
        name = mount.get("name") or ""
        if not name:
            causes.append(_cause(f"{here}.name", "FieldValueRequired", ""))
        elif name not in volumes:
            causes.append(_cause(f"{here}.name", "FieldValueNotFound", f'Not found: "{name}"'))
        mount_path = mount.get("mountPath") or ""
        if not mount_path:
            causes.append(_cause(f"{here}.mountPath", "FieldValueRequired", ""))
        elif mount_path in paths:
            causes.append(_cause(f"{here}.mountPath", "FieldValueInvalid", "must be unique", mount_path))
        paths.add(mount_path)
    return causes


def check_pvc_spec(spec: Any) -> list[Cause]:
    """A claim needs an access mode and a storage request (ValidatePersistentVolumeClaimSpec)."""
    spec = spec if isinstance(spec, dict) else {}
    causes: list[Cause] = []
    modes = spec.get("accessModes") or []
    if not modes:
        causes.append(_cause("spec.accessModes", "FieldValueRequired", "at least 1 access mode is required"))
    supported = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
    for mode in modes:
        if mode not in supported:
            causes.append(
                _cause(
                    "spec.accessModes",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{mode}": supported values: '
                    + ", ".join(f'"{m}"' for m in supported),
                )
            )
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        causes.append(_cause("spec.resources[storage]", "FieldValueRequired", ""))
    elif not is_quantity(storage) or parse_quantity(storage) <= 0:
        causes.append(
            _cause("spec.resources[storage]", "FieldValueInvalid", "must be greater than zero", storage)
        )
    return causes


def check_pod_spec(spec: Any, path: str = "spec") -> list[Cause]:
    """Validate a PodSpec: volumes, at least one container, valid containers, restartPolicy."""
    if not isinstance(spec, dict):
        return [_cause(path, "FieldValueRequired", "")]
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not containers:
        causes.append(_cause(f"{path}.containers", "FieldValueRequired", ""))
    volume_causes, volumes = check_volumes(spec.get("volumes") or [], f"{path}.volumes")
    causes += volume_causes
    names: set[str] = set()
    for i, container in enumerate(containers or []):
        causes += check_container(container, f"{path}.containers[{i}]", names, volumes)
    for i, container in enumerate(spec.get("initContainers") or []):
        causes += check_container(container, f"{path}.initContainers[{i}]", names, volumes)
    policy = spec.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        causes.append(
            _cause(
                f"{path}.restartPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    causes += check_labels(spec.get("nodeSelector"), f"{path}.nodeSelector")
    return causes


def validate(obj: dict[str, Any], rtype: ResourceType, creating: bool) -> list[Cause]:
    """All causes for ``obj`` of type ``rtype``; empty means valid."""
    causes = check_meta(obj, rtype, creating)
    if rtype.key == ("", "pods"):
        causes += check_pod_spec(obj.get("spec"))
    elif rtype.key == ("", "persistentvolumeclaims"):
        causes += check_pvc_spec(obj.get("spec"))
    elif rtype.key == ("networking.k8s.io", "networkpolicies"):
        from .netpol import check_network_policy

        causes += check_network_policy(obj)
    elif rtype.key in ((rbac.GROUP, "roles"), (rbac.GROUP, "clusterroles")):
        causes += rbac.check_rules(obj, rtype.namespaced)
    elif rtype.key in ((rbac.GROUP, "rolebindings"), (rbac.GROUP, "clusterrolebindings")):
        rbac.default_subjects(obj)  # kube-apiserver defaults while decoding, before validation
        causes += rbac.check_binding(obj, rtype.namespaced)
    return causes


def validate_pod_update(old: dict[str, Any], new: dict[str, Any]) -> list[Cause]:
    """Pod updates may change only a few spec fields (images, activeDeadlineSeconds, tolerations)."""

    def strip(spec: dict[str, Any]) -> dict[str, Any]:
        spec = {k: v for k, v in (spec or {}).items() if k not in ("activeDeadlineSeconds", "tolerations")}
        spec["containers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []
        ]
        spec["initContainers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("initContainers") or []
        ]
        return spec

    if strip(old.get("spec") or {}) != strip(new.get("spec") or {}):
        return [
            _cause(
                "spec",
                "FieldValueForbidden",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
                "(only additions to existing tolerations), `spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)",
            )
        ]
    return []
