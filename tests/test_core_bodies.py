"""hub_ext.core.bodies: what a request body may hold before any endpoint reads it (issue 12)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub_ext.core.bodies import DB_INT_MAX, INT64_MAX, INT64_MIN, MAX_DEPTH, BodyError, parse_json, path_id

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("raw", "words"), [
    (b"[" * 20_000 + b"]" * 20_000, "levels deep"),
    (b'{"a":' * 20_000 + b"1" + b"}" * 20_000, "levels deep"),
    (b'{"servers": ' + str(10**30).encode() + b"}", "servers: 100000000000000000000000... is out of range"),
    (b'{"a": [1, ' + str(10**400).encode() + b"]}", "a[1]:"),
    (b'{"idle_timeout": 1e400}', "idle_timeout: the number is too large"),
    (b'{"x": NaN}', "NaN is not a JSON number"),
    (b'{"x": -Infinity}', "-Infinity is not a JSON number"),
    (b'{"name": "\xff"}', "not valid UTF-8 (byte 10)"),
    (b'{"name": "\\ud800"}', "name: the text has an unpaired surrogate"),
    (b'{"a\\u0000": 1}', "the key"),
    (b'{"name": "a\\u0000"}', "NUL"),
    (b"{'a': 1}", "must be JSON"),
    (b"1" * 5000, "out of range"),
])
def test_refused_bodies_say_why(raw, words):
    with pytest.raises(BodyError) as e:
        parse_json(raw)
    assert words in str(e.value)


def test_the_limits_themselves_are_taken():
    assert parse_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    assert parse_json(f'{{"a": {INT64_MAX}, "b": {INT64_MIN}, "c": 1.5e308}}') == {
        "a": INT64_MAX, "b": INT64_MIN, "c": 1.5e308}
    # brackets inside strings are text, not nesting
    assert parse_json(b'{"a": "' + b"[" * 1000 + b'\\"]"}')["a"].startswith("[[[")
    with pytest.raises(BodyError):
        parse_json(f"[{INT64_MAX + 1}]")


@given(st.recursive(st.none() | st.booleans() | st.integers(INT64_MIN, INT64_MAX)
                    | st.floats(allow_nan=False, allow_infinity=False) | st.text().filter(
                        lambda t: "\x00" not in t and not any(0xD800 <= ord(c) <= 0xDFFF for c in t)),
                    lambda children: st.lists(children) | st.dictionaries(
                        st.text(alphabet="abc"), children), max_leaves=20))
def test_every_storable_document_round_trips(value):
    import json
    assert parse_json(json.dumps(value).encode()) == value


@pytest.mark.parametrize(("text", "expected"), [
    ("1", 1), (str(DB_INT_MAX), DB_INT_MAX), (str(DB_INT_MAX + 1), None), ("99999999999999999999999", None),
    ("0", None), ("-1", None), ("1e3", None), ("", None), ("x", None), ("٣", None),
])
def test_path_ids(text, expected):
    assert path_id(text) == expected
