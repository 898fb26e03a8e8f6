"""The fake answers what kube-apiserver (and kube-controller-manager) answer where a spawner's
failure paths live: PVC protection, deep validation, a pod whose claim is missing, admission
refusals, and a read at a resourceVersion the server has not reached.

Expected bodies follow kube-apiserver 1.3x: ``Status`` with reason, message and (for 422/403)
``details.causes`` carrying the field path and the field error's text.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from tests.kubefake import FakeCluster
from tests.kubefake.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster() as c:
        c.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield c


@pytest.fixture(scope="module")
def v1(cluster):
    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


@pytest.fixture
def ns(v1):
    name = f"t-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: _exists(v1.read_namespaced_service_account, "default", name), what="default SA")
    return name


def _exists(read: Any, name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def failure(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == exc.status
    return body


def pvc(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def pod(name: str, claim: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}], **spec},
    }
    if claim:
        body["spec"]["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}]
        body["spec"]["containers"][0]["volumeMounts"] = [{"name": "home", "mountPath": "/home"}]
    return body


def running(v1: Any, name: str, namespace: str) -> bool:
    return v1.read_namespaced_pod(name, namespace).status.phase == "Running"


# ---------------------------------------------------------------- PVC protection
def test_a_claim_a_pod_mounts_stays_terminating_until_the_pod_is_gone(v1, ns):
    created = v1.create_namespaced_persistent_volume_claim(ns, pvc("home"))
    assert created.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    v1.create_namespaced_pod(ns, pod("user", claim="home"))
    wait_for(lambda: running(v1, "user", ns), what="the pod to run")

    body, code, _ = v1.delete_namespaced_persistent_volume_claim_with_http_info("home", ns)
    assert code == 200 and body.metadata.deletion_timestamp is not None
    assert body.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    terminating = v1.read_namespaced_persistent_volume_claim("home", ns)
    assert terminating.metadata.deletion_timestamp is not None and terminating.status.phase == "Bound"

    with pytest.raises(ApiException) as info:
        v1.create_namespaced_persistent_volume_claim(ns, pvc("home"))
    err = failure(info.value)
    assert (err["code"], err["reason"]) == (409, "AlreadyExists")
    assert err["message"] == 'persistentvolumeclaims "home" already exists'

    v1.delete_namespaced_pod("user", ns, grace_period_seconds=0)
    wait_for(lambda: not _exists(v1.read_namespaced_persistent_volume_claim, "home", ns), what="claim gone")
    v1.create_namespaced_persistent_volume_claim(ns, pvc("home"))  # the name is free again


def test_an_unused_claim_is_removed_right_after_its_delete(v1, ns):
    v1.create_namespaced_persistent_volume_claim(ns, pvc("spare"))
    v1.delete_namespaced_persistent_volume_claim("spare", ns)
    wait_for(lambda: not _exists(v1.read_namespaced_persistent_volume_claim, "spare", ns), what="claim gone")


# ---------------------------------------------------------------- validation
def _mount_without_volume() -> dict[str, Any]:
    body = pod("p")
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "home", "mountPath": "/home"}]
    return body


def _duplicate_volume() -> dict[str, Any]:
    body = pod("p", claim="c")
    body["spec"]["volumes"].append({"name": "home", "emptyDir": {}})
    return body


def _port(**port: Any) -> dict[str, Any]:
    body = pod("p")
    body["spec"]["containers"][0]["ports"] = [port]
    return body


INVALID = [
    ("pods", _mount_without_volume(), "spec.containers[0].volumeMounts[0].name", "FieldValueNotFound",
     'Not found: "home"'),
    ("pods", _duplicate_volume(), "spec.volumes[1].name", "FieldValueDuplicate", 'Duplicate value: "home"'),
    ("pods", _port(containerPort=70000), "spec.containers[0].ports[0].containerPort", "FieldValueInvalid",
     "Invalid value: 70000: must be between 1 and 65535, inclusive"),
    ("pods", _port(containerPort=8888, name="notebook-port-for-labs"), "spec.containers[0].ports[0].name",
     "FieldValueInvalid", 'Invalid value: "notebook-port-for-labs": must be no more than 15 characters'),
    ("persistentvolumeclaims", {"metadata": {"name": "p"}, "spec": {}}, "spec.accessModes",
     "FieldValueRequired", "Required value: at least 1 access mode is required"),
]  # fmt: skip


@pytest.mark.parametrize(("plural", "body", "field", "reason", "message"), INVALID)
def test_invalid_objects_are_422_naming_the_field(v1, ns, plural, body, field, reason, message):
    create = v1.create_namespaced_pod if plural == "pods" else v1.create_namespaced_persistent_volume_claim
    with pytest.raises(ApiException) as info:
        create(ns, body)
    err = failure(info.value)
    assert (err["code"], err["reason"]) == (422, "Invalid")
    kind = "Pod" if plural == "pods" else "PersistentVolumeClaim"
    assert err["details"]["kind"] == kind and err["details"]["name"] == "p"
    assert {"reason": reason, "message": message, "field": field} in err["details"]["causes"]
    assert err["message"].startswith(f'{kind} "p" is invalid: ')
    assert f"{field}: {message}" in err["message"]


def test_an_empty_claim_spec_lists_every_missing_field(v1, ns):
    with pytest.raises(ApiException) as info:
        v1.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "p"}, "spec": {}})
    assert failure(info.value)["message"] == (
        'PersistentVolumeClaim "p" is invalid: [spec.accessModes: Required value: at least 1 access mode '
        "is required, spec.resources[storage]: Required value]"
    )


# ---------------------------------------------------------------- scheduling on claims
def scheduling_events(v1: Any, namespace: str, name: str) -> list[str]:
    events = v1.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [e.message for e in events if e.reason == "FailedScheduling"]


def test_a_pod_whose_claim_is_missing_stays_pending_until_the_claim_exists(v1, ns, cluster):
    v1.create_namespaced_pod(ns, pod("user", claim="claim-user"))
    nodes = len(cluster.list("nodes"))
    expected = (
        f'0/{nodes} nodes are available: persistentvolumeclaim "claim-user" not found. '
        f"preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    )
    assert wait_for(lambda: scheduling_events(v1, ns, "user"), what="FailedScheduling") == [expected]
    current = v1.read_namespaced_pod("user", ns)
    assert current.status.phase == "Pending" and not current.spec.node_name
    scheduled = next(c for c in current.status.conditions if c.type == "PodScheduled")
    assert (scheduled.status, scheduled.reason, scheduled.message) == ("False", "Unschedulable", expected)

    v1.create_namespaced_persistent_volume_claim(ns, pvc("claim-user"))
    wait_for(lambda: running(v1, "user", ns), what="the pod to run once its claim exists")


# ---------------------------------------------------------------- admission
def test_a_pod_naming_a_missing_service_account_is_forbidden(v1, ns):
    with pytest.raises(ApiException) as info:
        v1.create_namespaced_pod(ns, pod("p", serviceAccountName="robot"))
    err = failure(info.value)
    assert (err["code"], err["reason"]) == (403, "Forbidden")
    assert err["message"] == (
        f'pods "p" is forbidden: error looking up service account {ns}/robot: '
        'serviceaccount "robot" not found'
    )
    assert err["details"] == {"name": "p", "kind": "pods"}


def test_a_new_namespace_refuses_pods_until_its_default_service_account_exists(tmp_path):
    with FakeCluster(latencies="service_account=0.5") as slow:
        client = kubernetes.config.new_client_from_config(
            config_file=str(slow.write_kubeconfig(tmp_path / "kc"))
        )
        api = kubernetes.client.CoreV1Api(client)
        api.create_namespace({"metadata": {"name": "fresh"}})
        with pytest.raises(ApiException) as info:
            api.create_namespaced_pod("fresh", pod("p"))
        assert failure(info.value)["message"] == (
            'pods "p" is forbidden: error looking up service account fresh/default: '
            'serviceaccount "default" not found'
        )
        # the service-account controller creates it a moment later; then the same create works
        wait_for(lambda: _exists(api.read_namespaced_service_account, "default", "fresh"), what="default SA")
        api.create_namespaced_pod("fresh", pod("p"))
        client.close()


def test_creating_in_a_terminating_namespace_is_forbidden(v1, ns):
    held = {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {"k": "v"}}
    v1.create_namespaced_config_map(ns, held)
    v1.delete_namespace(ns)
    assert v1.read_namespace(ns).status.phase == "Terminating"
    with pytest.raises(ApiException) as info:
        v1.create_namespaced_config_map(ns, {"metadata": {"name": "late"}})
    err = failure(info.value)
    assert (err["code"], err["reason"]) == (403, "Forbidden")
    assert err["message"] == (
        f'configmaps "late" is forbidden: unable to create new content in namespace {ns} '
        "because it is being terminated"
    )
    assert err["details"]["causes"] == [
        {"reason": "NamespaceTerminating", "message": f"namespace {ns} is being terminated",
         "field": "metadata.namespace"}
    ]  # fmt: skip
    v1.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})
    wait_for(lambda: not _exists(lambda n, _: v1.read_namespace(n), ns, ns), what="namespace gone")


# ---------------------------------------------------------------- resourceVersion
def test_a_list_at_a_future_resource_version_is_504_too_large(v1, ns):
    current = int(v1.list_namespaced_pod(ns).metadata.resource_version)
    with pytest.raises(ApiException) as info:
        v1.list_namespaced_pod(
            ns, resource_version=str(current + 1000), resource_version_match="NotOlderThan"
        )
    err = failure(info.value)
    assert (err["code"], err["reason"]) == (504, "Timeout")
    assert err["message"].startswith(f"Timeout: Too large resource version: {current + 1000}, current: ")
    assert err["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    ]
    assert err["details"]["retryAfterSeconds"] == 1
    # the current resourceVersion itself is fine
    v1.list_namespaced_pod(ns, resource_version=str(current), resource_version_match="NotOlderThan")
