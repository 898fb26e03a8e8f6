"""Conformance of the fake API server's REST semantics, driven by the official sync client."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import kubernetes
import pytest
import requests
import yaml
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
def api_client(cluster):
    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    yield client
    client.close()


@pytest.fixture
def v1(api_client):
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def ns(v1):
    name = f"t-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": name}})
    return name


def status_of(exc: ApiException) -> dict:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def cm(name: str, labels: dict | None = None, **meta) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}, **meta}, "data": {"k": "v"}}


def test_discovery_version_and_groups(api_client):
    version = kubernetes.client.VersionApi(api_client).get_code()
    assert version.major == "1" and version.git_version.startswith("v1.")
    core = kubernetes.client.CoreV1Api(api_client).get_api_resources()
    by_name = {r.name: r for r in core.resources}
    assert by_name["pods"].namespaced and by_name["pods"].kind == "Pod" and "watch" in by_name["pods"].verbs
    assert not by_name["nodes"].namespaced
    assert {"pods/status", "pods/log", "pods/binding"} <= set(by_name)
    groups = kubernetes.client.ApisApi(api_client).get_api_versions()
    assert "kubeflow.org" in {g.name for g in groups.groups}
    kf = kubernetes.client.CustomObjectsApi(api_client).get_api_resources("kubeflow.org", "v1")
    assert {r.name for r in kf.resources} >= {"pytorchjobs", "pytorchjobs/status"}


def test_system_namespaces_exist_and_are_active(v1):
    namespaces = {n.metadata.name: n for n in v1.list_namespace().items}
    assert {"default", "kube-system"} <= set(namespaces)
    assert namespaces["default"].status.phase == "Active"
    assert namespaces["default"].metadata.labels["kubernetes.io/metadata.name"] == "default"


def test_create_returns_201_with_server_set_metadata(v1, ns):
    obj, code, _ = v1.create_namespaced_config_map_with_http_info(ns, cm("a"))
    assert code == 201
    assert obj.metadata.uid and obj.metadata.creation_timestamp and obj.metadata.resource_version
    assert obj.metadata.namespace == ns
    generated = v1.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    assert re.fullmatch(r"gen-[a-z0-9]{5}", generated.metadata.name)


def test_resource_version_is_a_cluster_wide_counter(v1, ns):
    a = v1.create_namespaced_config_map(ns, cm("a"))
    b = v1.create_namespaced_secret(ns, {"metadata": {"name": "b"}, "stringData": {"x": "y"}})
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    listed = v1.list_namespaced_config_map(ns)
    assert int(listed.metadata.resource_version) >= int(b.metadata.resource_version)
    assert b.data == {"x": "eQ=="} and b.type == "Opaque"


def test_get_missing_is_404_not_found(v1, ns):
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_config_map("nope", ns)
    assert err.value.status == 404
    body = status_of(err.value)
    assert body["reason"] == "NotFound"
    assert body["message"] == 'configmaps "nope" not found'
    assert body["details"] == {"name": "nope", "kind": "configmaps"}


def test_create_in_missing_namespace_is_404(v1):
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map("does-not-exist", cm("a"))
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'namespaces "does-not-exist" not found'


def test_duplicate_create_is_409_already_exists(v1, ns):
    v1.create_namespaced_config_map(ns, cm("dup"))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(ns, cm("dup"))
    assert err.value.status == 409
    body = status_of(err.value)
    assert body["reason"] == "AlreadyExists" and body["message"] == 'configmaps "dup" already exists'


def test_update_with_stale_resource_version_is_409_conflict(v1, ns):
    first = v1.create_namespaced_config_map(ns, cm("c"))
    first.data = {"k": "v2"}
    second = v1.replace_namespaced_config_map("c", ns, first)
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    first.data = {"k": "v3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        v1.replace_namespaced_config_map("c", ns, first)
    assert err.value.status == 409
    body = status_of(err.value)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert v1.read_namespaced_config_map("c", ns).data == {"k": "v2"}


@pytest.mark.parametrize(
    ("kind", "body", "field"),
    [
        ("configmap", {"metadata": {}}, "metadata.name"),
        ("configmap", {"metadata": {"name": "Bad_Name"}}, "metadata.name"),
        (
            "configmap",
            {"metadata": {"name": "ok", "labels": {"app": "no spaces allowed"}}},
            "metadata.labels",
        ),
        ("pod", {"metadata": {"name": "p"}, "spec": {"containers": []}}, "spec.containers"),
        (
            "pod",
            {
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
                    ]
                },
            },
            "spec.containers[0].resources.requests",
        ),
        ("namespace", {"metadata": {"name": "has.dot"}}, "metadata.name"),
    ],
)
def test_invalid_objects_are_422_invalid(v1, ns, kind, body, field):
    create = {
        "configmap": lambda: v1.create_namespaced_config_map(ns, body),
        "pod": lambda: v1.create_namespaced_pod(ns, body),
        "namespace": lambda: v1.create_namespace(body),
    }[kind]
    with pytest.raises(ApiException) as err:
        create()
    assert err.value.status == 422
    result = status_of(err.value)
    assert result["reason"] == "Invalid"
    assert any(c["field"].startswith(field) for c in result["details"]["causes"]), result


LABELLED = {
    "a": {"app": "web", "tier": "front"},
    "b": {"app": "web", "tier": "back"},
    "c": {"app": "db"},
    "d": {},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", {"a", "b"}),
        ("app==web", {"a", "b"}),
        ("app!=web", {"c", "d"}),
        ("tier in (front,back)", {"a", "b"}),
        ("tier notin (front)", {"b", "c", "d"}),
        ("tier", {"a", "b"}),
        ("!tier", {"c", "d"}),
        ("app=web,tier!=front", {"b"}),
    ],
)
def test_label_selectors(v1, ns, selector, expected):
    for name, labels in LABELLED.items():
        v1.create_namespaced_config_map(ns, cm(name, labels))
    found = {i.metadata.name for i in v1.list_namespaced_config_map(ns, label_selector=selector).items}
    assert found == expected


def test_field_selectors_and_unsupported_fields(v1, ns):
    for name in ("x", "y"):
        v1.create_namespaced_config_map(ns, cm(name))
    assert [
        i.metadata.name for i in v1.list_namespaced_config_map(ns, field_selector="metadata.name=x").items
    ] == ["x"]
    assert [
        i.metadata.name for i in v1.list_namespaced_config_map(ns, field_selector="metadata.name!=x").items
    ] == ["y"]
    every = v1.list_config_map_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert {i.metadata.name for i in every.items} == {"x", "y"}
    with pytest.raises(ApiException) as err:
        v1.list_namespaced_config_map(ns, field_selector="data.k=v")
    assert err.value.status == 400 and "field label not supported" in status_of(err.value)["message"]


def test_pod_field_selectors_and_all_namespace_list(v1, ns):
    pod = {
        "metadata": {"name": "p"},
        "spec": {"schedulerName": "none", "containers": [{"name": "c", "image": "i"}]},
    }
    v1.create_namespaced_pod(ns, pod)
    pending = v1.list_pod_for_all_namespaces(field_selector=f"status.phase=Pending,metadata.namespace={ns}")
    assert [p.metadata.name for p in pending.items] == ["p"]
    assert v1.list_namespaced_pod(ns, field_selector="spec.nodeName=cpu-0").items == []
    assert [p.metadata.name for p in v1.list_namespaced_pod(ns, field_selector="spec.nodeName=").items] == [
        "p"
    ]


def test_pod_defaults_requests_from_limits(v1, ns):
    pod = v1.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "p"},
            "spec": {
                "schedulerName": "none",
                "containers": [
                    {
                        "name": "c",
                        "image": "img:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}},
                    }
                ],
            },
        },
    )
    assert pod.spec.containers[0].resources.requests == {"nvidia.com/gpu": "1", "cpu": "2"}
    assert pod.spec.restart_policy == "Always" and pod.spec.termination_grace_period_seconds == 30
    assert pod.status.phase == "Pending"


def test_pagination_with_limit_and_continue(v1, ns):
    for i in range(5):
        v1.create_namespaced_config_map(ns, cm(f"p{i}"))
    first = v1.list_namespaced_config_map(ns, limit=2)
    assert len(first.items) == 2 and first.metadata._continue and first.metadata.remaining_item_count == 3
    names = [i.metadata.name for i in first.items]
    token = first.metadata._continue
    while token:
        page = v1.list_namespaced_config_map(ns, limit=2, _continue=token)
        names += [i.metadata.name for i in page.items]
        token = page.metadata._continue
    assert names == [f"p{i}" for i in range(5)]


def test_merge_strategic_and_json_patches(v1, ns):
    v1.create_namespaced_config_map(ns, cm("m", {"keep": "1", "drop": "1"}))
    out = v1.patch_namespaced_config_map(
        "m",
        ns,
        {"metadata": {"labels": {"drop": None, "new": "2"}}},
        _content_type="application/merge-patch+json",
    )
    assert out.metadata.labels == {"keep": "1", "new": "2"}

    pod = {
        "metadata": {"name": "sp"},
        "spec": {
            "schedulerName": "none",
            "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}],
        },
    }
    v1.create_namespaced_pod(ns, pod)
    patched = v1.patch_namespaced_pod("sp", ns, {"spec": {"containers": [{"name": "b", "image": "b:2"}]}})
    assert [(c.name, c.image) for c in patched.spec.containers] == [("a", "a:1"), ("b", "b:2")]

    ops = [
        {"op": "add", "path": "/metadata/annotations", "value": {"x": "1"}},
        {"op": "replace", "path": "/data/k", "value": "json"},
    ]
    result = v1.patch_namespaced_config_map("m", ns, ops)
    assert result.metadata.annotations == {"x": "1"} and result.data == {"k": "json"}
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_config_map("m", ns, [{"op": "test", "path": "/data/k", "value": "other"}])
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_config_map("missing", ns, ops)
    assert err.value.status == 404


def test_pod_spec_is_immutable_except_images(v1, ns):
    v1.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "im"},
            "spec": {"schedulerName": "none", "containers": [{"name": "a", "image": "a:1"}]},
        },
    )
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_pod("im", ns, {"spec": {"restartPolicy": "Never"}})
    assert err.value.status == 422 and status_of(err.value)["reason"] == "Invalid"


def test_custom_resource_status_subresource_and_generation(api_client, ns):
    co = kubernetes.client.CustomObjectsApi(api_client)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
        "status": {"conditions": []},
    }
    created = co.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", job)
    assert created["metadata"]["generation"] == 1 and "status" not in created
    created["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    created["spec"]["runPolicy"] = {"suspend": True}
    updated = co.replace_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", "train", created)
    assert "status" not in updated, "the main resource must ignore status changes"
    assert updated["metadata"]["generation"] == 2
    status = {"status": {"conditions": [{"type": "Created", "status": "True"}]}}
    after = co.patch_namespaced_custom_object_status("kubeflow.org", "v1", ns, "pytorchjobs", "train", status)
    assert after["status"]["conditions"][0]["type"] == "Created"
    assert after["metadata"]["generation"] == 2 and after["spec"]["runPolicy"] == {"suspend": True}
    with pytest.raises(ApiException) as err:
        co.get_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", "nope")
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'pytorchjobs.kubeflow.org "nope" not found'
    gone = co.delete_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", "train")
    assert gone["kind"] == "Status" and gone["status"] == "Success"


def test_strategic_merge_patch_is_rejected_for_custom_resources(api_client, cluster, ns):
    co = kubernetes.client.CustomObjectsApi(api_client)
    co.create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        ns,
        "pytorchjobs",
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": {}},
    )
    response = requests.patch(
        f"{cluster.url}/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/j",
        json={"spec": {"x": 1}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
        timeout=10,
    )
    assert response.status_code == 415
    assert response.json()["reason"] == "UnsupportedMediaType"


def _owned(name: str, owner) -> dict:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid}
    return {"metadata": {"name": name, "ownerReferences": [ref]}}


def test_garbage_collection_background(v1, ns):
    owner = v1.create_namespaced_config_map(ns, cm("owner"))
    v1.create_namespaced_secret(ns, _owned("dep", owner))
    v1.create_namespaced_config_map(ns, cm("unrelated"))
    result = v1.delete_namespaced_config_map("owner", ns)
    assert result["kind"] == "Status" and result["status"] == "Success"
    assert result["details"]["uid"] == owner.metadata.uid
    wait_for(lambda: not v1.list_namespaced_secret(ns).items, what="dependent secret collected")
    assert v1.read_namespaced_config_map("unrelated", ns)


def test_garbage_collection_orphan_and_foreground(v1, cluster, ns):
    owner = v1.create_namespaced_config_map(ns, cm("o1"))
    v1.create_namespaced_secret(ns, _owned("kept", owner))
    v1.delete_namespaced_config_map("o1", ns, propagation_policy="Orphan")
    kept = wait_for(
        lambda: (s := v1.read_namespaced_secret("kept", ns)).metadata.owner_references is None and s
    )
    assert kept.metadata.name == "kept"

    owner2 = v1.create_namespaced_config_map(ns, cm("o2"))
    v1.create_namespaced_secret(ns, _owned("dep2", owner2))
    response = requests.delete(
        f"{cluster.url}/api/v1/namespaces/{ns}/configmaps/o2",
        json={"propagationPolicy": "Foreground"},
        timeout=10,
    ).json()
    assert (
        response["metadata"]["deletionTimestamp"]
        and "foregroundDeletion" in response["metadata"]["finalizers"]
    )
    wait_for(lambda: not [s for s in v1.list_namespaced_secret(ns).items if s.metadata.name == "dep2"])
    wait_for(lambda: not [c for c in v1.list_namespaced_config_map(ns).items if c.metadata.name == "o2"])


def test_finalizers_hold_deletion_until_removed(v1, ns):
    v1.create_namespaced_config_map(ns, cm("fin", finalizers=["example.com/hold"]))
    v1.delete_namespaced_config_map("fin", ns)
    held = v1.read_namespaced_config_map("fin", ns)
    assert held.metadata.deletion_timestamp is not None
    v1.patch_namespaced_config_map("fin", ns, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_config_map("fin", ns)
    assert err.value.status == 404


def test_namespace_deletion_removes_its_objects(v1, cluster):
    v1.create_namespace({"metadata": {"name": "doomed"}})
    v1.create_namespaced_config_map("doomed", cm("a"))
    deleted = requests.delete(f"{cluster.url}/api/v1/namespaces/doomed", timeout=10).json()
    assert deleted["kind"] == "Namespace" and deleted["status"]["phase"] == "Terminating"
    wait_for(lambda: "doomed" not in {n.metadata.name for n in v1.list_namespace().items})
    assert v1.list_config_map_for_all_namespaces(field_selector="metadata.namespace=doomed").items == []


def test_delete_collection_with_selector(v1, ns):
    for name, labels in LABELLED.items():
        v1.create_namespaced_config_map(ns, cm(name, labels))
    v1.delete_collection_namespaced_config_map(ns, label_selector="app=web")
    assert {c.metadata.name for c in v1.list_namespaced_config_map(ns).items} == {"c", "d"}


# ----- byte-level fidelity: Status layout, trailing newlines, 404s for what is not served ----------
# kube-apiserver writes every JSON body with Go's json.Encoder (one line, then "\n") and lays a
# Status out in meta/v1's field order: kind, apiVersion, metadata, status, message, reason, details
# (name, group, kind, uid, causes, retryAfterSeconds), code. The expected texts below are what
# apierrors.NewAlreadyExists / NewNotFound and go-restful's NewGenericServerResponse(404|405)
# encode to; a client that compares bytes (or caches by them) sees the same thing from the fake.
NOT_SERVED = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"the server could not find the requested resource","reason":"NotFound",'
    b'"details":{},"code":404}\n'
)
# (method, path suffix, query, content type): GET, LIST, WATCH, POST, PUT, PATCH, DELETE
VERBS = [
    ("GET", "/x", "", None),
    ("GET", "", "", None),
    ("GET", "", "?watch=true&timeoutSeconds=1", None),
    ("POST", "", "", "application/json"),
    ("PUT", "/x", "", "application/json"),
    ("PATCH", "/x", "", "application/merge-patch+json"),
    ("DELETE", "/x", "", None),
]
VERB_IDS = ["get", "list", "watch", "create", "update", "patch", "delete"]


def send(cluster, method: str, path: str, content_type: str | None = None, body: dict | None = None):
    headers = {"Content-Type": content_type} if content_type else {}
    data = json.dumps(body if body is not None else {"metadata": {"name": "x"}}).encode()
    return requests.request(
        method, f"{cluster.url}{path}", data=data if method in ("POST", "PUT", "PATCH") else None,
        headers=headers, timeout=10,
    )  # fmt: skip


def test_already_exists_status_is_byte_for_byte_kube_apiservers(cluster, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps"
    assert send(cluster, "POST", path, "application/json", cm("dup")).status_code == 201
    again = send(cluster, "POST", path, "application/json", cm("dup"))
    assert again.status_code == 409 and again.headers["Content-Type"].startswith("application/json")
    assert again.content == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"configmaps \\"dup\\" already exists","reason":"AlreadyExists",'
        b'"details":{"name":"dup","kind":"configmaps"},"code":409}\n'
    )
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": {}}
    crd_path = f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
    assert send(cluster, "POST", crd_path, "application/json", job).status_code == 201
    assert send(cluster, "POST", crd_path, "application/json", job).content == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"pytorchjobs.kubeflow.org \\"j\\" already exists","reason":"AlreadyExists",'
        b'"details":{"name":"j","group":"kubeflow.org","kind":"pytorchjobs"},"code":409}\n'
    )


def test_every_json_body_ends_with_a_newline_and_escapes_like_go(cluster, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps"
    html = {"metadata": {"name": "h"}, "data": {"k": "<b>&é"}}
    made = send(cluster, "POST", path, "application/json", html)
    # Go's encoder escapes <, > and & (SetEscapeHTML) and leaves other UTF-8 as it is
    assert made.content.endswith(b"}\n") and b'"k":"\\u003cb\\u003e\\u0026\xc3\xa9"' in made.content
    for got in (
        requests.get(f"{cluster.url}{path}/h", timeout=10),
        requests.get(f"{cluster.url}{path}", timeout=10),
        requests.get(f"{cluster.url}{path}/missing", timeout=10),
        requests.get(f"{cluster.url}/api/v1", timeout=10),
        requests.get(f"{cluster.url}/apis", timeout=10),
        requests.get(f"{cluster.url}/version", timeout=10),
    ):
        assert got.content.endswith(b"}\n") and got.content.count(b"\n") == 1, got.content[-80:]
    watched = requests.get(f"{cluster.url}{path}?watch=true&timeoutSeconds=1", timeout=10).content
    assert watched.endswith(b"}\n") and all(json.loads(line) for line in watched.splitlines())


def test_delete_success_status_has_no_code_and_details_in_order(cluster, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps"
    uid = send(cluster, "POST", path, "application/json", cm("gone")).json()["metadata"]["uid"]
    deleted = send(cluster, "DELETE", f"{path}/gone")
    assert deleted.status_code == 200
    assert deleted.content == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",'
        b'"details":{"name":"gone","kind":"configmaps","uid":"' + uid.encode() + b'"}}\n'
    )


@pytest.mark.parametrize(("method", "suffix", "query", "ctype"), VERBS, ids=VERB_IDS)
def test_unknown_group_is_404_page_not_found_for_every_verb(cluster, method, suffix, query, ctype):
    """An API group nothing serves falls through kube-apiserver's delegation chain to
    ``http.NotFound`` (v1.32, what the fake reports): text/plain, not a Status."""
    got = send(cluster, method, f"/apis/example.org/v1/namespaces/default/widgets{suffix}{query}", ctype)
    assert (got.status_code, got.content) == (404, b"404 page not found\n")
    assert got.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert got.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(("method", "suffix", "query", "ctype"), VERBS, ids=VERB_IDS)
def test_unknown_kind_of_a_served_group_is_404_for_every_verb(cluster, method, suffix, query, ctype):
    core = send(cluster, method, f"/api/v1/namespaces/default/widgets{suffix}{query}", ctype)
    assert (core.status_code, core.content) == (404, NOT_SERVED)
    # a kind that no CRD of a served custom group defines: the CRD handler delegates -> not found
    crd = send(cluster, method, f"/apis/kubeflow.org/v1/namespaces/default/widgets{suffix}{query}", ctype)
    assert (crd.status_code, crd.content) == (404, b"404 page not found\n")
    unserved_version = f"/apis/kubeflow.org/v9/namespaces/default/pytorchjobs{suffix}{query}"
    version = send(cluster, method, unserved_version, ctype)
    assert (version.status_code, version.content) == (404, b"404 page not found\n")


SUB_VERBS = [(m, q, c) for m, s, q, c in VERBS if s]
SUB_VERBS += [("GET", "?watch=true", None), ("POST", "", "application/json")]
SUB_IDS = ["get", "update", "patch", "delete", "watch", "create"]


@pytest.mark.parametrize(("method", "query", "ctype"), SUB_VERBS, ids=SUB_IDS)
def test_unserved_subresource_is_404_for_every_verb(cluster, ns, method, query, ctype):
    core = send(cluster, method, f"/api/v1/namespaces/{ns}/pods/p/attach{query}", ctype)
    assert (core.status_code, core.content) == (404, NOT_SERVED)
    crd = send(cluster, method, f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/j/scale{query}", ctype)
    assert (crd.status_code, crd.content) == (404, (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"pytorchjobs.kubeflow.org \\"j\\" not found","reason":"NotFound",'
        b'"details":{"name":"j","group":"kubeflow.org","kind":"pytorchjobs"},"code":404}\n'
    ))  # fmt: skip


def test_a_method_a_served_path_has_no_route_for_is_405_or_what_the_crd_handler_says(cluster, ns):
    """404 is for paths nothing serves; a served path with the wrong method keeps kube-apiserver's
    answers: go-restful's 405 for built-ins, the CRD handler's 400/405 for custom resources."""
    put_collection = send(cluster, "PUT", f"/api/v1/namespaces/{ns}/configmaps", "application/json")
    assert (put_collection.status_code, put_collection.content) == (405, (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"the server does not allow this method on the requested resource",'
        b'"reason":"MethodNotAllowed","details":{},"code":405}\n'
    ))  # fmt: skip
    crd = f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
    put_crds = send(cluster, "PUT", crd, "application/json")
    assert (put_crds.status_code, put_crds.json()["message"]) == (400, "name must be provided")
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "s"}, "spec": {}}
    assert send(cluster, "POST", crd, "application/json", job).status_code == 201
    post_status = send(cluster, "POST", f"{crd}/s/status", "application/json", job)
    assert (post_status.status_code, post_status.content) == (405, (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"create is not supported on resources of kind \\"pytorchjobs.kubeflow.org\\"",'
        b'"reason":"MethodNotAllowed","details":{"group":"kubeflow.org","kind":"pytorchjobs"},"code":405}\n'
    ))  # fmt: skip


# ----- rbac.authorization.k8s.io/v1 (z2jh's hub Role/RoleBinding, helm-values/capacity-rbac.yaml) --
def test_rbac_objects_as_z2jh_and_the_capacity_manifest_make_them(api_client, ns):
    rbac = kubernetes.client.RbacAuthorizationV1Api(api_client)
    role = {"metadata": {"name": "hub"}, "rules": [
        {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
         "verbs": ["get", "watch", "list", "create", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
    ]}  # fmt: skip
    rbac.create_namespaced_role(ns, role)
    binding = {
        "metadata": {"name": "hub"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "hub", "namespace": ns},
            {"kind": "User", "name": "u"},
        ],
        "roleRef": {"kind": "Role", "name": "hub", "apiGroup": "rbac.authorization.k8s.io"},
    }
    made = rbac.create_namespaced_role_binding(ns, binding)
    assert made.subjects[1].api_group == "rbac.authorization.k8s.io"  # defaulted for Users/Groups
    assert [r.metadata.name for r in rbac.list_namespaced_role(ns).items] == ["hub"]
    manifest = Path(__file__).parents[1] / "helm-values" / "capacity-rbac.yaml"
    create = {"ClusterRole": rbac.create_cluster_role, "ClusterRoleBinding": rbac.create_cluster_role_binding}
    for doc in yaml.safe_load_all(manifest.read_text()):
        create[doc["kind"]](doc)
    assert rbac.read_cluster_role("classhub-capacity-reader").rules[0].resources == ["nodes"]


def test_rbac_validation_and_immutable_role_ref_as_kube_apiserver(api_client, ns):
    rbac = kubernetes.client.RbacAuthorizationV1Api(api_client)
    binding = {
        "metadata": {"name": "b"},
        "subjects": [{"kind": "ServiceAccount", "name": "hub"}],
        "roleRef": {"kind": "Role", "name": "hub", "apiGroup": "rbac.authorization.k8s.io"},
    }
    rbac.create_namespaced_role_binding(ns, binding)
    changed = {**binding, "roleRef": {**binding["roleRef"], "name": "other"}}
    with pytest.raises(ApiException) as err:
        rbac.replace_namespaced_role_binding("b", ns, changed)
    body = status_of(err.value)
    assert (err.value.status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "roleRef",
        "message": 'Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"Role", '
                   'Name:"other"}: cannot change roleRef',
    }]  # fmt: skip
    cluster_wide = {**binding, "roleRef": {**binding["roleRef"], "kind": "Role"}}
    with pytest.raises(ApiException) as err:
        rbac.create_cluster_role_binding(cluster_wide)
    causes = {c["field"]: c["message"] for c in status_of(err.value)["details"]["causes"]}
    assert causes == {
        "roleRef.kind": 'Unsupported value: "Role": supported values: "ClusterRole"',
        "subjects[0].namespace": "Required value",
    }
    with pytest.raises(ApiException) as err:
        rbac.create_namespaced_role(ns, {"metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}]})
    assert status_of(err.value)["message"] == (
        'Role.rbac.authorization.k8s.io "r" is invalid: [rules[0].apiGroups: Required value: resource rules '
        "must supply at least one api group, rules[0].resources: Required value: resource rules must supply "
        "at least one resource]"
    )


def test_network_policies_are_stored_and_validated_as_kube_apiserver_does(api_client, ns):
    """networking.k8s.io/v1 NetworkPolicies (helm-values/grading-networkpolicy.yaml): create, get,
    list, delete, and 422 with kube-apiserver's causes for a malformed spec (enforced by nothing:
    the fake has no network plugin, docs/kubefake.md)."""
    from tests.kubefake.netpol import selects

    net = kubernetes.client.NetworkingV1Api(api_client)
    groups = {g.name for g in kubernetes.client.ApisApi(api_client).get_api_versions().groups}
    assert "networking.k8s.io" in groups
    manifest = Path(__file__).parents[1] / "helm-values" / "grading-networkpolicy.yaml"
    policy = yaml.safe_load(manifest.read_text())
    policy["metadata"]["namespace"] = ns
    net.create_namespaced_network_policy(ns, policy)
    stored = net.read_namespaced_network_policy(policy["metadata"]["name"], ns)
    assert stored.spec.policy_types == ["Ingress", "Egress"]
    assert not stored.spec.ingress and not stored.spec.egress  # no rules: no traffic either way
    listed = net.list_namespaced_network_policy(ns, label_selector="app.kubernetes.io/managed-by=classhub")
    assert [p.metadata.name for p in listed.items] == ["classhub-grading-no-network"]
    assert selects(policy, {"classhub.io/grading": "true", "classhub.io/job": "grade-lab1-1"})
    assert not selects(policy, {"component": "singleuser-server"})
    with pytest.raises(ApiException) as err:
        net.create_namespaced_network_policy(ns, {"metadata": {"name": "bad"}, "spec": {
            "podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "policyTypes": ["Sideways"],
            "egress": [{"to": [{}], "ports": [{"port": 70000, "protocol": "ICMP"}]},
                       {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]},
                                "podSelector": {}}]}]}})
    body = status_of(err.value)
    assert (err.value.status, body["reason"]) == (422, "Invalid")
    assert {c["field"]: c["message"] for c in body["details"]["causes"]} == {
        "spec.podSelector.matchExpressions[0].values":
            "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        "spec.egress[0].ports[0].protocol":
            'Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
        "spec.egress[0].ports[0].port": "Invalid value: 70000: must be between 1 and 65535, inclusive",
        "spec.egress[0].to[0]": "Required value: must specify a peer",
        "spec.egress[1].to[0]": "Forbidden: may not specify both ipBlock and another peer",
        "spec.egress[1].to[0].ipBlock.except[0]":
            'Invalid value: "192.168.0.0/16": must be a strict subset of `cidr`',
        "spec.policyTypes[0]": 'Unsupported value: "Sideways": supported values: "Ingress", "Egress"',
    }  # fmt: skip
    net.delete_namespaced_network_policy(policy["metadata"]["name"], ns)
    assert net.list_namespaced_network_policy(ns).items == []
