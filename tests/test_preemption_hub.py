"""Preemption end to end through a real hub in local mode (``classhub local``, 3 injected GPUs):
the story of tests/preemption_story.py, with demo101 guaranteed 2 GPUs by
``c.ClasshubJobs.course_shares`` and a 3 s grace period (``c.ClasshubJobs.grace``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import preemption_story as story
from tests.hubproc import HubSession, api, hub_with_config

pytestmark = pytest.mark.hub

INVENTORY = Path(__file__).parent / "data" / "jobs" / "three-h200.txt"
GPU_PROFILE = "nvidia-h200-gpu"
GRACE = 3
CONFIG = f"""
c.ClasshubLocalSpawner.gpu_discovery_command = ['cat', {str(INVENTORY)!r}]
c.ClasshubLocalSpawner.use_nvml = False
c.ClasshubLocalSpawner.profiles = [
    {{"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True}},
    {{"slug": {GPU_PROFILE!r}, "display_name": "Whole H200", "kind": "gpu", "gpu_product": "NVIDIA-H200"}},
]
c.ClasshubJobs.gpu_discovery_command = ['cat', {str(INVENTORY)!r}]
c.ClasshubJobs.use_nvml = False
c.ClasshubJobs.interval = 0.5
c.ClasshubJobs.grace = {GRACE}
c.ClasshubJobs.course_shares = {{"demo101": {{"nvidia.com/gpu": 2}}}}
"""


@pytest.fixture(scope="module")
def hub(hub_root):
    hub = hub_with_config(hub_root, "preemption", CONFIG)
    yield hub
    hub.stop()


def test_a_borrowing_job_is_preempted_requeued_in_its_place_and_resumes(hub, tmp_path):
    admin = HubSession(hub, "admin").new_token()
    assert api(hub, "POST", "courses", admin, json={"name": "night101"}).status_code == 201
    r = api(hub, "PUT", "courses/night101/members", admin,
            json={"add": [{"username": "owl", "role": "student"}]})
    assert r.status_code == 200, r.text
    tokens = {u: HubSession(hub, u).new_token() for u in ("owl", "student1", "student2")}
    story.start_gpu_notebook(hub, admin, tokens["student2"], "student2", GPU_PROFILE)
    story.tell(hub, tokens, "demo101", GRACE, tmp_path,
               lambda: story.notebook_ready(hub, admin, "student2"))
