"""Template seeding decisions (hub_ext.core.seeding): manifests, sidecar names, the merge plan.

What a student would notice: their edited notebook overwritten by the teacher's v2, a file they
deleted coming back, a folder of theirs replaced by the template's file, a non-ASCII file name
mangled, or a sidecar name that does not say which version it is.
"""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.core.seeding import (
    ADDED,
    COPY,
    DIR_ENTRY,
    FILE,
    MKDIR,
    NONE,
    PARENT_CONFLICT,
    PARENT_DELETED,
    REMOVED_IN_TEMPLATE,
    RESTORED,
    SIDECAR_TAKEN,
    SPECIAL,
    STUDENT_CREATED,
    STUDENT_DELETED,
    STUDENT_MODIFIED,
    SYMLINK,
    TYPE_CONFLICT,
    UP_TO_DATE,
    UPDATED,
    CachedFile,
    Entry,
    Manifest,
    Marker,
    StatKey,
    TemplateRefused,
    base_for,
    check_path,
    home_paths,
    plan,
    sidecar_name,
)

pytestmark = pytest.mark.unit


def f(content: str, executable: bool = False) -> Entry:
    data = content.encode()
    return Entry(FILE, len(data), hashlib.sha256(data).hexdigest(), executable)


D = DIR_ENTRY
LINK = Entry(SYMLINK)
V1, V2, MINE = f("teacher v1"), f("teacher v2"), f("student's own")


def m(**entries: Entry) -> Manifest:
    """Manifest from keyword paths: ``__`` is a folder separator (``nb__a`` -> ``nb/a``)."""
    return Manifest({k.replace("__", "/"): v for k, v in entries.items()})


def decisions(p, path):
    return [(a.op, a.reason, a.target) for a in p.decisions(path)]


# ---------------------------------------------------------------------------------------------
# The merge table: one row per documented rule


TABLE = [
    # (case, base, new, home, {path: [(op, reason, target), ...]}, home paths that must be unchanged)
    ("unchanged", m(a=V1), m(a=V1), m(a=V1), {"a": [(NONE, UP_TO_DATE, "a")]}),
    ("updated: untouched by the student, changed in v2", m(a=V1), m(a=V2), m(a=V1),
     {"a": [(COPY, UPDATED, "a")]}),
    ("student-modified, template unchanged", m(**{"a.ipynb": V1}), m(**{"a.ipynb": V1}),
     m(**{"a.ipynb": MINE}), {"a.ipynb": [(NONE, STUDENT_MODIFIED, None)]}),
    ("student-modified, template changed: kept, v2 beside", m(**{"a.ipynb": V1}), m(**{"a.ipynb": V2}),
     m(**{"a.ipynb": MINE}), {"a.ipynb": [(COPY, STUDENT_MODIFIED, "a.template-v2.ipynb")]}),
    ("student-deleted: not brought back", m(a=V1), m(a=V2), m(), {"a": [(NONE, STUDENT_DELETED, None)]}),
    ("new in v2: added", m(), m(b=V2), m(), {"b": [(COPY, ADDED, "b")]}),
    ("new in v2 but the student made one there", m(), m(**{"b.py": V2}), m(**{"b.py": MINE}),
     {"b.py": [(COPY, STUDENT_CREATED, "b.template-v2.py")]}),
    ("new in v2, identical to the student's", m(), m(b=V2), m(b=V2), {"b": [(NONE, UP_TO_DATE, "b")]}),
    ("removed in v2: left alone", m(c=V1), m(), m(c=V1), {"c": [(NONE, REMOVED_IN_TEMPLATE, "c")]}),
    ("removed in v2 and modified: left alone", m(c=V1), m(), m(c=MINE),
     {"c": [(NONE, REMOVED_IN_TEMPLATE, "c")]}),
    ("template: file -> folder; home has the old file", m(x=V1), m(x=D, x__y=V2), m(x=V1),
     {"x": [(NONE, TYPE_CONFLICT, None), (MKDIR, PARENT_CONFLICT, "x.template-v2")],
      "x/y": [(COPY, PARENT_CONFLICT, "x.template-v2/y")]}),
    ("template: folder -> file; home has the folder", m(d=D, d__y=V1), m(d=V2), m(d=D, d__y=V1),
     {"d": [(COPY, TYPE_CONFLICT, "d.template-v2")]}),
    ("template: folder -> file and back (v3 folder again, home kept the folder)", m(d=V2),
     m(d=D, d__y=V1), m(d=D, d__y=V1), {"d": [(NONE, UP_TO_DATE, "d")], "d/y": [(NONE, UP_TO_DATE, "d/y")]}),
    ("student: file -> folder, template unchanged", m(x=V1), m(x=V1), m(x=D),
     {"x": [(NONE, TYPE_CONFLICT, None)]}),
    ("student: file -> folder, template changed", m(**{"x.md": V1}), m(**{"x.md": V2}), m(**{"x.md": D}),
     {"x.md": [(COPY, TYPE_CONFLICT, "x.template-v2.md")]}),
    ("student: folder -> file, template unchanged", m(d=D, d__y=V1), m(d=D, d__y=V1), m(d=MINE),
     {"d": [(NONE, TYPE_CONFLICT, None)], "d/y": [(NONE, PARENT_CONFLICT, None)]}),
    ("student: folder -> file, template changed and added", m(d=D, d__y=V1),
     m(d=D, d__y=V2, d__z=V2), m(d=MINE),
     {"d": [(NONE, TYPE_CONFLICT, None), (MKDIR, PARENT_CONFLICT, "d.template-v2")],
      "d/y": [(COPY, PARENT_CONFLICT, "d.template-v2/y")],
      "d/z": [(COPY, PARENT_CONFLICT, "d.template-v2/z")]}),
    ("student: folder deleted; new file inside it", m(d=D, d__a=V1), m(d=D, d__a=V1, d__new=V2), m(),
     {"d": [(NONE, STUDENT_DELETED, None)], "d/a": [(NONE, PARENT_DELETED, None)],
      "d/new": [(NONE, PARENT_DELETED, None)]}),
    ("sidecar name already taken", m(**{"a.txt": V1}), m(**{"a.txt": V2}),
     m(**{"a.txt": MINE, "a.template-v2.txt": f("other")}),
     {"a.txt": [(NONE, SIDECAR_TAKEN, "a.template-v2.txt")]}),
    ("sidecar already saved (a re-run)", m(**{"a.txt": V1}), m(**{"a.txt": V2}),
     m(**{"a.txt": MINE, "a.template-v2.txt": V2}),
     {"a.txt": [(NONE, STUDENT_MODIFIED, "a.template-v2.txt")]}),
    ("symlink planted where the template has a folder", None, m(nb=D, nb__x=V2), m(nb=LINK),
     {"nb": [(NONE, TYPE_CONFLICT, None), (MKDIR, PARENT_CONFLICT, "nb.template-v2")],
      "nb/x": [(COPY, PARENT_CONFLICT, "nb.template-v2/x")]}),
    ("symlink planted where the template has a file", m(a=V1), m(a=V2), m(a=LINK),
     {"a": [(COPY, TYPE_CONFLICT, "a.template-v2")]}),
    ("a FIFO where the template has a file", None, m(a=V2), m(a=Entry(SPECIAL)),
     {"a": [(COPY, TYPE_CONFLICT, "a.template-v2")]}),
    ("first seed: copy what is missing, keep what differs", None, m(a=V1, b=V1, nb=D, nb__c=V1),
     m(b=MINE, nb=D, nb__c=V1),
     {"a": [(COPY, ADDED, "a")], "b": [(COPY, STUDENT_CREATED, "b.template-v2")],
      "nb": [(NONE, UP_TO_DATE, "nb")], "nb/c": [(NONE, UP_TO_DATE, "nb/c")]}),
    ("template switched file -> folder and the student had deleted the file: new thing, added",
     m(x=V1), m(x=D, x__y=V2), m(), {"x": [(MKDIR, ADDED, "x")], "x/y": [(COPY, ADDED, "x/y")]}),
    ("exec bit changed in v2 counts as a change", m(s=V1), m(s=f("teacher v1", True)), m(s=V1),
     {"s": [(COPY, UPDATED, "s")]}),
]

NON_ASCII = os.fsdecode(b"caf\xe9")  # not UTF-8: kept byte-exact through surrogateescape


@pytest.mark.parametrize(("case", "base", "new", "home", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_merge_table(case, base, new, home, expected):
    p = plan(base, new, home, version=2)
    for path, want in expected.items():
        assert decisions(p, path) == want, case
    after = p.expected_home(home)
    for path, entry in home.items():  # nothing the student has is removed or changes type
        assert after[path].kind == entry.kind
        if after[path] != entry:
            assert base is not None and base.get(path) == entry, f"{case}: {path} overwritten"


def test_merge_table_non_ascii_names():
    base = Manifest({"données": D, "données/é.ipynb": V1, "日本.txt": V1, f"{NON_ASCII}.py": V1})
    new = Manifest({"données": D, "données/é.ipynb": V2, "日本.txt": V2, f"{NON_ASCII}.py": V2,
                    "données/ñ.csv": V2})
    home = Manifest({"données": D, "données/é.ipynb": V1, "日本.txt": MINE, f"{NON_ASCII}.py": MINE})
    p = plan(base, new, home, version=3)
    assert decisions(p, "données/é.ipynb") == [(COPY, UPDATED, "données/é.ipynb")]
    assert decisions(p, "日本.txt") == [(COPY, STUDENT_MODIFIED, "日本.template-v3.txt")]
    assert decisions(p, f"{NON_ASCII}.py") == [(COPY, STUDENT_MODIFIED, f"{NON_ASCII}.template-v3.py")]
    assert os.fsencode(p.decisions(f"{NON_ASCII}.py")[0].target) == b"caf\xe9.template-v3.py"
    assert decisions(p, "données/ñ.csv") == [(COPY, ADDED, "données/ñ.csv")]


def test_restore_deleted_brings_back_files_and_folders():
    base = m(a=V1, d=D, d__x=V1)
    new = m(a=V2, d=D, d__x=V1, d__y=V2)
    p = plan(base, new, m(), version=2, restore_deleted=True)
    assert decisions(p, "a") == [(COPY, RESTORED, "a")]
    assert decisions(p, "d") == [(MKDIR, RESTORED, "d")]
    assert decisions(p, "d/x") == [(COPY, RESTORED, "d/x")]
    assert decisions(p, "d/y") == [(COPY, ADDED, "d/y")]


def test_folders_come_before_their_contents_and_each_path_is_decided():
    new = m(a=D, a__b=D, a__b__c=V1, **{"a.txt": V1, "a-b": V1})
    p = plan(None, new, m(), version=1)
    targets = [a.target for a in p.writes()]
    assert targets.index("a") < targets.index("a/b") < targets.index("a/b/c")
    assert {a.path for a in p.actions} == set(new)


def test_messages_say_what_happened_and_where_the_copy_is():
    p = plan(m(**{"lab.ipynb": V1}), m(**{"lab.ipynb": V2}), m(**{"lab.ipynb": MINE}), version=2)
    (action,) = p.actions
    assert action.conflict
    assert "your version is kept" in action.message
    assert "lab.template-v2.ipynb" in action.message
    assert p.summary() == {STUDENT_MODIFIED: 1}
    assert p.to_json()["actions"][0]["target"] == "lab.template-v2.ipynb"


# ---------------------------------------------------------------------------------------------
# Names, manifests, marker


@pytest.mark.parametrize(
    ("path", "is_dir", "side"),
    [
        ("nb/lab1.ipynb", False, "nb/lab1.template-v2.ipynb"),
        (".bashrc", False, ".bashrc.template-v2"),
        ("README", False, "README.template-v2"),
        ("archive.tar.gz", False, "archive.tar.template-v2.gz"),
        ("data", True, "data.template-v2"),
        ("data.v1", True, "data.v1.template-v2"),
    ],
)
def test_sidecar_names(path, is_dir, side):
    assert sidecar_name(path, 2, is_dir=is_dir) == side


@pytest.mark.parametrize(
    "bad", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\\b", "a\x00"]
)
def test_unsafe_paths_are_refused(bad):
    with pytest.raises(TemplateRefused):
        check_path(bad)
    with pytest.raises(TemplateRefused):
        Manifest({bad: V1})


def test_bad_versions_are_refused():
    with pytest.raises(ValueError):
        sidecar_name("a", "../x")
    with pytest.raises(ValueError):
        plan(None, m(), m(), version="a/b")


@pytest.mark.parametrize(
    "bad",
    [m(a=LINK), m(a=Entry(SPECIAL)), Manifest({".classhub/template.json": V1}), Manifest({"x/y": V1}),
     m(x=V1, x__y=V1)],
    ids=["symlink", "device", "marker", "orphan", "file-parent"],
)
def test_plan_refuses_malformed_templates(bad):
    with pytest.raises(TemplateRefused):
        plan(None, bad, m(), version=1)


def test_manifest_and_marker_round_trip_byte_exact_names():
    manifest = Manifest({"d": D, "d/é.ipynb": f("x", True), f"{NON_ASCII}": V1})
    assert Manifest.from_json(manifest.to_json()) == manifest
    marker = Marker("course/intro", "3", manifest,
                    {"d/é.ipynb": CachedFile(StatKey(1, 2, 3), "ab")}, "2025-01-01T00:00:00+00:00")
    again = Marker.from_json(marker.to_json().encode("utf-8", "surrogatepass"))
    assert again == marker
    assert os.fsencode(next(p for p in again.manifest if p.startswith("caf"))) == b"caf\xe9"


@pytest.mark.parametrize(
    "text", ["", "{}", "[]", '{"format": "other"}', '{"format": "classhub-template-marker/1"}']
)
def test_damaged_markers_are_value_errors(text):
    with pytest.raises(ValueError):
        Marker.from_json(text)


def test_base_is_the_marker_manifest_only_for_the_same_template():
    marker = Marker("intro", "1", m(a=V1))
    assert base_for(marker, "intro") == m(a=V1)
    assert base_for(marker, "other") is None
    assert base_for(None, "intro") is None


def test_home_paths_include_sidecars_and_sidecar_folders():
    paths = home_paths(m(old=V1), m(d=D, d__e=D, d__e__f=V1), 2)
    for p in ["old", "d", "d/e", "d/e/f", "d.template-v2", "d.template-v2/e", "d.template-v2/e/f",
              "d/e.template-v2", "d/e.template-v2/f", "d/e/f.template-v2"]:
        assert p in paths


# ---------------------------------------------------------------------------------------------
# Properties: never clobber the student's work; re-seeding is idempotent

TEMPLATE_PATHS = ["a", "a/x.txt", "a/y", "b.txt", "b.txt/z", "é", "é/ü.txt"]
CONTENTS = [f("one"), f("two"), f("three"), f("one", True)]
_ALL_DIRS = Manifest(dict.fromkeys(TEMPLATE_PATHS, D))
_ALL_FILES = Manifest(dict.fromkeys(TEMPLATE_PATHS, V1))
HOME_PATHS = sorted(
    set(TEMPLATE_PATHS) | set(home_paths(_ALL_DIRS, _ALL_FILES, 2)) | set(home_paths(None, _ALL_DIRS, 2))
)

_template_entry = st.one_of(st.none(), st.just(D), st.sampled_from(CONTENTS))
_home_entry = st.one_of(st.none(), st.just(D), st.sampled_from([*CONTENTS, f("mine"), LINK, Entry(SPECIAL)]))


def _tree(paths, draws) -> Manifest:
    """Keep only entries whose parent folder is present (a real tree)."""
    kept: dict[str, Entry] = {}
    for path, entry in sorted(zip(paths, draws, strict=True), key=lambda pe: pe[0].split("/")):
        parent = path.rpartition("/")[0]
        if entry is not None and (not parent or kept.get(parent) == D):
            kept[path] = entry
    return Manifest(kept)


templates = st.lists(_template_entry, min_size=len(TEMPLATE_PATHS), max_size=len(TEMPLATE_PATHS)).map(
    lambda draws: _tree(TEMPLATE_PATHS, draws))


@st.composite
def scenarios(draw):
    """(base, new, home): the home is mostly what was seeded last, with some paths changed."""
    base = draw(st.one_of(st.none(), templates))
    new = draw(templates)
    seeded = base if base is not None else new
    draws = []
    for path in HOME_PATHS:
        if path in TEMPLATE_PATHS and path in seeded and draw(st.booleans()):
            draws.append(seeded[path])
        elif path in TEMPLATE_PATHS or draw(st.integers(0, 3)) == 0:  # sidecar paths: mostly free
            draws.append(draw(_home_entry))
        else:
            draws.append(None)
    return base, new, _tree(HOME_PATHS, draws)


@settings(max_examples=400, deadline=None)
@given(scenario=scenarios(), restore=st.booleans())
def test_property_student_work_is_never_overwritten_or_deleted(scenario, restore):
    base, new, home = scenario
    p = plan(base, new, home, version=2, restore_deleted=restore)
    targets = [a.target for a in p.writes()]
    assert len(targets) == len(set(targets)), "two writes to one place"
    for action in p.writes():
        have = home.get(action.target)
        if action.op == MKDIR or action.expect is None:
            assert have is None, f"{action} would write over {have}"
        else:  # an overwrite: only of exactly what was seeded last
            assert action.reason == UPDATED and action.target == action.path
            assert have == action.expect == base[action.path]
    after = p.expected_home(home)
    for path, entry in home.items():
        assert path in after and after[path].kind == entry.kind
        if entry.kind == FILE and (base is None or base.get(path) != entry):
            assert after[path] == entry, f"student's {path} changed"
    assert {a.path for a in p.actions} >= set(new), "a template path without a decision"


@settings(max_examples=400, deadline=None)
@given(scenario=scenarios(), restore=st.booleans())
def test_property_reseeding_is_idempotent(scenario, restore):
    base, new, home = scenario
    first = plan(base, new, home, version=2, restore_deleted=restore)
    after = first.expected_home(home)
    assert plan(base, new, after, version=2, restore_deleted=restore).writes() == []
    # the next start, with the marker now at this version: nothing to do either
    assert plan(new, new, after, version=2).writes() == []
    assert first.expected_home(after) == after


def test_file_count_leaves_folders_out():
    """A template of a folder with 2 files is "2 files" to its teacher, not 3 entries."""
    manifest = m(sub=D, sub__a=V1, sub__b=V2)
    assert (len(manifest), manifest.file_count) == (3, 2)
    assert manifest.total_bytes == V1.size + V2.size
    assert m().file_count == 0
