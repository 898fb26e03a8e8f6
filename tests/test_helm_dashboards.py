"""helm-values/dashboards/: Grafana dashboards an admin imports as they are, and the metric that
lets them show GPU use by course.

That every metric a dashboard queries is exported by a running classhub is shown in
test_helm_chart_hub.py (against the hub started from the chart); here: the dashboards are
well-formed Grafana JSON that import without edits (a datasource variable, no hard-wired
datasource), cover what the admins and teachers asked for, and ``classhub_server_devices``
(the bridge between the ledger and DCGM's per-pod GPU metrics) counts what servers hold.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hub_ext import store
from hub_ext.core.resources import ResourceVector
from hub_ext.service import metrics
from tests.helmchart import DASHBOARDS, METRIC_NAME, dashboard_queries, dcgm_default_metrics

pytestmark = pytest.mark.unit

BOARDS = sorted(DASHBOARDS.glob("*.json"))


def test_the_dashboards_cover_gpu_use_quota_jobs_and_culls():
    titles = {json.loads(p.read_text())["title"] for p in BOARDS}
    assert titles == {"classhub: GPU use by course", "classhub: quota use",
                      "classhub: job queue and wait times", "classhub: culls and GPU-hours reclaimed"}
    queries = " ".join(q for qs in dashboard_queries().values() for q in qs)
    for needed in ("classhub_server_devices", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "classhub_quota",
                   "classhub_job_wait_seconds_bucket", "classhub_job_queue_length",
                   "classhub_culler_gpu_hours_reclaimed_total", "classhub_culls_total"):
        assert needed in queries, needed


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_each_dashboard_imports_as_is(path):
    board = json.loads(path.read_text())
    assert board["uid"].startswith("classhub-") and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert METRIC_NAME.search(expr), expr
            for open_, close in ("()", "[]", "{}"):
                assert expr.count(open_) == expr.count(close), expr
            assert range_arguments_are_valid(expr), expr
            if "$course" in expr:
                assert "course" in variables, path.name


RANGE_FUNCTION = re.compile(r"\b(\w+_over_time|rate|irate|increase|delta|deriv)\(")


def range_arguments_are_valid(expr: str) -> bool:
    """Functions over a range get one: ``rate(m[5m])`` for a selector, a subquery
    ``max_over_time((expr)[30m:1m])`` for anything else (Prometheus refuses ``f(expr)[30m]``)."""
    for match in RANGE_FUNCTION.finditer(expr):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[end], 0)
            end += 1
        argument = expr[match.end():end - 1]
        window = re.search(r"\[([^\]]+)\]\s*$", argument)
        if window is None:
            return False
        if "(" in argument[:window.start()] and ":" not in window.group(1):
            return False
    return True


def test_the_range_check_refuses_what_prometheus_refuses():
    assert range_arguments_are_valid("rate(a_total[5m])")
    assert range_arguments_are_valid("max_over_time((a * on (x) b)[30m:1m])")
    assert not range_arguments_are_valid("max_over_time((a * on (x) b)[30m])")
    assert not range_arguments_are_valid("rate(a_total)")


def test_uids_are_unique():
    uids = [json.loads(p.read_text())["uid"] for p in BOARDS]
    assert len(uids) == len(set(uids))


def test_dcgm_metrics_come_from_the_default_list():
    assert {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"} <= dcgm_default_metrics()


def test_server_devices_counts_gpu_devices_held_by_running_servers(tmp_path):
    sessions = store.connect(f"sqlite:///{tmp_path / 'classhub.sqlite'}")
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        cs, bio = store.ensure_course(session, "cs101", now), store.ensure_course(session, "bio201", now)
        for course, user in ((cs, "sam"), (cs, "al"), (cs, "jo"), (bio, "sue"), (bio, "bo")):
            store.add_member(session, course, user, "student")
    ledger = store.Ledger(sessions)
    ledger.reserve("sam", "cs101", "server:sam/", ResourceVector({"cpu": "2", "nvidia.com/gpu": 1}), now)
    ledger.reserve("sam", "cs101", "server:sam/big", ResourceVector({"nvidia.com/gpu": 2}), now)
    ledger.reserve("sue", "bio201", "server:sue/", ResourceVector({"nvidia.com/mig-1g.18gb": 1}), now)
    ledger.reserve("bo", "bio201", "server:bo/", ResourceVector({"cpu": "1"}), now)  # no GPU
    ledger.reserve("al", "cs101", "server:al/", ResourceVector({"nvidia.com/gpu.shared": 1}), now)
    ledger.release("server:al/", now)  # stopped: holds nothing
    ledger.reserve("jo", "cs101", "job:7", ResourceVector({"nvidia.com/gpu": 4}), now, kind="job")

    text = metrics.render(metrics.registry_for(sessions)).decode()
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "classhub_server_devices"]
    held = {(s.labels["course"], s.labels["user"], s.labels["resource"]): s.value for s in family.samples}
    assert held == {("cs101", "sam", "nvidia.com/gpu"): 3.0,
                    ("bio201", "sue", "nvidia.com/mig-1g.18gb"): 1.0}
    sessions.kw["bind"].dispose()
