"""The hub starts from the z2jh chart's own jupyterhub_config.py with helm-values/ mounted as the
chart mounts them, on the fake cluster, and a student spawns a GPU profile of the overlay.

What is real: the chart's ``jupyterhub_config.py`` and ``z2jh.py`` (chart 4.4.0, unchanged but for
their mount path), the merged values in the hub Secret's ``values.yaml``, the environment of the
chart's hub Deployment, configurable-http-proxy as its own process (the proxy pod), JupyterHub,
classhub's service and spawner, and PostgreSQL for both databases. The cluster is tests/kubefake,
its GPU nodes made from the GPU Operator settings beside the overlay (tests/helmchart.py).

The values layered over base + overlay say only what this machine has instead of a cluster:
loopback addresses instead of the hub's and the proxy's Service names, the test database URL,
the demo login instead of a site's authenticator, no user-scheduler (the fake cluster runs
the default scheduler only), and a longer wait for the managed services to answer. They are
validated against the chart's schema like the rest.

The hub pod is restarted as Kubernetes restarts it (its container ends, the proxy pod stays; a
``helm upgrade`` restarts it with new values) in the middle of a job of each job kind.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hub_ext import demo
from hub_ext.core.resources import parse_quantity
from tests.helmchart import (
    HELM_VALUES,
    ChartHub,
    chart_values,
    coalesce,
    dashboard_metrics,
    dcgm_default_metrics,
    exported_names,
    operator_nodes,
    overlays,
    read_yaml,
    schema_errors,
)
from tests.hubproc import api
from tests.kubefake import FakeCluster
from tests.kubefake.training import TrainingOperator
from tests.kubefake.waiting import wait_for
from tests.kubehub import request_server, server_model, wait_stopped
from tests.pg import postgres_server  # noqa: F401 - fixture

pytestmark = [pytest.mark.hub, pytest.mark.cluster]

OVERLAY = "mig-mixed"
HARDWARE = [("h200-mig-0", "NVIDIA-H200", 2)]  # 2 GPUs x (2 x 1g.18gb + 2g.35gb + 3g.71gb)
PYTORCH = "registry.example.org/classhub/pytorch:0.1.0"
#: The release namespace: the hub's, the users' and (helm-values/jobs.yaml) the jobs'.
NS = "classhub"


SERVICE_TIMEOUT = """
for _service in c.JupyterHub.services:
    if _service["name"].startswith("classhub"):
        _service["timeout"] = 180
"""


def test_overlay(hub: ChartHub, hub_db: str, data: str) -> dict[str, Any]:
    values: dict[str, Any] = {
        "hub": {
            "db": {"url": hub_db},
            "extraEnv": {"CLASSHUB_SERVICE_URL": f"http://127.0.0.1:{hub.service_port}"},
            "config": {
                "JupyterHub": {
                    "hub_bind_url": f"http://127.0.0.1:{hub.hub_port}",
                    "hub_connect_url": f"http://127.0.0.1:{hub.hub_port}",
                    "authenticator_class": "hub_ext.demo.DemoAuthenticator",
                },
                "ConfigurableHTTPProxy": {"api_url": f"http://127.0.0.1:{hub.proxy_api_port}"},
                "DemoAuthenticator": {"accounts": demo.DEMO_ACCOUNTS,
                                      "password_file": f"{data}/demo-password",
                                      "admin_users": [demo.DEMO_ADMIN]},
            },
        },
        "scheduling": {"userScheduler": {"enabled": False}},
    }
    # and the time the hub gives its managed services to answer: on two cores shared by the
    # whole suite, the classhub service can take longer than JupyterHub's 30 s to import and
    # start, and the hub then exits (the pod would restart); the restarts are what is tested here.
    values["hub"]["extraConfig"] = {"zz-test-service-timeout": SERVICE_TIMEOUT}
    return values


test_overlay.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster(nodes=operator_nodes(OVERLAY, HARDWARE)) as fake:
        fake.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        fake.create("namespaces", {"metadata": {"name": NS}}, None)
        TrainingOperator(fake)  # the training operator and scheduler-plugins' stand-ins
        yield fake


@pytest.fixture(scope="module")
def hub(cluster, postgres_server, tmp_path_factory):  # noqa: F811 - fixture
    root = tmp_path_factory.mktemp("charthub")
    hub_db, classhub_db = postgres_server.create_database(), postgres_server.create_database()
    data = root / "data"
    data.mkdir()
    password = demo.demo_password(data)
    hub = ChartHub(root, values={}, kubeconfig=cluster.kubeconfig_path, namespace=NS,
                   secret_refs={("classhub-db", "url"): classhub_db})
    hub.values = chart_values(HELM_VALUES / "base.yaml", HELM_VALUES / "overlays" / f"{OVERLAY}.yaml",
                              HELM_VALUES / "jobs.yaml", test_overlay(hub, hub_db, str(data)))
    assert schema_errors(hub.values) == []
    hub.password = password
    hub.start()
    yield hub
    hub.stop()
    for url in (hub_db, classhub_db):
        postgres_server.drop_database(url)


def offers(session) -> dict[str, str]:
    page = session.get(f"/hub/spawn/{session.username}")
    assert page.status_code == 200
    return dict(re.findall(r'data-profile="([a-z0-9-]+)".*?class="classhub-free">([^<]*)<', page.text, re.S))


def test_the_hub_runs_the_charts_config_with_classhub(hub):
    log = hub.log_path.read_text(errors="replace")
    assert "Loading extra config: 00-classhub" in log  # hub.extraConfig, run by the chart's config
    assert "Loading pass-through config section hub.config.ClasshubKubeSpawner" in log
    admin = hub.login(demo.DEMO_ADMIN, hub.password)
    listed = admin.hub_api("GET", "services").json()
    assert {"classhub", "classhub-culler", "prometheus"} <= set(listed)
    assert "jupyterhub-idle-culler" not in listed  # classhub's culler replaces z2jh's


def test_a_student_spawns_the_overlays_gpu_profile(hub, cluster):
    student = hub.login("student1", hub.password)
    offered = offers(student)
    # free counts come from the nodes the GPU Operator settings make: 2 GPUs x 2 slices of 1g.18gb
    assert list(offered) == ["cpu", "mig-1g", "mig-2g"], offered  # mig-3g: teachers, TAs, admins
    assert (offered["mig-1g"], offered["mig-2g"]) == ("4 free now", "2 free now")
    r = request_server(student, {"user_options": {"profile": "mig-1g"}})
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: (m := server_model(student)) and m.get("ready"), timeout=60, what="student1's server")

    pod = cluster.get("pods", "jupyter-student1", NS)
    spec = pod["spec"]
    container = spec["containers"][0]
    limits, requests_ = container["resources"]["limits"], container["resources"]["requests"]
    # what the overlay's mig-1g profile says
    assert limits["nvidia.com/mig-1g.18gb"] == requests_["nvidia.com/mig-1g.18gb"] == "1"
    assert parse_quantity(limits["cpu"]) == 4 and parse_quantity(requests_["cpu"]) == 1
    assert parse_quantity(limits["memory"]) == parse_quantity("16Gi")
    assert container["image"] == PYTORCH
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    assert spec["nodeName"] == "h200-mig-0"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in spec["volumes"]
    # what the base says: classhub's home volume, the service URL, the chart's own labels
    home = next(v for v in spec["volumes"] if v["name"] == "home")
    claim = home["persistentVolumeClaim"]["claimName"]
    assert {"name": "home", "mountPath": "/home/jovyan"} in [
        {k: m[k] for k in ("name", "mountPath")} for m in container["volumeMounts"]]
    pvc = cluster.get("persistentvolumeclaims", claim, NS)
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CLASSHUB_PROFILE"] == "mig-1g"
    assert env["CLASSHUB_SERVICE_API_URL"].endswith("/services/classhub/api")
    assert pod["metadata"]["labels"]["helm.sh/chart"] == "jupyterhub-4.4.0"
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubespawner"
    # the slice is taken: the next student's form counts one fewer
    assert offers(hub.login("student2", hub.password))["mig-1g"] == "3 free now"
    student.hub_api("DELETE", "users/student1/server")
    wait_stopped(student, 60)


#: What tells a job's pods, per job kind: the training operator's label, JobSet's for a TrainJob.
POD_LABEL = {"pytorchjob": "training.kubeflow.org/job-name", "trainjob": "jobset.sigs.k8s.io/jobset-name"}
PLURAL = {"pytorchjob": "pytorchjobs", "trainjob": "trainjobs"}
#: Each kind's rank label on its pods (the operator's replica index, JobSet's completion index).
RANK_1 = {"pytorchjob": {"training.kubeflow.org/replica-type": "worker",
                         "training.kubeflow.org/replica-index": "0"},
          "trainjob": {"batch.kubernetes.io/job-completion-index": "1"}}


def jobs_values(hub: ChartHub, kind: str) -> dict[str, Any]:
    """The chart's values with the jobs overlay's job kind switched, as
    ``helm upgrade ... --set hub.config.ClasshubJobs.job_kind=<kind>`` leaves them."""
    values = coalesce(hub.values, {"hub": {"config": {"ClasshubJobs": {"job_kind": kind}}}})
    assert schema_errors(values) == []
    return values


@pytest.mark.parametrize("kind", ["pytorchjob", "trainjob"])
def test_a_job_of_the_jobs_overlay_survives_a_hub_restart(kind, hub, cluster):
    """base + jobs overlay through the chart's config, with each job kind of the overlay's switch
    (Kubeflow's training operator v1 PyTorchJob, Trainer v2 TrainJob; the stand-in operator runs
    both): the classhub service's job loop makes the overlay's job object (its image, its gang
    scheduler, in its namespace) and both replicas start together on the MIG node. The hub pod
    then restarts in the middle of the job (its classhub service with it): the job object and its
    pods are kept, not made again; the new service follows the job, reads its logs, and its
    cancel removes every pod."""
    jobs = read_yaml(HELM_VALUES / "jobs.yaml")["hub"]["config"]["ClasshubJobs"]
    if hub.values["hub"]["config"]["ClasshubJobs"]["job_kind"] != kind:  # helm upgrade --set
        hub.restart(jobs_values(hub, kind))
    course = f"dl-{kind}"
    admin = hub.login(demo.DEMO_ADMIN, hub.password).new_token()
    assert api(hub, "POST", "courses", admin, json={"name": course}).status_code == 201
    r = api(hub, "PUT", f"courses/{course}/members", admin,
            json={"add": [{"username": "student1", "role": "student"}]})
    assert r.status_code == 200, r.text
    # student1's home claim exists (their server ran in the test above)
    student = hub.login("student1", hub.password).new_token()
    body = {"name": "ranks", "course": course, "command": ["sleep", "600"], "replicas": 2,
            "resources": {"nvidia.com/mig-1g.18gb": 1, "cpu": "1", "memory": "1Gi"}}
    r = api(hub, "POST", "jobs", student, json=body)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    def replicas() -> list[dict[str, Any]]:
        return [p for p in cluster.list("pods", NS) if p["metadata"]["labels"].get(POD_LABEL[kind]) == job_id]

    def job() -> dict[str, Any]:
        reply = api(hub, "GET", f"jobs/{job_id}", student)
        assert reply.status_code == 200, reply.text
        return reply.json()

    running = wait_for(lambda: (j := job())["state"] not in ("queued", "admitted") and j,
                       timeout=120, what="the job to start")
    assert running["state"] == "running", running
    pods = wait_for(lambda: len(p := replicas()) == 2 and all(
        x["status"].get("phase") == "Running" for x in p) and p, timeout=60, what="both replicas running")
    assert {p["spec"]["nodeName"] for p in pods} == {"h200-mig-0"}
    for pod in pods:
        assert pod["spec"]["containers"][0]["image"] == jobs["image"]
        if kind == "pytorchjob":  # scheduler-plugins binds a PyTorchJob's PodGroup
            assert pod["spec"]["schedulerName"] == jobs["scheduler_name"]
    made = cluster.get(PLURAL[kind], job_id, jobs["namespace"])
    suspend = made["spec"]["runPolicy"]["suspend"] if kind == "pytorchjob" else made["spec"]["suspend"]
    assert suspend is False  # classhub admitted it

    hub.restart()  # the hub pod restarts mid-job: a new hub, a new classhub service

    assert cluster.get(PLURAL[kind], job_id, NS)["metadata"]["uid"] == made["metadata"]["uid"]
    assert sorted(p["metadata"]["uid"] for p in replicas()) == sorted(p["metadata"]["uid"] for p in pods)
    after = job()
    assert after["state"] == "running", after
    assert [(r["rank"], r["node"]) for r in after["replicas"]] == [(0, "h200-mig-0"), (1, "h200-mig-0")]
    assert [e["state"] for e in after["events"]].count("running") == 1  # started once, not relaunched
    # the rank-1 replica's log, read by the new service (the kubelet's stand-in names its pod)
    [rank1] = [p for p in replicas() if RANK_1[kind].items() <= p["metadata"]["labels"].items()]
    log = api(hub, "GET", f"jobs/{job_id}/logs?index=1", student)
    assert log.status_code == 200 and rank1["metadata"]["name"] in log.text, log.text
    assert api(hub, "POST", f"jobs/{job_id}/cancel", student).status_code in (200, 202)
    wait_for(lambda: not replicas(), timeout=120, what="the job's pods to go")
    assert cluster.get(PLURAL[kind], job_id, NS) is None
    ended = wait_for(lambda: (j := job())["state"] not in ("running",) and j, timeout=60,
                     what="the job to end")
    assert ended["state"] == "cancelled", ended


def scrape_jobs() -> dict[str, dict[str, Any]]:
    config = read_yaml(HELM_VALUES / "dashboards" / "prometheus-scrape.yaml")
    return {job["job_name"]: job for job in config["scrape_configs"]}


def scrape(hub: ChartHub, job: dict[str, Any]) -> str:
    """One scrape as Prometheus does it with this job: its path, its token scheme, the chart's token."""
    assert job["authorization"]["type"] == "token"
    [target] = job["static_configs"][0]["targets"]
    reply = hub.get(job["metrics_path"], hub.secret("hub.services.prometheus.apiToken"),
                    url=hub.service_address(target))
    assert reply.status_code == 200, (job["job_name"], reply.status_code, reply.text[:300])
    return reply.text


def test_prometheus_scrapes_the_hub_and_classhub_with_the_charts_token(hub):
    jobs = scrape_jobs()
    assert "jupyterhub_running_servers" in scrape(hub, jobs["jupyterhub"])
    names = {f.name for f in text_string_to_metric_families(scrape(hub, jobs["classhub"]))}
    assert {"classhub_quota", "classhub_usage", "classhub_culls", "classhub_server_devices"} <= names
    # without the token, no metrics
    job = jobs["classhub"]
    url = hub.service_address(job["static_configs"][0]["targets"][0])
    assert hub.get(job["metrics_path"], "not-a-token", url=url).status_code in (401, 403)


def test_every_metric_in_a_dashboard_is_exported(hub):
    """classhub_* by the running classhub service, jupyterhub_* by the hub, DCGM_* by the DCGM
    exporter's default metric list (the exporter the GPU Operator deploys)."""
    jobs = scrape_jobs()
    exported = exported_names(scrape(hub, jobs["classhub"])) | exported_names(scrape(hub, jobs["jupyterhub"]))
    exported |= dcgm_default_metrics()
    used = dashboard_metrics()
    assert any(n.startswith("classhub_job_") for n in used)  # the queue dashboard is in the set
    missing = {name: sorted(boards) for name, boards in used.items() if name not in exported}
    assert missing == {}


LOAD_CONFIG = """
import json, sys
from traitlets.config.loader import PyFileConfigLoader
config = PyFileConfigLoader(sys.argv[1]).load_config()
print(json.dumps({
    "spawner_class": config.JupyterHub.spawner_class,
    "services": [s["name"] for s in config.JupyterHub.services],
    "profiles": [p["slug"] for p in config.ClasshubKubeSpawner.profiles],
    "environment": sorted(config.KubeSpawner.environment),
    "volumes": config.ClasshubKubeSpawner.volumes,
    "db_url": config.JupyterHub.db_url,
}))
"""


#: Loads the chart's config file for each overlay in a child forked from one process that
#: imported, once, what that file imports (JupyterHub, the Kubernetes client, classhub's
#: configure). Why: five fresh processes each paid those imports, about 1.9 s of CPU per overlay
#: (9.5 CPU-s for the five); a fork pays them once (2.5 CPU-s for the five, 2026-12-04). A child
#: starts from the parent's interpreter as a new process would (its own environment, working
#: folder and argv, nothing of the other overlays' loads) and runs `LOAD_CONFIG` as ``python -c``
#: would.
LOADER = """
import json, os, sys
# what the chart's config file imports, and what configure(c, mode="kubernetes") and the
# ClasshubKubeSpawner it names import: a child's load then imports a few small modules only
import jupyterhub.app, jupyterhub.utils, kubernetes_asyncio.client, tornado.httpclient
import traitlets.config.loader, hub_ext.config, spawner.kube
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd, name in ((1, "stdout"), (2, "stderr")):
                os.dup2(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["-c", *request["args"]]
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.fixture(scope="module")
def loader():
    """`LOADER`'s process, for this module's overlays; ``loader(args, env, cwd)`` runs
    `LOAD_CONFIG` with them in a fork and answers (returncode, stdout, stderr)."""
    proc = subprocess.Popen([sys.executable, "-c", LOADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)

    def load(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
        out, err = cwd / "load.out", cwd / "load.err"
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"code": LOAD_CONFIG, "args": args, "env": env, "cwd": str(cwd),
                                     "stdout": str(out), "stderr": str(err)}) + "\n")
        proc.stdin.flush()
        answer = proc.stdout.readline()
        assert answer, f"the loader process ended (exit code {proc.wait(timeout=60)})"
        return int(answer), out.read_text(), err.read_text()

    yield load
    proc.stdin.close()
    proc.wait(timeout=60)


@pytest.mark.parametrize("overlay", overlays())
def test_each_overlay_loads_through_the_charts_config(overlay, tmp_path, loader):
    """Base + each overlay, mounted as the chart mounts them, make a classhub hub configuration
    (the config file is loaded as ``jupyterhub`` loads it; no hub is started)."""
    hub = ChartHub(tmp_path, values=chart_values(HELM_VALUES / "base.yaml",
                                                 HELM_VALUES / "overlays" / f"{overlay}.yaml"),
                   kubeconfig=tmp_path / "kubeconfig",
                   secret_refs={("classhub-db", "url"): f"sqlite:///{tmp_path}/classhub.sqlite"})
    hub.write_mounts()
    returncode, stdout, stderr = loader([str(hub.mount / "jupyterhub_config.py")], hub.environment(),
                                        tmp_path)
    assert returncode == 0, stderr[-3000:]
    loaded = json.loads(stdout.strip().splitlines()[-1])
    assert loaded["spawner_class"] == "classhub-kube"
    assert {"classhub", "classhub-culler", "prometheus"} <= set(loaded["services"])
    assert "jupyterhub-idle-culler" not in loaded["services"]
    overlay_profiles = read_yaml(HELM_VALUES / "overlays" / f"{overlay}.yaml")["hub"]["config"][
        "ClasshubKubeSpawner"]["profiles"]
    assert loaded["profiles"] == [p["slug"] for p in overlay_profiles]
    assert "CLASSHUB_SERVICE_API_URL" in loaded["environment"]
    assert loaded["volumes"][0]["persistentVolumeClaim"]["claimName"] == "{pvc_name}"
    assert loaded["db_url"].startswith("postgresql+psycopg2://")  # the base's PostgreSQL
