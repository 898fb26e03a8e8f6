"""SIGTERM to `classhub local` stops the proxy, the service and every user server in time."""

from __future__ import annotations

import pytest

from tests.hubproc import HubSession, LocalHub, start_server, wait_for

pytestmark = pytest.mark.hub


def test_sigterm_leaves_no_process_behind(hub_root):
    hub = LocalHub(data_dir=hub_root / "shutdown").start()
    try:
        session = HubSession(hub, "student1")
        token = session.new_token()
        start_server(hub, "student1", token)
        # A running kernel: the server's own child, which must not survive the hub either.
        r = session.http.post(f"{hub.url}/user/student1/api/kernels",
                              headers={"Authorization": f"token {token}"}, json={}, timeout=30)
        assert r.status_code == 201, r.text
        kernel_id = r.json()["id"]

        def kernel_process():
            return [p for p in hub.descendants() if kernel_id in " ".join(p.cmdline())]

        wait_for(kernel_process, 30, "the kernel process")
        procs = hub.descendants()
        names = " ".join(" ".join(p.cmdline()) for p in procs)
        assert "configurable-http-proxy" in names
        assert "hub_ext.service" in names
        assert "jupyterhub.singleuser" in names
    except BaseException:
        hub.stop()
        raise

    report = hub.stop(timeout=10)
    assert hub.proc.returncode is not None
    assert report.seconds < 10, f"classhub local took {report.seconds:.1f}s to stop"
    assert not report.survivors, report.survivors
    print(f"classhub local stopped in {report.seconds:.1f}s")
