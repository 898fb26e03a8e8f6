"""``networking.k8s.io/v1`` NetworkPolicies: stored and validated as kube-apiserver does
(``pkg/apis/networking/validation``), enforced by nothing (the fake has no network plugin).

Validation: ``spec.podSelector`` and every peer's selectors are label selectors (valid keys and
values, ``In``/``NotIn`` with values, ``Exists``/``DoesNotExist`` without); ``policyTypes`` are
``Ingress`` or ``Egress``, at most two; a port's protocol is TCP, UDP or SCTP, its number
1-65535 or an IANA name, ``endPort`` only after a numeric port and not below it; a peer names
a ``podSelector`` and/or ``namespaceSelector``, or an ``ipBlock`` alone, whose ``cidr`` is a
CIDR and whose ``except`` entries lie strictly inside it. Messages are the field errors' text.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from .validation import Cause, _cause, check_label_key, check_labels, port_name_errors

GROUP = "networking.k8s.io"
PORT_RANGE = "must be between 1 and 65535, inclusive"


def check_selector(selector: Any, path: str) -> list[Cause]:
    """A metav1.LabelSelector (ValidateLabelSelector)."""
    if selector is None:
        return []
    if not isinstance(selector, dict):
        return [_cause(path, "FieldValueInvalid", "must be a label selector", str(selector))]
    causes = check_labels(selector.get("matchLabels"), f"{path}.matchLabels")
    for i, req in enumerate(selector.get("matchExpressions") or []):
        here = f"{path}.matchExpressions[{i}]"
        op, values = req.get("operator"), req.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                causes.append(_cause(f"{here}.values", "FieldValueRequired",
                                     "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                causes.append(_cause(f"{here}.values", "FieldValueForbidden",
                                     "Forbidden: may not be specified when `operator` is 'Exists' or "
                                     "'DoesNotExist'"))
        else:
            causes.append(_cause(f"{here}.operator", "FieldValueInvalid", "not a valid selector operator",
                                 str(op)))
        causes += check_label_key(str(req.get("key", "")), f"{here}.key")
    return causes


def check_port(port: dict[str, Any], path: str) -> list[Cause]:
    """ValidateNetworkPolicyPort."""
    causes: list[Cause] = []
    protocol = port.get("protocol")
    if protocol is not None and protocol not in ("TCP", "UDP", "SCTP"):
        causes.append(_cause(f"{path}.protocol", "FieldValueNotSupported",
                             f'Unsupported value: "{protocol}": supported values: "SCTP", "TCP", "UDP"'))
    number, end = port.get("port"), port.get("endPort")
    if isinstance(number, int):
        if not 1 <= number <= 65535:
            causes.append(_cause(f"{path}.port", "FieldValueInvalid", PORT_RANGE, number))
        if end is not None:
            if end < number:
                causes.append(_cause(f"{path}.endPort", "FieldValueInvalid",
                                     "must be greater than or equal to `port`", number))
            if not 1 <= end <= 65535:
                causes.append(_cause(f"{path}.endPort", "FieldValueInvalid", PORT_RANGE, end))
    elif number is not None:
        if end is not None:
            causes.append(_cause(f"{path}.endPort", "FieldValueInvalid",
                                 "may not be specified when `port` is non-numeric", end))
        causes += [_cause(f"{path}.port", "FieldValueInvalid", m, str(number))
                   for m in port_name_errors(str(number))]
    elif end is not None:
        causes.append(_cause(f"{path}.endPort", "FieldValueInvalid",
                             "may not be specified when `port` is not specified", end))
    return causes


def check_peer(peer: dict[str, Any], path: str) -> list[Cause]:
    """ValidateNetworkPolicyPeer."""
    causes: list[Cause] = []
    kinds = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
    for key in ("podSelector", "namespaceSelector"):
        causes += check_selector(peer.get(key), f"{path}.{key}")
    if not kinds:
        causes.append(_cause(path, "FieldValueRequired", "must specify a peer"))
    elif len(kinds) > 1 and "ipBlock" in kinds:
        causes.append(_cause(path, "FieldValueForbidden",
                             "Forbidden: may not specify both ipBlock and another peer"))
    block = peer.get("ipBlock")
    if isinstance(block, dict):
        cidr = str(block.get("cidr") or "")
        if not cidr:
            causes.append(_cause(f"{path}.ipBlock.cidr", "FieldValueRequired", ""))
            return causes
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            causes.append(_cause(f"{path}.ipBlock.cidr", "FieldValueInvalid",
                                 "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)", cidr))
            return causes
        for i, text in enumerate(block.get("except") or []):
            here = f"{path}.ipBlock.except[{i}]"
            try:
                inner = ipaddress.ip_network(str(text), strict=False)
            except ValueError:
                causes.append(_cause(here, "FieldValueInvalid", "must be a valid CIDR value, (e.g. "
                                     "10.9.8.0/24 or 2001:db8::/64)", str(text)))
                continue
            if inner.version != network.version or not inner.subnet_of(network) or inner == network:  # type: ignore[arg-type]
                causes.append(_cause(here, "FieldValueInvalid", "must be a strict subset of `cidr`",
                                     str(text)))
    return causes


def check_network_policy(obj: dict[str, Any]) -> list[Cause]:
    """ValidateNetworkPolicySpec on a stored object's ``spec``."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        return [_cause("spec", "FieldValueInvalid", "must be an object", str(spec))]
    causes = check_selector(spec.get("podSelector") or {}, "spec.podSelector")
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            here = f"spec.{direction}[{i}]"
            for j, port in enumerate(rule.get("ports") or []):
                causes += check_port(port, f"{here}.ports[{j}]")
            for j, peer in enumerate(rule.get(peers) or []):
                causes += check_peer(peer, f"{here}.{peers}[{j}]")
    types = spec.get("policyTypes") or []
    if len(types) > 2:
        causes.append(_cause("spec.policyTypes", "FieldValueInvalid",
                             "may not specify more than two policyTypes", str(types)))
    for i, kind in enumerate(types):
        if kind not in ("Ingress", "Egress"):
            causes.append(_cause(f"spec.policyTypes[{i}]", "FieldValueNotSupported",
                                 f'Unsupported value: "{kind}": supported values: "Ingress", "Egress"'))
    return causes


def selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    """True when the policy's ``podSelector`` selects a pod with ``labels`` (matchLabels and
    matchExpressions, as the label selector of a list would)."""
    selector = (policy.get("spec") or {}).get("podSelector") or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
