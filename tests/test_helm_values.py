"""helm-values/: what ``helm install`` and the GPU Operator would make of each values file.

Every values file, and the base with each overlay, is validated against the z2jh chart's own
``values.schema.yaml`` over the chart's default values (what Helm validates). Each overlay's
profiles are parsed by classhub's catalog parser (the hub refuses a bad catalog at start), and
each must fit on a node as the GPU Operator settings beside the overlay leave it: the right
extended resource, the product label its node selector asks for, the GPU taint tolerated.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from hub_ext.core.capacity import CapacitySnapshot
from hub_ext.core.profiles import parse_profile, pod_settings
from tests.helmchart import (
    CHART,
    HELM_VALUES,
    Z2JH,
    chart_values,
    coalesce,
    operator_nodes,
    overlays,
    read_yaml,
    schema_errors,
    unknown_operator_keys,
)
from tests.kubefake.nodes import node_object

pytestmark = pytest.mark.unit

BASE = HELM_VALUES / "base.yaml"
JOBS = HELM_VALUES / "jobs.yaml"
COURSE_DATA = HELM_VALUES / "course-data-nfs.yaml"
OVERLAYS = overlays()
GPU_OVERLAYS = [o for o in OVERLAYS if o != "cpu-only"]
#: The machines each GPU setup is written for: (node, gpu_product label, GPUs per node).
HARDWARE = {
    "whole-gpus": [("h200-0", "NVIDIA-H200", 8), ("l40s-0", "NVIDIA-L40S", 4)],
    "mig-mixed": [("h200-mig-0", "NVIDIA-H200", 8)],
    "mig-single": [("h200-mig-0", "NVIDIA-H200", 8)],
    "shared": [("l40s-0", "NVIDIA-L40S", 4)],
    "cpu-only": [],
}


def overlay_path(name: str) -> Path:
    return HELM_VALUES / "overlays" / f"{name}.yaml"


def profiles_of(name: str) -> list[dict]:
    return chart_values(BASE, overlay_path(name))["hub"]["config"]["ClasshubKubeSpawner"]["profiles"]


def test_the_overlays_cover_every_gpu_setup():
    assert OVERLAYS == ["cpu-only", "mig-mixed", "mig-single", "shared", "whole-gpus"]
    assert set(HARDWARE) == set(OVERLAYS)


def test_the_chart_defaults_alone_validate():
    """The copies of values.yaml and values.schema.yaml belong together (same chart version)."""
    assert schema_errors(chart_values()) == []


@pytest.mark.parametrize("path", [BASE, JOBS, COURSE_DATA, *map(overlay_path, OVERLAYS)],
                         ids=lambda p: p.stem)
def test_each_values_file_validates_on_its_own(path):
    assert schema_errors(chart_values(path)) == []


@pytest.mark.parametrize("name", OVERLAYS)
def test_base_with_each_overlay_validates(name):
    values = chart_values(BASE, overlay_path(name))
    assert schema_errors(values) == []
    # the overlay adds profiles; the base's classhub settings survive the merge
    spawner = values["hub"]["config"]["ClasshubKubeSpawner"]
    assert spawner["profiles"] and spawner["volume_mounts"][0]["mountPath"] == "/home/jovyan"
    assert values["cull"]["enabled"] is False
    assert "configure(" in values["hub"]["extraConfig"]["00-classhub"]


def test_validation_refuses_what_helm_refuses():
    """The check can fail: a misspelt key and a wrong type are named with their path."""
    errors = schema_errors(chart_values(BASE, {"hub": {"extraconfig": {}}, "singleuser": {"storage": {
        "type": "pvc"}}}))
    assert any(e.startswith("hub:") and "'extraconfig' was unexpected" in e for e in errors), errors
    assert any(e.startswith("singleuser.storage.type:") for e in errors), errors


def test_helm_merge_semantics():
    """Maps merge, lists replace, null removes a default (so overlays replace the profile list)."""
    merged = coalesce({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "d": None})
    assert merged == {"a": {"b": 1, "c": [3]}}


@pytest.mark.parametrize("name", OVERLAYS)
def test_each_overlays_profiles_parse(name):
    parsed = [parse_profile(p, i) for i, p in enumerate(profiles_of(name))]
    assert len({p.slug for p in parsed}) == len(parsed)
    assert [p.slug for p in parsed if p.default], "one profile is the default"
    if name == "cpu-only":
        assert all(p.kind == "cpu" for p in parsed)
    else:
        assert any(p.kind != "cpu" for p in parsed)


@pytest.mark.parametrize("name", OVERLAYS)
def test_gpu_operator_settings_sit_beside_each_gpu_overlay(name):
    operator = HELM_VALUES / "overlays" / f"{name}.gpu-operator.yaml"
    assert operator.exists() == (name in GPU_OVERLAYS)
    if operator.exists():
        assert unknown_operator_keys(read_yaml(operator)) == []
        assert f"# GPU Operator settings: {operator.name}" in overlay_path(name).read_text()


def test_unknown_gpu_operator_keys_are_named():
    assert unknown_operator_keys({"migManager": {"confg": {}}, "mig": {"strategy": "mixed"},
                                  "devicePlugin": {"config": {"data": {"anything": "x"}}}}) == [
        "migManager.confg"]


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_profile_fits_a_node_the_gpu_operator_makes(name):
    """The profiles ask for what the GPU Operator settings beside them advertise."""
    nodes = [node_object(n) for n in operator_nodes(name, HARDWARE[name])]
    snapshot = CapacitySnapshot.from_k8s(nodes, [])
    for i, entry in enumerate(profiles_of(name)):
        profile = parse_profile(entry, i)
        settings = pod_settings(profile)
        fits = snapshot.max_fit(profile.request, settings["node_selector"], settings["tolerations"])
        assert fits >= 1, (name, profile.slug, settings, nodes)
        if profile.kind != "cpu":  # and only on GPU nodes
            gpu_nodes = [n for n in nodes if n["metadata"]["name"] != "cpu-0"]
            assert CapacitySnapshot.from_k8s(gpu_nodes, []).max_fit(
                profile.request, settings["node_selector"], settings["tolerations"]) == fits


def test_the_mig_single_profile_stays_off_whole_gpus():
    """A single-strategy slice is plain nvidia.com/gpu: only the product label keeps it apart."""
    entry = next(p for p in profiles_of("mig-single") if p["kind"] == "mig")
    profile = parse_profile(entry)
    settings = pod_settings(profile)
    whole = [node_object(n) for n in operator_nodes("whole-gpus", HARDWARE["whole-gpus"])]
    assert CapacitySnapshot.from_k8s(whole, []).max_fit(
        profile.request, settings["node_selector"], settings["tolerations"]) == 0
    sliced = [node_object(n) for n in operator_nodes("mig-single", HARDWARE["mig-single"])]
    assert CapacitySnapshot.from_k8s(sliced, []).max_fit(
        profile.request, settings["node_selector"], settings["tolerations"]) == 7 * 8


def test_profile_images_are_built_from_images():
    """Every image a profile offers, and the hub image, has a Dockerfile in images/."""
    images = Path(__file__).resolve().parent.parent / "images"
    base = chart_values(BASE)
    hub_image = f"{base['hub']['image']['name']}:{base['hub']['image']['tag']}"
    # templates' publisher pod (a trait the chart's hub.config sets, docs/configuration.md, "Configuration:
    # one channel, traits")
    assert base["hub"]["config"]["ClasshubTemplates"]["publisher_image"] == hub_image
    named = {hub_image, f"{base['singleuser']['image']['name']}:{base['singleuser']['image']['tag']}"}
    named.add(read_yaml(JOBS)["hub"]["config"]["ClasshubJobs"]["image"])  # the jobs' replicas
    for name in OVERLAYS:
        for entry in profiles_of(name):
            named.update(entry.get("images", []))
    for ref in sorted(named):
        match = re.fullmatch(r"registry\.example\.org/classhub/([a-z0-9-]+):(.+)", ref)
        assert match, ref
        assert (images / match.group(1) / "Dockerfile").exists(), ref
        assert match.group(2) == "0.1.0", ref


def test_the_chart_copies_name_their_source():
    source = (Z2JH / "SOURCE").read_text()
    assert "tag:        4.4.0" in source and "5c5f5df751588a68a7781ead01d0f62e88e2e72f" in source
    for name in ("values.schema.yaml", "values.yaml", "jupyterhub_config.py", "z2jh.py", "LICENSE"):
        assert (Z2JH / name).stat().st_size > 0 and f"-> {name}" in source
        # copied unchanged: the file is the one whose checksum SOURCE records
        digest = hashlib.sha256((Z2JH / name).read_bytes()).hexdigest()
        assert f"{digest}  {name}" in source, f"tests/data/z2jh/{name} differs from chart 4.4.0's"
    # the version the chart's Secret reports to its config (tests/helmchart.py) is the copy's
    assert CHART["Version"] == "4.4.0"


def test_the_capacity_rbac_is_valid_and_grants_what_the_live_view_reads():
    """helm-values/capacity-rbac.yaml: valid RBAC objects (Kubernetes' own schema) that let the
    chart's hub ServiceAccount read nodes and watch the pods of every namespace."""
    import kubernetes_validate
    import yaml

    docs = list(yaml.safe_load_all((HELM_VALUES / "capacity-rbac.yaml").read_text()))
    version = kubernetes_validate.latest_version()
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("nodes", "list"), ("pods", "list"), ("pods", "watch")} <= granted
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "classhub"}]


# ---------------------------------------------------------------------------- jobs, upgrades
def rbac_docs(name: str) -> list[dict]:
    import yaml

    return list(yaml.safe_load_all((HELM_VALUES / name).read_text()))


@pytest.mark.parametrize("name", OVERLAYS)
def test_base_with_each_overlay_and_the_jobs_overlay_validates(name):
    values = chart_values(BASE, overlay_path(name), JOBS)
    assert schema_errors(values) == []
    config = values["hub"]["config"]
    assert config["ClasshubKubeSpawner"]["profiles"] == profiles_of(name)  # the overlay's survive
    assert config["ClasshubJobs"] == read_yaml(JOBS)["hub"]["config"]["ClasshubJobs"]
    assert config["ClasshubTemplates"]["publisher_image"]  # and the base's sections


def test_the_jobs_overlays_settings_are_what_the_job_service_takes():
    """Each key is a ClasshubJobs trait and each value one it accepts: the check the classhub
    service makes at start (a bad one stops it with a sentence, docs/configuration.md, "Configuration: one
    channel, traits")."""
    from traitlets.config import Config

    from hub_ext.envtraits import ConfigError, check_sections
    from hub_ext.service.jobs.settings import ClasshubJobs

    section = read_yaml(JOBS)["hub"]["config"]["ClasshubJobs"]
    check_sections(Config({"ClasshubJobs": section}), [ClasshubJobs])
    settings = ClasshubJobs(config=Config({"ClasshubJobs": section}))
    assert settings.job_kind in ("pytorchjob", "trainjob")
    assert settings.namespace == "classhub" and settings.kueue_queue == ""  # Kueue is opt-in
    # the commented Kueue pattern is one the service takes, per course
    text = JOBS.read_text()
    assert '# kueue_queue: "{course}-queue"' in text
    check_sections(Config({"ClasshubJobs": {"kueue_queue": "{course}-queue"}}), [ClasshubJobs])
    with pytest.raises(ConfigError, match=re.escape("c.ClasshubJobs.job_kind")):  # the check can fail
        check_sections(Config({"ClasshubJobs": {"job_kind": "mpijob"}}), [ClasshubJobs])
    # where the GPU Operator settings come from, as the GPU overlays say beside them
    assert "GPU Operator settings: those of your GPU overlay" in text


def test_the_rbac_manifests_are_valid_kubernetes_objects():
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    for name in ("capacity-rbac.yaml", "jobs-rbac.yaml", "home-sizes-rbac.yaml",
                 "grading-networkpolicy.yaml"):
        for doc in rbac_docs(name):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_jobs_rbac_grants_the_job_kinds_in_the_jobs_namespace_to_the_hub():
    """A namespaced Role and RoleBinding in the overlay's jobs namespace for the chart's hub
    ServiceAccount; create, delete and watch on each job kind (what each verb is needed for:
    tests/test_helm_jobs_rbac.py records it)."""
    docs = rbac_docs("jobs-rbac.yaml")
    assert sorted(d["kind"] for d in docs) == ["Role", "RoleBinding"]
    role = next(d for d in docs if d["kind"] == "Role")
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    namespace = read_yaml(JOBS)["hub"]["config"]["ClasshubJobs"]["namespace"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "classhub"}]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    for group, plural in (("kubeflow.org", "pytorchjobs"), ("trainer.kubeflow.org", "trainjobs")):
        assert {(group, plural, v) for v in ("create", "patch", "delete", "watch")} <= granted
    assert all("*" not in (g, r, v) for g, r, v in granted)  # no wildcard


def test_nothing_cluster_wide_beyond_reading_nodes_and_pods():
    """And, in its own optional file, the kubelet's stats through nodes/proxy (home sizes on
    Kubernetes: only `get`, docs/admins/course-data.md says what the grant allows)."""
    for name in ("capacity-rbac.yaml", "jobs-rbac.yaml"):
        for doc in rbac_docs(name):
            if doc["kind"] == "ClusterRole":
                for rule in doc["rules"]:
                    assert rule["apiGroups"] == [""] and set(rule["resources"]) <= {"nodes", "pods"}
                    assert set(rule["verbs"]) <= {"get", "list", "watch"}, (name, rule)
    role, binding = rbac_docs("home-sizes-rbac.yaml")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "classhub"}]


def test_the_grading_network_policy_takes_every_grading_pods_network():
    """helm-values/grading-networkpolicy.yaml, object level: in the jobs' namespace (jobs.yaml), it
    selects the pods of a grading job as the job backend writes them (and no notebook or ordinary
    job pod), with both policy types and no rule: no ingress, no egress, not even DNS."""
    import json

    from hub_ext.backends.jobs import Launch, ReplicaLaunch
    from hub_ext.backends.kubernetes import jobs as kube
    from hub_ext.service.jobs.sandboxed import grader_command
    from tests.kubefake.netpol import check_network_policy, selects

    (policy,) = rbac_docs("grading-networkpolicy.yaml")
    assert policy["kind"] == "NetworkPolicy" and check_network_policy(policy) == []
    assert policy["metadata"]["namespace"] == read_yaml(JOBS)["hub"]["config"]["ClasshubJobs"]["namespace"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in policy["spec"] and "egress" not in policy["spec"]

    def pod_labels(sandbox: dict) -> dict:
        job = Launch(job_id="grade-lab1-7-1a2b3c4d", owner="teacher1", course="cs101",
                     command=grader_command("python", sandbox) if sandbox else ("python", "train.py"),
                     env={}, workdir="", master_port=0, replicas=(ReplicaLaunch("grader", 0, 0, "n"),),
                     max_runtime=600, requests={"grader": {"cpu": "1"}}, pods={}, sandbox=sandbox)
        obj = kube.pytorch_job(job, namespace="classhub", image="quay.io/jupyter/base-notebook")
        return obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["labels"]

    grading = pod_labels({"secret": "classhub-grading-0123abcd",
                          "items": json.dumps([["f0", "grading.json"]])})
    assert selects(policy, grading)
    assert not selects(policy, pod_labels({}))  # an ordinary job keeps the network the course allows
    assert not selects(policy, {"component": "singleuser-server", "hub.jupyter.org/username": "sam"})


def test_the_hub_pod_upgrades_classhubs_database_before_the_hub_starts():
    """hub.initContainers: ``classhub upgrade-db`` in the hub image, with the database URL from
    the same Secret as the hub's (docs/admins/kubernetes.md, "Deploy on Kubernetes": upgrades)."""
    hub = chart_values(BASE)["hub"]
    [init] = hub["initContainers"]
    assert init["image"] == f"{hub['image']['name']}:{hub['image']['tag']}"
    assert init["command"] == ["classhub", "upgrade-db"]
    assert init["env"] == [{"name": "CLASSHUB_DB_URL", **hub["extraEnv"]["CLASSHUB_DB_URL"]}]
    # the hub container's own restrictions apply to it too
    assert init["securityContext"] == {k: v for k, v in hub["containerSecurityContext"].items()}


def test_the_init_container_upgrades_an_old_schema_once(tmp_path):
    """The init container run as the kubelet runs it (its command, its env with the Secret's
    value): a database two releases behind is brought to head; the next pod start finds it there."""
    from hub_ext.store import head_revision, make_engine, upgrade
    from tests.helmchart import ChartHub

    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    engine = make_engine(url)
    upgrade(engine, "0001")
    engine.dispose()
    pod = ChartHub(tmp_path, values=chart_values(BASE), kubeconfig=tmp_path / "kubeconfig",
                   secret_refs={("classhub-db", "url"): url})
    [first] = pod.run_init_containers()
    assert f"upgraded from revision 0001 to {head_revision()}" in first, first
    [again] = pod.run_init_containers()
    assert f"already at revision {head_revision()}" in again, again


def test_the_course_data_overlay_validates_and_reaches_the_spawner_and_the_service():
    """The NFS example: the chart takes it over the base and an overlay; the hub pod mounts the
    export where ClasshubCourseData.root_dir says, and the settings are ClasshubCourseData traits
    (a name no trait has would stop the hub, docs/admins/course-data.md)."""
    from hub_ext.backends.coursedata import ClasshubCourseData, pod_volumes

    values = chart_values(BASE, overlay_path("whole-gpus"), COURSE_DATA)
    assert schema_errors(values) == []
    section = values["hub"]["config"]["ClasshubCourseData"]
    assert set(section) <= set(ClasshubCourseData.class_trait_names(config=True))
    mounts = {m["name"]: m["mountPath"] for m in values["hub"]["extraVolumeMounts"]}
    assert mounts["classhub-course-data"] == section["root_dir"]
    volumes, pod_mounts = pod_volumes(ClasshubCourseData(**section), {"ml101": "student"})
    assert volumes[0]["nfs"] == next(v["nfs"] for v in values["hub"]["extraVolumes"]
                                     if v["name"] == "classhub-course-data")
    assert pod_mounts == [{"name": "course-data", "mountPath": "/home/jovyan/data/ml101",
                           "readOnly": True, "subPath": "ml101"}]
