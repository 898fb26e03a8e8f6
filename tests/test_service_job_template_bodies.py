"""The job and template bodies are declared once, and every handler method of jobs and templates
declares what it does.

What a user notices when this fails: a student's typo in a job body is silently ignored (or
answered with pydantic's words instead of a sentence saying what to send), the OpenAPI document (and
the lab extension built from it) describes a body the service does not take, or a new endpoint
forgets to ask hub_ext.core.authz who may call it.
"""

from __future__ import annotations

import json

import pytest

from hub_ext.service import openapi
from hub_ext.service.apidoc import model_schema
from hub_ext.service.body_models import BodyError, parse
from hub_ext.service.declare import PUBLIC, action_of, body_of
from hub_ext.service.jobs import ROUTES as JOB_ROUTES
from hub_ext.service.jobs.bodies import JobSubmission, parse_submission
from hub_ext.service.templates import ROUTES as TEMPLATE_ROUTES
from hub_ext.service.templates.bodies import (
    PublishFromServer,
    PublishMetadata,
    StartBody,
    TemplateSettingsBody,
)

pytestmark = pytest.mark.unit

MODELS = (JobSubmission, TemplateSettingsBody, StartBody, PublishMetadata, PublishFromServer)


def refusal(model: type, body: object) -> str:
    with pytest.raises(BodyError) as refused:
        parse(model, body)
    message = str(refused.value)
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize("model", MODELS)
def test_each_models_example_is_a_body_it_takes(model):
    parse(model, json.loads(model.example))


@pytest.mark.parametrize(("body", "says"), [
    ({"command": ["x"], "colour": 1}, "unknown field 'colour'; allowed: command, course, env"),
    ({"command": ["x"], "roles": [{"name": "m", "replicas": 1, "colour": 1}]},
     "role m: unknown field 'colour'; allowed: gpu_product, name, profile, replicas, resources"),
    ({}, "command must be a list of 1 to 256 non-empty strings"),
    ({"command": ["x"], "replicas": 0}, "replicas must be a whole number from 1 to 1024, not 0"),
    ({"command": ["x"], "roles": [{"name": "m", "replicas": 2000}]},
     "role m: replicas must be a whole number from 1 to 1024, not 2000"),
    ({"command": ["x"], "roles": [{"replicas": 1}]}, "role name None is not valid"),
    ({"command": ["x"], "roles": [{"name": "m", "resources": []}]}, "role m: resources must be an object"),
    ({"command": ["x"], "resources": {"cpu": True}}, "'cpu': True is not a number or quantity"),
    ({"command": ["x"], "profile": "gpu-1", "resources": {"cpu": 1}},
     "give either profile or resources, not both"),
    ({"command": ["x"], "roles": [{"name": "m", "profile": "Big GPU"}]},
     "role m: profile must be the slug of a profile of your course"),
    ({"command": ["x"], "env": {"WORLD_SIZE": "2"}}, "env: WORLD_SIZE is set by classhub"),
    ({"command": ["x"], "priority": 1.5}, "priority must be a whole number from -2147483648"),
    ({"command": ["x"], "success": "most"}, "success must be 'all' (every replica succeeds) or 'main'"),
    ({"command": ["x"], "max_runtime": 0}, "max_runtime must be a positive number of seconds"),
    ({"command": ["x"], "course": ""}, "course must be the name of one of your courses"),
    ("python train.py", "The body must be like {"),
])
def test_a_wrong_job_body_gets_the_sentence_of_its_field(body, says):
    assert says in refusal(JobSubmission, body)


def test_the_shorthand_and_roles_are_one_submission():
    sub = parse_submission({"command": ["python", "train.py"], "roles": [
        {"name": "master", "profile": "cpu"}, {"name": "worker", "replicas": 3, "resources": {"cpu": "1"}}],
        "main_role": "master", "success": "main"})
    assert sub.job_fields == {"roles": [{"name": "master", "profile": "cpu"},
                                        {"name": "worker", "replicas": 3, "resources": {"cpu": "1"}}],
                              "main_role": "master", "success": "main"}
    assert sub.name == "job" and sub.env == {} and sub.workdir == ""
    # only what the student sent is kept (the course's defaults apply to the rest)
    sub = parse_submission({"command": ["true"], "profile": "gpu-1"})
    assert sub.job_fields == {"roles": [{"name": "worker", "replicas": 1, "profile": "gpu-1"}]}


@pytest.mark.parametrize(("model", "body", "says"), [
    (TemplateSettingsBody, {"reseed": "sometimes"}, 'reseed must be "manual" or "on_start"'),
    (TemplateSettingsBody, {}, "reseed is required"),
    (TemplateSettingsBody, {"reseed": "manual", "when": 1}, 'The body must be like {"reseed": "on_start"}'),
    (StartBody, {"version": 0}, "version must be a number like 2 (or 'v2')."),
    (StartBody, {"version": True}, "version must be a number like 2"),
    (StartBody, {"restore_deleted": "yes"}, "restore_deleted must be true or false."),
    (StartBody, {"path": "/etc"}, "The body must be like {"),
    (PublishFromServer, {"source": "lab1"}, 'source must be {"server_path": "<folder in your server>"}'),
    (PublishFromServer, {"source": {"server_path": "../x"}},
     "server_path must be a folder inside your server, without '..'."),
    (PublishFromServer, {"source": {"server_path": "x"}, "colour": 1},
     "Unknown field(s) colour; send image, profile, start_command, description, home_folder, "
     "staff_only and source."),
    (PublishFromServer, {"source": {"server_path": "x"}, "staff_only": "yes"},
     "staff_only must be true or false."),
    (PublishFromServer, {"source": {"server_path": "x"}, "home_folder": "../x"},
     'home_folder must be a folder inside the home, without "..", "." or backslashes'),
    (PublishFromServer, {"source": {"server_path": "x"}, "image": "Not An Image"},
     "image must be a container image reference"),
    (PublishMetadata, {"profile": "GPU 1"}, "profile must be the slug of a profile of the spawn form"),
    (PublishMetadata, {"start_command": "jupyterhub-singleuser"}, "start_command must be a list of strings"),
    (PublishMetadata, {"description": "x" * 4001}, "description must be a text of at most 4000 characters."),
])
def test_a_wrong_template_body_gets_the_sentence_of_its_field(model, body, says):
    assert says in refusal(model, body)


def test_template_bodies_read_as_the_version_columns():
    body = parse(PublishFromServer, {"source": {"server_path": "/lab1/"}, "image": "", "start_command": [],
                                     "description": None, "profile": "cpu"})
    assert body.source.server_path == "lab1"
    assert body.columns() == {"image": None, "profile": "cpu", "start_command": None, "description": "",
                              "staff_only": False}
    assert parse(PublishMetadata, {"staff_only": "true"}).columns()["staff_only"] is True
    assert parse(StartBody, {"version": "v3"}).version == 3


def _request_schema(path: str, method: str) -> tuple[dict, dict]:
    document = openapi.document()
    body = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return body, document["components"]["schemas"]


@pytest.mark.parametrize(("path", "method", "model"), [
    ("/api/jobs", "post", JobSubmission),
    ("/api/courses/{course}/template-settings", "put", TemplateSettingsBody),
    ("/api/courses/{course}/templates/{template}/start", "post", StartBody),
])
def test_the_documents_request_schemas_are_the_declared_models(path, method, model):
    body, schemas = _request_schema(path, method)
    assert body == {"$ref": f"#/components/schemas/{model.__name__}"}
    assert schemas[model.__name__]["additionalProperties"] is False  # unknown fields are refused


def test_the_publish_body_is_its_model_though_it_may_be_an_archive_too():
    body, _schemas = _request_schema("/api/courses/{course}/templates/{template}/versions", "post")
    assert body == model_schema(PublishFromServer) and "$defs" not in json.dumps(body)
    assert body["properties"]["source"]["required"] == ["server_path"]


def _methods(routes: list[tuple[str, type]]):
    for pattern, handler in routes:
        for name in ("get", "post", "put", "patch", "delete"):
            method = handler.__dict__.get(name)
            if method is not None:
                yield f"{name.upper()} {pattern}", method


def test_only_the_publisher_pods_upload_fetch_is_public():
    public = [where for where, method in _methods(JOB_ROUTES + TEMPLATE_ROUTES)
              if action_of(method) == PUBLIC]
    assert public == ["GET api/template-uploads/([^/]+)"]


def test_the_json_bodies_are_declared_on_their_methods():
    declared = {where: body_of(method) for where, method in _methods(JOB_ROUTES + TEMPLATE_ROUTES)}
    assert declared["POST api/jobs"] is JobSubmission
    assert declared["PUT api/courses/([^/]+)/template-settings"] is TemplateSettingsBody
    assert declared["POST api/courses/([^/]+)/templates/([^/]+)/start"] is StartBody
