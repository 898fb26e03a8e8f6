"""Scheduler and API-server messages become sentences a student can act on (pure core)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub_ext.core.scheduling import (
    api_error_message,
    is_transient,
    parse_fit_error,
    retry_delay,
    unschedulable_message,
)

pytestmark = pytest.mark.cluster

# Real FailedScheduling messages, as kube-scheduler versions 1.18 to 1.32 word them.
MIG = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/mig-1g.18gb. preemption: 0/3 nodes are "
    "available: 3 No preemption victims found for incoming pod."
)
AFFINITY_AND_GPU = (
    "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient "
    "nvidia.com/gpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for "
    "scheduling, 2 No preemption victims found for incoming pod."
)
CPU_AND_MEMORY_WITH_TAINT = (
    "0/5 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
    "4 Insufficient cpu, 4 Insufficient memory. preemption: 0/5 nodes are available: 1 Preemption is "
    "not helpful for scheduling, 4 No preemption victims found for incoming pod.."
)
OLD_TAINT = (
    "0/1 nodes are available: 1 node(s) had taint {node.kubernetes.io/not-ready: }, that the pod "
    "didn't tolerate."
)
OLD_GPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
UNBOUND_PVC = (
    "0/2 nodes are available: 2 pod has unbound immediate PersistentVolumeClaims. preemption: 0/2 "
    "nodes are available: 2 Preemption is not helpful for scheduling."
)
SELECTOR_ONLY = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
TOO_MANY_PODS = (
    "0/2 nodes are available: 2 Too many pods. preemption: 0/2 nodes are available: 2 No preemption "
    "victims found for incoming pod."
)
CORDONED = (
    "0/2 nodes are available: 2 node(s) were unschedulable. preemption: 0/2 nodes are available: 2 "
    "Preemption is not helpful for scheduling."
)


def test_the_issue_example_reads_as_one_sentence():
    assert unschedulable_message(MIG) == (
        "No node has a free nvidia.com/mig-1g.18gb right now (0/3 nodes available: 3 Insufficient "
        "nvidia.com/mig-1g.18gb). Try again later or pick another profile."
    )


def test_mixed_reasons_name_the_missing_gpu_and_keep_the_histogram():
    assert unschedulable_message(AFFINITY_AND_GPU) == (
        "No node has a free nvidia.com/gpu right now (0/3 nodes available: 1 node(s) didn't match "
        "Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu). Try again later or pick "
        "another profile."
    )


def test_cpu_and_memory_are_worded_for_people():
    text = unschedulable_message(CPU_AND_MEMORY_WITH_TAINT)
    assert text.startswith("No node has enough free CPU or enough free memory right now (0/5 nodes")
    assert "preemption" not in text and ".." not in text


@pytest.mark.parametrize(
    ("message", "start"),
    [
        (OLD_GPU, "No node has a free nvidia.com/gpu right now (0/4 nodes available: 4 Insufficient"),
        (OLD_TAINT, "No node can run this profile (0/1 nodes available: 1 node(s) had taint"),
        (SELECTOR_ONLY, "No node can run this profile (0/3 nodes available: 3 node(s) didn't match"),
        (UNBOUND_PVC, "Your storage volume is not ready for any node yet"),
        (TOO_MANY_PODS, "Every node is running as many servers as it can right now"),
        (CORDONED, "Every node is closed for new servers right now"),
        ("no nodes available to schedule pods", "The cluster has no nodes to run servers"),
        ("0/0 nodes are available", "The cluster has no nodes to run servers"),
        ("skip schedule deleting pod: default/jupyter-ann", "Your server cannot be placed on a node yet"),
    ],
)
def test_real_message_variants(message, start):
    text = unschedulable_message(message)
    assert text.startswith(start), text
    assert "Traceback" not in text and text.endswith(".")


def test_parse_keeps_reasons_that_contain_commas():
    fit = parse_fit_error(OLD_TAINT)
    assert fit is not None and fit.nodes == 1
    assert fit.reasons == (
        (1, "node(s) had taint {node.kubernetes.io/not-ready: }, that the pod didn't tolerate"),
    )
    fit = parse_fit_error(CPU_AND_MEMORY_WITH_TAINT)
    assert fit.missing_resources == ("cpu", "memory")
    assert parse_fit_error("Successfully assigned default/x to node-1") is None


reason_text = st.sampled_from([
    "Insufficient nvidia.com/gpu", "Insufficient cpu", "node(s) didn't match Pod's node affinity/selector",
    "node(s) had untolerated taint {nvidia.com/gpu: present}", "Too many pods",
    "Insufficient nvidia.com/mig-3g.71gb",
])


@given(st.integers(1, 5000), st.lists(st.tuples(st.integers(1, 5000), reason_text), min_size=1, max_size=5,
                                      unique_by=lambda t: t[1]),
       st.booleans())
def test_parse_round_trips_any_histogram(nodes, reasons, with_preemption):
    message = f"0/{nodes} nodes are available: " + ", ".join(f"{c} {r}" for c, r in reasons) + "."
    if with_preemption:
        message += f" preemption: 0/{nodes} nodes are available: {nodes} No preemption victims found."
    fit = parse_fit_error(message)
    assert fit is not None and fit.nodes == nodes and list(fit.reasons) == reasons
    assert unschedulable_message(message).endswith(".")


@pytest.mark.parametrize(
    ("status", "message", "what", "start"),
    [
        (403, 'pods "jupyter-ann" is forbidden: exceeded quota: q, requested: requests.cpu=1', "pod",
         "Your server needs more than the resource quota has left (pods "),
        (403, 'persistentvolumeclaims is forbidden: User "system:serviceaccount:hub:hub"', "pvc",
         "The hub is not allowed to create your storage volume (persistentvolumeclaims is forbidden"),
        (422, 'Pod "jupyter-ann" is invalid: spec.containers[0].image: Required value', "pod",
         "The cluster rejected the settings of this profile (Pod \"jupyter-ann\" is invalid"),
        (429, "Too many requests, please try again later.", "pod",
         "The cluster is busy right now (too many requests). Try again in a minute."),
        (500, "Internal error occurred: etcdserver: request timed out", "pvc",
         "The cluster could not create your storage volume (API server error 500, Internal error"),
        (404, 'namespaces "course-x" not found', "pod",
         "The hub could not start your server: the cluster is"),
    ],
)
def test_api_errors_become_actionable_sentences(status, message, what, start):
    text = api_error_message(status, message, what)
    assert text.startswith(start), text
    assert text.endswith(".")


def test_only_429_and_5xx_are_retried():
    assert [s for s in (400, 403, 404, 409, 422, 429, 500, 502, 503, 504) if is_transient(s)] == [
        429, 500, 502, 503, 504]
    assert not is_transient(None)


def test_retry_delay_honours_retry_after_and_caps_backoff():
    assert [retry_delay(n) for n in range(6)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
    assert retry_delay(0, retry_after=1) == 1.0
    assert retry_delay(3, retry_after=120) == 5.0
