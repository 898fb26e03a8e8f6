"""Request bodies (hub_ext.service.body_models): any JSON gets a model or one clear sentence."""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub_ext.service import body_models
from hub_ext.service.culling import PersistentBody, PolicyBody, WindowBody, WindowIdBody

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
