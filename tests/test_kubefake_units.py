"""Pure pieces of kubefake: quantities, selectors, patches, scheduler message format."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.kubefake.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from tests.kubefake.quantity import QuantityError, parse_quantity
from tests.kubefake.scheduler import Scheduler
from tests.kubefake.selection import match_labels, parse_label_selector
from tests.kubefake.status import ApiError

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("1", 1),
        ("1Gi", 2**30),
        ("2G", 2 * 10**9),
        ("1.5", Fraction(3, 2)),
        ("1e3", 1000),
        ("128974848", 128974848),
        ("129M", 129 * 10**6),
        ("123Mi", 123 * 2**20),
        ("0.1", Fraction(1, 10)),
        ("100u", Fraction(1, 10**4)),
        ("1k", 1000),
    ],
)
def test_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1.2.3", "abc", "1Gb", "--1"])
def test_bad_quantities(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


@given(st.integers(min_value=0, max_value=10**9))
def test_millicores_are_exact(n):
    assert parse_quantity(f"{n}m") * 1000 == n


def test_label_selector_parsing_errors():
    with pytest.raises(ApiError) as err:
        parse_label_selector("a=b=c")
    assert err.value.code == 400


def test_set_based_selectors():
    reqs = parse_label_selector("env in (prod, staging),!canary,tier notin (db)")
    assert match_labels(reqs, {"env": "prod"})
    assert not match_labels(reqs, {"env": "prod", "canary": "1"})
    assert not match_labels(reqs, {"env": "dev"})
    assert not match_labels(reqs, {"env": "prod", "tier": "db"})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=3), json_values, max_size=4)


@given(json_objects, json_objects)
def test_merge_patch_is_idempotent(target, patch):
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


def test_merge_patch_rfc7386_example():
    target = {"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"}, "tags": ["a", "b"]}
    patch = {"title": "Hello!", "author": {"familyName": None}, "tags": ["c"], "phoneNumber": "+01"}
    assert merge_patch(target, patch) == {
        "title": "Hello!",
        "author": {"givenName": "John"},
        "tags": ["c"],
        "phoneNumber": "+01",
    }


def test_strategic_merge_by_name_and_delete_directive():
    spec = {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}
    out = strategic_merge_patch(
        spec, {"containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}]}
    )
    assert out["containers"] == [
        {"name": "a", "image": "1"},
        {"name": "b", "image": "2"},
        {"name": "c", "image": "3"},
    ]
    out = strategic_merge_patch(out, {"containers": [{"name": "a", "$patch": "delete"}]})
    assert [c["name"] for c in out["containers"]] == ["b", "c"]


def test_json_patch_rfc6902_ops():
    doc = {"a": [1, 2], "b": {"c": 1}}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "move", "from": "/b/c", "path": "/d"},
            {"op": "copy", "from": "/d", "path": "/e"},
            {"op": "remove", "path": "/a/0"},
            {"op": "test", "path": "/e", "value": 1},
        ],
    )
    assert out == {"a": [2, 3], "b": {}, "d": 1, "e": 1}
    assert doc == {"a": [1, 2], "b": {"c": 1}}, "the input must not be modified"
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])


def test_fit_error_sorts_reasons_like_the_scheduler():
    reasons = Counter(
        {"Insufficient nvidia.com/gpu": 2, "node(s) didn't match Pod's node affinity/selector": 1}
    )
    assert Scheduler.fit_error(3, reasons, resolvable=2) == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
        "1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
    )
