"""A small client of classhub's job API, for notebooks, terminals and the ``classhub job`` command.

Inside a user's server it needs no setup: the server's own token (``JUPYTERHUB_API_TOKEN``, which
may call classhub) and the service's address (``CLASSHUB_SERVICE_API_URL``, set for every server)
are in its environment. Elsewhere pass ``url`` (``https://hub.example.org/services/classhub/api``)
and a hub API token, or set ``CLASSHUB_URL`` and ``CLASSHUB_TOKEN``.

```python
from hub_ext.jobclient import JobClient
jobs = JobClient()
job = jobs.submit(["python", "train.py"], replicas=2, resources={"nvidia.com/gpu": 1})
# or by profile: jobs.submit(["python", "train.py"], replicas=2, profile="gpu-1")
print(jobs.show(job["id"])["reason"])        # why it waits, its place in the queue
for text in jobs.logs(job["id"], follow=True):
    print(text, end="")
jobs.cancel(job["id"])
```
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import requests

__all__ = ["JobAPIError", "JobClient", "workdir_in_home"]

FINAL = ("succeeded", "failed", "cancelled")


class JobAPIError(RuntimeError):
    """The service refused or failed; the message is its sentence."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def workdir_in_home(cwd: str | None = None, home: str | None = None) -> str:
    """The current folder relative to the home ("" when outside it): where a job submitted from
    a terminal runs, as the student expects."""
    here = Path(cwd or os.getcwd()).resolve()
    base = Path(home or os.environ.get("HOME", "/")).resolve()
    try:
        relative = here.relative_to(base)
    except ValueError:
        return ""
    return "" if str(relative) == "." else str(relative)


class JobClient:
    """Submit, list, show, follow and cancel jobs (see the module docstring)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 60) -> None:
        base = url or os.environ.get("CLASSHUB_SERVICE_API_URL") or os.environ.get("CLASSHUB_URL")
        if not base:
            raise JobAPIError(0, "Where is classhub? Pass --url https://<hub>/services/classhub/api "
                              "(or set CLASSHUB_URL); inside your server it is found by itself.")
        self.url = base.rstrip("/")
        if not self.url.endswith("/api"):
            self.url += "/services/classhub/api" if "/services/" not in self.url else "/api"
        self.token = token or os.environ.get("CLASSHUB_TOKEN") or os.environ.get("JUPYTERHUB_API_TOKEN")
        if not self.token:
            raise JobAPIError(0, "No token: pass --token (a hub API token from /hub/token) or set "
                              "CLASSHUB_TOKEN; inside your server the server's own token is used.")
        self.timeout = timeout
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"token {self.token}"

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout)
        response = self.http.request(method, f"{self.url}/{path}", **kwargs)
        if response.status_code >= 400:
            try:
                message = response.json().get("message") or response.text
            except ValueError:
                message = response.text or response.reason
            raise JobAPIError(response.status_code, message)
        return response

    def submit(self, command: Sequence[str], *, replicas: int = 1,
               resources: Mapping[str, Any] | None = None, name: str = "job", id: str | None = None,
               course: str | None = None, max_runtime: float | None = None,
               env: Mapping[str, str] | None = None, workdir: str | None = None,
               roles: Sequence[Mapping[str, Any]] | None = None, profile: str | None = None,
               **fields: Any) -> dict:
        """Queue a job; the same `id` again returns the job made the first time. `profile`
        (a slug of the course's profiles, e.g. "gpu-1") gives every replica what a notebook of
        that profile gets, in place of `resources`; in `roles`, each role may name its own."""
        body: dict[str, Any] = {"name": name, "command": list(command), **fields}
        if profile is not None:
            body["profile"] = profile
        if roles is not None:
            body["roles"] = list(roles)
        else:
            body["replicas"] = replicas
            if resources or profile is None:
                body["resources"] = dict(resources or {"cpu": "1"})
        for key, value in (("id", id), ("course", course), ("max_runtime", max_runtime),
                           ("env", dict(env) if env else None), ("workdir", workdir)):
            if value is not None:
                body[key] = value
        return self._call("POST", "jobs", json=body).json()

    def list(self, *, course: str | None = None, state: str | None = None, offset: int = 0,
             limit: int = 50) -> dict:
        params = {k: v for k, v in (("course", course), ("state", state), ("offset", offset),
                                    ("limit", limit)) if v is not None}
        return self._call("GET", "jobs", params=params).json()

    def show(self, job_id: str) -> dict:
        return self._call("GET", f"jobs/{job_id}").json()

    def cancel(self, job_id: str) -> dict:
        return self._call("POST", f"jobs/{job_id}/cancel").json()

    def logs(self, job_id: str, role: str | None = None, index: int = 0,
             follow: bool = False) -> Iterator[str]:
        """A replica's log as it arrives (to its end with `follow`)."""
        params: dict[str, Any] = {"index": index, "follow": "1" if follow else "0"}
        if role:
            params["role"] = role
        with self._call("GET", f"jobs/{job_id}/logs", params=params, stream=True,
                        timeout=None if follow else self.timeout) as response:
            for chunk in response.iter_content(chunk_size=None, decode_unicode=False):
                yield chunk.decode("utf-8", errors="replace")

    def wait(self, job_id: str, timeout: float | None = None, poll: float = 2.0) -> dict:
        """Wait until the job ends; its final state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.show(job_id)
            if job["state"] in FINAL:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job['state']}")
            time.sleep(poll)
