"""Distributed jobs in the classhub service: the REST API, the admission loop and the metrics.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS`
are merged into the OpenAPI document by hub_ext.service.openapi.document(). The loop
(`loop.JobLoop`) runs the pure admission core (hub_ext.core.admission) and a backend
(hub_ext.backends) carries out its decisions.
"""

from hub_ext.service.jobs.handlers import OPENAPI_PARAMETERS, OPENAPI_PATHS, ROUTES
from hub_ext.service.jobs.metrics import JobCollector
from hub_ext.service.jobs.settings import ClasshubJobs, JobService

__all__ = ["OPENAPI_PARAMETERS", "OPENAPI_PATHS", "ROUTES", "ClasshubJobs", "JobCollector", "JobService"]
