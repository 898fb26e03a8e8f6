"""Request bodies (hub_ext.service.body_models): any JSON gets a model or one clear sentence."""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub_ext.service import body_models
from hub_ext.service.coursedata import DataFolderBody
from hub_ext.service.culling import PersistentBody, PolicyBody, WindowBody, WindowIdBody

pytestmark = pytest.mark.unit

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
bodies = st.dictionaries(
    st.sampled_from(["user", "server_name", "persistent", "note", "kind", "remove", "idle_timeout",
                     "never_cull", "start", "end", "id", "typo"]), json_values, max_size=5,
) | json_values

MODELS = [PersistentBody, PolicyBody, WindowBody, WindowIdBody]


@pytest.mark.parametrize("model", MODELS)
@given(data=bodies)
def test_any_json_is_a_model_or_a_sentence_never_a_crash(model, data):
    try:
        body = body_models.parse(model, data)
    except body_models.BodyError as e:
        sentence = str(e)
        assert sentence.endswith(".") or sentence.endswith(")."), sentence
        assert "Value error" not in sentence and "pydantic" not in sentence
    else:
        assert isinstance(body, model)


def test_the_sentences_name_the_field_to_change():
    def sentence(model, data):
        with pytest.raises(body_models.BodyError) as e:
            body_models.parse(model, data)
        return str(e.value)

    assert sentence(PersistentBody, ["demo"]).startswith("The body must be like {")
    assert sentence(PersistentBody, {"user": "a", "colour": "red"}).startswith("The body must be like")
    assert sentence(PersistentBody, {}) .startswith("user is required")
    assert sentence(PersistentBody, {"user": "a", "persistent": "yes"}) == "persistent must be true or false."
    assert "idle_timeout must be a number of seconds" in sentence(PolicyBody, {"idle_timeout": float("nan")})
    assert "kind must be one of" in sentence(PolicyBody, {"kind": "tpu"})
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    span = {"start": soon.isoformat(), "end": (soon + timedelta(days=15)).isoformat()}
    assert "at most 14 days" in sentence(WindowBody, span)
    assert sentence(WindowIdBody, {"id": True}).startswith('The body must be {"id": 3}')


def test_a_good_body_keeps_what_was_sent():
    body = body_models.parse(PolicyBody, {"kind": "gpu", "idle_timeout": 3600, "never_cull": None})
    assert body.fields() == {"idle_timeout": 3600.0, "max_age": None, "never_cull": None,
                             "warn_before": None, "pressure_min_idle": None}
    assert body_models.parse(PolicyBody, {"kind": "gpu", "remove": True}).fields() is None


# ---- the bodies of courses, members, quotas, sharing and the panel --------------------------------

def _sentence(model, data, context=None):
    with pytest.raises(body_models.BodyError) as e:
        body_models.parse(model, data, context)
    return str(e.value)


@pytest.mark.parametrize(("model", "data", "says"), [
    (body_models.NewCourseBody, {"name": "a b"}, "Course name 'a b' is not allowed"),
    (body_models.NewCourseBody, {"title": "x"}, "The body must be like {\"name\": \"cs101\""),
    (body_models.NewCourseBody, {"name": "cs1", "display_name": 5}, "display_name must be a string."),
    (body_models.MemberChangeBody, {"kick": ["x"]}, "The body must be like {\"add\""),
    (body_models.MemberChangeBody, {"add": "kim"}, '"add" must be a list, e.g. {"add": ["kim"]}.'),
    (body_models.MemberChangeBody, {"add": [{"user": "kim"}]}, 'add[0]: write {"username"'),
    (body_models.MemberChangeBody, {"add": [{"username": "x", "role": "owner"}]},
     "add[0]: role 'owner' is not one of student, ta, teacher."),
    (body_models.MemberChangeBody, {"add": ["x", {"username": "x", "role": "ta"}]},
     "add[1]: x is listed twice with different roles."),
    (body_models.MemberChangeBody, {"remove": [5]}, "remove[0]: give a username."),
    (body_models.MemberChangeBody, {"add": ["a b"]}, "add[0]: username 'a b' contains whitespace"),
    (body_models.MemberChangeBody, {"add": ["X"], "remove": ["x"]}, "x is both added and removed"),
    (body_models.QuotaBody, [1, 2], "Invalid quota: limits must be a JSON object"),
    (body_models.QuotaBody, {"cpus": 4}, "Invalid quota: unknown limit 'cpus'"),
    (body_models.QuotaBody, {"resources": {"gpus": 4}}, "Invalid quota: unknown resource 'gpus'; use cpu"),
    (body_models.QuotaBody, {"servers": 1.5}, "servers: 1.5 is not a whole number"),
    (body_models.ProfileOptionsBody, {"profile": 7}, "profile: "),
    (body_models.ProfileOptionsBody, {"gpu": 1}, "The body must be like {\"profile\""),
    (body_models.ShareBody, {"user": "a", "group": "b"}, "Name exactly one of 'user', 'group' or 'link'"),
    (body_models.ShareBody, {"link": True}, "A link must expire"),
    (body_models.ShareBody, {"user": "a", "colour": 1}, "Unknown field(s) colour"),
    (body_models.ShareAccessBody, {"server": ""}, "viewer_token is required"),
    (body_models.ShareAccessBody, {"viewer_token": "", "server": ""},
     "viewer_token must be the viewer's token"),
    (body_models.ShareAccessBody, {"viewer_token": "t", "server": 5}, "server must be a server's name"),
    (body_models.PanelCopyBody, {"viewer_token": "t", "path": "a/../b"},
     "path must name a file inside the shared server, without '..'."),
    (body_models.CourseSharingBody, {"ta_server_access": "yes"},
     'Send {"ta_server_access": true} or {"ta_server_access": false}.'),
])
def test_each_body_names_the_field_and_what_to_change(model, data, says):
    assert says in _sentence(model, data), _sentence(model, data)


def test_members_are_normalized_as_the_hub_does():
    """The parse context's normalizer (the hub's) names members; without one, the default."""
    body = body_models.parse(body_models.MemberChangeBody, {"add": ["Kim", {"username": "Lee", "role": "ta"}],
                                                           "remove": [{"username": "Old"}]})
    assert body.add == {"kim": "student", "lee": "ta"} and body.remove == ("old",)
    shout = body_models.parse(body_models.MemberChangeBody, {"add": ["kim"]}, {"normalize": str.upper})
    assert shout.add == {"KIM": "student"}


def test_good_bodies_keep_what_was_sent():
    quota = body_models.parse(body_models.QuotaBody, {"resources": {"nvidia.com/mig-1g.10gb.me": 2},
                                                      "servers": 3})
    assert quota.limits.servers == 3 and "nvidia.com/mig-1g.10gb.me" in quota.limits.limited
    assert body_models.parse(body_models.ProfileOptionsBody, {}).user_options() == {}
    with pytest.raises(body_models.BodyError, match="The body must be like"):  # JSON null
        body_models.parse(body_models.ProfileOptionsBody, None)
    assert body_models.parse(body_models.ProfileOptionsBody, {"profile": "cpu", "cpu": 2}).user_options() == {
        "profile": "cpu", "cpu": 2}
    spec = body_models.parse(body_models.ShareBody, {"group": "cs101", "minutes": 90}).spec("kim")
    assert (spec.owner, spec.target_kind, spec.target, spec.seconds) == ("kim", "group", "cs101", 5400)
    with pytest.raises(body_models.BodyError, match="cannot share a server with its owner"):
        body_models.parse(body_models.ShareBody, {"user": "kim"}).spec("kim")
    copy = body_models.parse(body_models.PanelCopyBody, {"viewer_token": "t", "path": "/week1.ipynb/"})
    assert (copy.server, copy.path) == ("", "week1.ipynb")


NEW_MODELS = [body_models.NewCourseBody, body_models.MemberChangeBody, body_models.QuotaBody,
              body_models.ProfileOptionsBody, body_models.ShareBody, body_models.ShareAccessBody,
              body_models.PanelCopyBody, body_models.CourseSharingBody, DataFolderBody]


@pytest.mark.parametrize("model", NEW_MODELS)
@given(data=json_values | st.dictionaries(st.sampled_from(
    ["name", "display_name", "add", "remove", "resources", "servers", "gpu_hours_per_week", "profile",
     "cpu", "user", "group", "link", "minutes", "viewer_token", "server", "path", "ta_server_access",
     "folder", "typo"]), json_values, max_size=4))
def test_any_json_is_one_of_these_models_or_a_sentence(model, data):
    try:
        body_models.parse(model, data)
    except body_models.BodyError as e:
        assert str(e) and "Value error" not in str(e) and "pydantic" not in str(e)


def test_a_data_folder_is_a_clean_path_or_a_sentence():
    assert body_models.parse(DataFolderBody, {"folder": "/images/val/"}).folder == "images/val"
    for folder, says in (("../up", "'..'"), (3, "must be a path"), ("", "Name a file")):
        with pytest.raises(body_models.BodyError, match=says):
            body_models.parse(DataFolderBody, {"folder": folder})


def test_every_model_gives_an_example():
    for model in NEW_MODELS:
        assert model.example != "{}" and model.__doc__
