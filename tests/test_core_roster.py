"""Roster import: what a teacher's CSV becomes (rows, per-line errors) and the membership plan.

The tests feed the files teachers actually upload (Excel's UTF-16 and BOM exports, European ';'
files, LMS exports with quotes and notes) and check what the teacher would see: which students got
in, and for every line that did not, the exact line number and a message naming the fix.
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub_ext.core import roster
from hub_ext.core.roster import (
    Removal,
    RoleChange,
    RosterRow,
    diff_roster,
    parse_roster,
)

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "roster"


def imported(result: roster.RosterResult) -> list[tuple[str, str, int]]:
    return [(r.username, r.role, r.line) for r in result.rows]


def problems(result: roster.RosterResult) -> list[tuple[int, str]]:
    return [(e.line, e.code) for e in result.errors]


def only_error(result: roster.RosterResult) -> roster.RosterError:
    assert len(result.errors) == 1, result.errors
    return result.errors[0]


# ------------------------------------------------------------------------------------------------
# Encodings and line endings


@pytest.mark.parametrize(
    ("encode", "encoding"),
    [
        (lambda t: t.encode("utf-8"), "utf-8"),
        (lambda t: t.encode("utf-8-sig"), "utf-8-sig"),
        (lambda t: t.encode("utf-16"), "utf-16-le"),  # Excel "Unicode Text": BOM + little endian
        (lambda t: b"\xfe\xff" + t.encode("utf-16-be"), "utf-16-be"),
        (lambda t: t.encode("utf-16-le"), "utf-16-le"),  # no BOM: recognised by its NUL bytes
        (lambda t: t.encode("utf-32"), "utf-32-le"),
    ],
)
def test_every_encoding_excel_writes_reads_the_same_names(encode, encoding):
    text = "username,role\n张伟,student\nJosé,ta\nzoë\n"
    result = parse_roster(encode(text))
    assert result.encoding == encoding
    assert imported(result) == [("张伟", "student", 2), ("josé", "ta", 3), ("zoë", "student", 4)]
    assert result.ok


def test_text_input_with_a_bom_is_accepted():
    result = parse_roster("\ufeffusername\nalice\n")
    assert result.has_header and imported(result) == [("alice", "student", 2)]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings_do_not_change_rows_or_line_numbers(newline):
    text = newline.join(["username,role", "alice,ta", "", "bob", "b c", ""])
    result = parse_roster(text.encode())
    assert imported(result) == [("alice", "ta", 2), ("bob", "student", 4)]
    assert problems(result) == [(5, roster.E_INVALID_USERNAME)]


def test_mixed_line_endings_count_like_an_editor():
    result = parse_roster(b"alice\r\nbob\ncarol\rdave")
    assert imported(result) == [
        ("alice", "student", 1),
        ("bob", "student", 2),
        ("carol", "student", 3),
        ("dave", "student", 4),
    ]


def test_bytes_that_are_not_utf8_reject_only_the_lines_they_are_on():
    # A Latin-1 export: "José" is b"Jos\xe9". The other students still get in, and the teacher is
    # told once what to do about the file, and on which line the affected username is.
    result = parse_roster(b"username,name\nalice,Alice\nJos\xe9,Jose\nbob,Ren\xe9e\n")
    assert imported(result) == [("alice", "student", 2), ("bob", "student", 4)]
    assert problems(result) == [(3, roster.E_ENCODING), (3, roster.E_INVALID_USERNAME)]
    assert "CSV UTF-8" in result.errors[0].message
    assert "not valid UTF-8" in result.errors[1].message and "\\xe9" in result.errors[1].message
    assert result.rows[1].display_name == "Ren\ufffde"  # informational text kept, bad byte marked
    # The error's raw value can go to JSON and a database (lone surrogates cannot).
    json.dumps([e.value for e in result.errors], ensure_ascii=False).encode("utf-8")
    assert result.errors[1].value == "Jos\ufffd"


def test_damaged_utf16_is_reported_on_the_username():
    data = "username\nalice\n".encode("utf-16") + b"\x00\xd8" + "b\n".encode("utf-16-le")  # lone surrogate
    result = parse_roster(data)
    assert imported(result) == [("alice", "student", 2)]
    assert problems(result) == [(3, roster.E_INVALID_USERNAME)]
    assert "U+FFFD" in result.errors[0].message


def test_an_excel_workbook_is_refused_with_how_to_save_csv():
    for magic in (b"PK\x03\x04rest-of-zip", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        result = parse_roster(magic)
        error = only_error(result)
        assert result.rows == [] and error.code == roster.E_NOT_CSV and error.line == roster.FILE_LEVEL
        assert "Save As" in error.message and str(error).startswith("file: ")


# ------------------------------------------------------------------------------------------------
# Delimiters, headers, quoting


@pytest.mark.parametrize("delim", [",", ";", "\t"])
def test_delimiter_is_sniffed(delim):
    text = f"Username{delim}Full Name{delim}Role\nalice{delim}Alice L{delim}TA\n"
    result = parse_roster(text)
    assert result.delimiter == delim and result.has_header
    assert imported(result) == [("alice", "ta", 2)] and result.rows[0].display_name == "Alice L"


@pytest.mark.parametrize("delim", [",", ";", "\t"])
def test_delimiter_is_sniffed_without_a_header(delim):
    result = parse_roster(f"alice{delim}ta\nbob{delim}student\ncarol{delim}\n")
    assert result.delimiter == delim and not result.has_header
    assert imported(result) == [("alice", "ta", 1), ("bob", "student", 2), ("carol", "student", 3)]


def test_commas_inside_names_do_not_fool_the_sniffer():
    tab = parse_roster("jdoe\tta\tDoe, John\nasmith\tstudent\tSmith, Ann\n")
    semi = parse_roster("jdoe;ta;Doe, John\nasmith;student;Smith, Ann\n")
    for result in (tab, semi):
        assert imported(result) == [("jdoe", "ta", 1), ("asmith", "student", 2)]
        assert result.rows[0].extras == {"column 3": "Doe, John"}
    assert (tab.delimiter, semi.delimiter) == ("\t", ";")


def test_header_names_are_recognised_case_and_punctuation_insensitively():
    result = parse_roster("E-Mail,ROLE,Display_Name,User Name,Section\nz@x,ta,Zed,ZED,3\n")
    assert result.has_header
    (row,) = result.rows
    assert (row.username, row.role, row.display_name, row.email, row.extras) == (
        "zed",
        "ta",
        "Zed",
        "z@x",
        {"Section": "3"},
    )


@pytest.mark.parametrize("header", ["username", "User", "LOGIN", "userid", "NetID", "用户名"])
def test_username_column_aliases(header):
    result = parse_roster(f"{header},email\nalice,a@x\n")
    assert result.has_header and imported(result) == [("alice", "student", 2)]


def test_name_is_the_username_when_no_username_column_exists():
    result = parse_roster("Name,Role\nalice,ta\n")
    assert imported(result) == [("alice", "ta", 2)] and result.rows[0].display_name is None


def test_email_is_the_username_when_it_is_the_only_identifier():
    # Sites with an OAuth authenticator log users in by e-mail address.
    result = parse_roster("Email,Role\nAlice@Example.edu,student\n")
    assert imported(result) == [("alice@example.edu", "student", 2)]


def test_username_column_wins_over_name_and_email():
    result = parse_roster("name,email,login\nAlice Liddell,alice@x,alice\n")
    row = result.rows[0]
    assert (row.username, row.display_name, row.email) == ("alice", "Alice Liddell", "alice@x")


def test_header_without_any_username_column_is_a_clear_file_error():
    result = parse_roster("role,section\nta,1\n")
    error = only_error(result)
    assert result.rows == [] and error.code == roster.E_NO_USERNAME_COLUMN and error.line == 1
    assert "'username'" in error.message


def test_a_first_row_holding_a_role_word_is_data_not_a_header():
    # "user" is a header name, but "user,student" is a student called "user".
    result = parse_roster("user,student\nbob,ta\n")
    assert not result.has_header
    assert imported(result) == [("user", "student", 1), ("bob", "ta", 2)]


def test_without_a_header_extra_columns_are_kept_by_position():
    result = parse_roster("alice,ta,Alice L,alice@x\n")
    assert result.rows[0].extras == {"column 3": "Alice L", "column 4": "alice@x"}


def test_rows_shorter_than_the_header_default_the_missing_cells():
    result = parse_roster("username,role,email\nalice\nbob,ta\n")
    assert imported(result) == [("alice", "student", 2), ("bob", "ta", 3)]
    assert result.rows[0].email is None


def test_quoted_fields_with_delimiters_quotes_and_newlines():
    text = (
        "username,name,role\n"
        '"alice","Liddell, Alice","ta"\n'
        'bob,"Robert ""Bob"" Tables\n(evening class)",student\n'
        '"carol" ,  "Carol" ,student\n'
        "dave\n"
    )
    result = parse_roster(text)
    assert imported(result) == [
        ("alice", "ta", 2),
        ("bob", "student", 3),
        ("carol", "student", 5),
        ("dave", "student", 6),
    ]
    assert result.rows[0].display_name == "Liddell, Alice"
    assert result.rows[1].display_name == 'Robert "Bob" Tables\n(evening class)'
    assert result.ok


def test_the_line_of_a_username_is_where_it_is_written_even_after_a_quoted_newline():
    result = parse_roster('"\nalice",ta\n')
    assert imported(result) == [("alice", "ta", 2)]


def test_an_unclosed_quote_costs_one_line_not_the_rest_of_the_file():
    result = parse_roster('alice\n"bob,ta\ncarol\ndave\n')
    assert imported(result) == [("alice", "student", 1), ("carol", "student", 3), ("dave", "student", 4)]
    error = only_error(result)
    assert (error.line, error.code, error.value) == (2, roster.E_UNCLOSED_QUOTE, '"bob,ta')
    assert "never closed" in error.message


def test_blank_lines_comments_and_empty_rows_are_skipped_silently():
    text = "# CS101 roster\n\nusername,role\n   \n,,\n , \n# bob,ta\n  # indented note\nalice,ta\n\t\n"
    result = parse_roster(text)
    assert result.has_header and result.ok
    assert imported(result) == [("alice", "ta", 9)]


def test_empty_and_header_only_files_import_nothing_without_errors():
    for data in (b"", "", b"\xef\xbb\xbf", "username,role\r\n", "\n\n# nothing yet\n"):
        result = parse_roster(data)
        assert result.rows == [] and result.errors == []


# ------------------------------------------------------------------------------------------------
# Usernames


def test_usernames_are_stripped_and_lower_cased_like_jupyterhub():
    result = parse_roster("  Alice  ,ta\nBOB\n")
    assert [r.username for r in result.rows] == ["alice", "bob"]


@pytest.mark.parametrize(
    "name", ["张伟", "josé", "zoë", "łukasz", "дмитрий", "ngọc", "محمد", "田中_太郎", "o'brien"]
)
def test_non_ascii_usernames_are_valid(name):
    result = parse_roster(f"username\n{name.upper() if name.isascii() else name}\n".encode())
    assert imported(result) == [(name, "student", 2)]


def test_decomposed_accents_from_a_mac_export_match_the_composed_login():
    # "José" typed on a Mac may be saved as "Jose" + COMBINING ACUTE; the browser sends "José".
    result = parse_roster("Jose\u0301\njosé\n")
    assert imported(result) == [("josé", "student", 1)]
    assert problems(result) == [(2, roster.E_DUPLICATE)]


@pytest.mark.parametrize(
    ("cell", "words"),
    [
        ("a b", ["whitespace", "U+0020", "remove it"]),
        ("a\u00a0b", ["whitespace", "U+00A0"]),
        ('"a\tb"', ["whitespace", "U+0009"]),
        ("a\x07b", ["control character", "U+0007", "delete it"]),
        ("a\x00b", ["control character", "U+0000"]),
        ("alice\u200b", ["invisible character", "U+200B"]),
        ("\u202ealice", ["invisible character", "U+202E"]),
        ("dept/alice", ["'/'", "remove it"]),
        ("x" * 256, ["256 characters", "limit is 255", "shorten"]),
    ],
)
def test_invalid_usernames_are_reported_on_their_line(cell, words):
    result = parse_roster(f"username,role\nalice\n{cell},ta\nbob\n")
    assert imported(result) == [("alice", "student", 2), ("bob", "student", 4)]
    error = only_error(result)
    assert (error.line, error.code) == (3, roster.E_INVALID_USERNAME)
    assert error.value == cell.strip('"')
    for word in words:
        assert word in error.message, error.message
    assert str(error).startswith("line 3: ")


def test_255_characters_is_still_a_valid_username():
    result = parse_roster(("é" * 255) + "\n")
    assert imported(result) == [("é" * 255, "student", 1)]


def test_a_row_with_a_role_but_no_username_says_to_fill_it_in():
    result = parse_roster("username,role\n,ta\n  ,student\n")
    assert problems(result) == [(2, roster.E_INVALID_USERNAME), (3, roster.E_INVALID_USERNAME)]
    assert all("empty" in e.message for e in result.errors)


def test_messages_show_invisible_characters_and_bound_long_values():
    result = parse_roster("a\x1bb\n" + "y" * 1000 + "\n")
    assert "'a\\u001bb'" in result.errors[0].message
    assert len(result.errors[1].message) < 300 and "…" in result.errors[1].message


def test_the_site_normalizer_is_applied():
    def normalize(name: str) -> str:
        return name.lower().removesuffix("@school.edu")

    result = parse_roster("Alice@School.edu\nalice\n", normalize)
    assert imported(result) == [("alice", "student", 1)]
    assert problems(result) == [(2, roster.E_DUPLICATE)]
    assert "(written 'alice')" not in result.errors[0].message


def test_a_normalizer_that_raises_or_misbehaves_costs_only_that_row():
    def picky(name: str) -> str:
        if name.startswith("x"):
            raise ValueError("names may not start with x")
        return None if name == "none" else name  # type: ignore[return-value]

    result = parse_roster("alice\nxavier\nnone\nbob\n", picky)
    assert imported(result) == [("alice", "student", 1), ("bob", "student", 4)]
    assert problems(result) == [(2, roster.E_NORMALIZE_FAILED), (3, roster.E_NORMALIZE_FAILED)]
    assert "names may not start with x" in result.errors[0].message


def test_invalid_characters_are_checked_after_normalization():
    # The hub stores what the normalizer returns, so that is what must be a valid name.
    result = parse_roster("alice\n", lambda name: name + " smith")
    assert problems(result) == [(1, roster.E_INVALID_USERNAME)]


def test_username_problem_is_usable_on_its_own():
    assert roster.username_problem("张伟") is None
    assert "empty" in roster.username_problem("")
    assert "'/'" in roster.username_problem("a/b")


# ------------------------------------------------------------------------------------------------
# Roles


@pytest.mark.parametrize(
    ("cell", "role"),
    [
        ("student", "student"),
        ("STUDENT", "student"),
        (" Students ", "student"),
        ("", "student"),
        ("ta", "ta"),
        ("TA", "ta"),
        ("T.A.", "ta"),
        ("Teaching Assistant", "ta"),
        ("teaching_assistant", "ta"),
        ("助教", "ta"),
        ("学生", "student"),
    ],
)
def test_role_values(cell, role):
    result = parse_roster(f"username,role\nalice,{cell}\n")
    assert imported(result) == [("alice", role, 2)]


@pytest.mark.parametrize("cell", ["teacher", "Teacher", "Instructor", "professor", "老师"])
def test_the_roster_never_makes_teachers(cell):
    result = parse_roster(f"username,role\nalice,{cell}\nbob,student\n")
    assert imported(result) == [("bob", "student", 3)]
    error = only_error(result)
    assert (error.line, error.code, error.value) == (2, roster.E_STAFF_ROLE, cell)
    assert "cannot make teachers" in error.message and "hub admin" in error.message


def test_the_roster_never_makes_admins():
    error = only_error(parse_roster("alice,admin\n"))
    assert error.code == roster.E_STAFF_ROLE and "only hub admins can" in error.message


def test_an_unknown_role_costs_only_that_row():
    result = parse_roster("username,role\nalice,tutor\nbob,ta\n")
    assert imported(result) == [("bob", "ta", 3)]
    error = only_error(result)
    assert (error.line, error.code, error.value) == (2, roster.E_UNKNOWN_ROLE, "tutor")
    assert "'student' or 'ta'" in error.message


def test_roster_rows_cannot_carry_staff_roles():
    with pytest.raises(ValueError, match="student"):
        RosterRow("alice", "teacher", 1)


# ------------------------------------------------------------------------------------------------
# Duplicates


def test_a_repeated_username_is_imported_once_and_reported_where_it_repeats():
    result = parse_roster("username,role\nalice,ta\nbob\nAlice,TA\n")
    assert imported(result) == [("alice", "ta", 2), ("bob", "student", 3)]
    error = only_error(result)
    assert (error.line, error.code, error.value) == (4, roster.E_DUPLICATE, "Alice")
    assert "already on line 2" in error.message and "written 'Alice'" in error.message


def test_a_repeat_with_another_role_says_so_and_the_first_wins():
    result = parse_roster("alice,student\nalice,ta\n")
    assert imported(result) == [("alice", "student", 1)]
    error = only_error(result)
    assert error.code == roster.E_ROLE_CONFLICT and error.line == 2
    assert "already on line 1 as student" in error.message and "says ta" in error.message
    assert "line 1 was kept" in error.message


def test_a_rejected_first_occurrence_does_not_block_a_valid_repeat():
    result = parse_roster("alice,teacher\nalice,ta\n")
    assert imported(result) == [("alice", "ta", 2)]
    assert problems(result) == [(1, roster.E_STAFF_ROLE)]


# ------------------------------------------------------------------------------------------------
# Limits


def test_row_limit_counts_data_rows_only():
    text = "# note\nusername\n\n" + "".join(f"u{i}\n" for i in range(5))
    assert len(parse_roster(text, max_rows=5).rows) == 5
    result = parse_roster(text + "u5\n", max_rows=5)
    error = only_error(result)
    assert result.rows == [] and error.code == roster.E_TOO_MANY_ROWS and error.line == roster.FILE_LEVEL
    assert "more than 5 rows" in error.message and "line 9" in error.message


def test_the_default_row_limit_is_twenty_thousand():
    text = "".join(f"u{i}\n" for i in range(roster.DEFAULT_MAX_ROWS))
    assert len(parse_roster(text).rows) == 20_000
    assert only_error(parse_roster(text + "extra\n")).code == roster.E_TOO_MANY_ROWS


def test_size_limit_applies_to_bytes_and_text():
    for data in (b"a" * 101, "a" * 101, "é" * 51):  # "é" is 2 bytes in UTF-8
        result = parse_roster(data, max_bytes=100)
        error = only_error(result)
        assert result.rows == [] and error.code == roster.E_TOO_LARGE and "limit is 100" in error.message
    assert parse_roster(b"a" * 100, max_bytes=100).ok


def test_errors_are_in_line_order():
    result = parse_roster("a b\nalice,teacher\nx/y\nbob\nbob\n")
    assert [e.line for e in result.errors] == [1, 2, 3, 5]


# ------------------------------------------------------------------------------------------------
# Files as exported by real tools (tests/data/roster)


def test_excel_unicode_text_export():
    result = parse_roster((DATA / "excel-unicode-text.txt").read_bytes())
    assert (result.encoding, result.delimiter, result.has_header) == ("utf-16-le", "\t", True)
    assert imported(result) == [
        ("zhangwei", "student", 2),
        ("josé", "student", 3),
        ("lina", "ta", 4),
        ("ørsted", "student", 7),
    ]
    assert result.rows[0].display_name == "张伟" and result.rows[2].email == "lina@example.edu"
    assert problems(result) == [(5, roster.E_STAFF_ROLE)]


def test_excel_csv_utf8_export_in_a_european_locale():
    result = parse_roster((DATA / "excel-semicolon.csv").read_bytes())
    assert (result.encoding, result.delimiter, result.has_header) == ("utf-8-sig", ";", True)
    assert imported(result) == [("mueller", "student", 2), ("schmidt", "ta", 3), ("weiß", "student", 5)]
    assert result.rows[0].display_name == "Müller, Jörg"
    assert problems(result) == [(6, roster.E_INVALID_USERNAME)]


def test_lms_export_with_quotes_notes_and_extra_columns():
    result = parse_roster((DATA / "lms-export.csv").read_bytes())
    assert imported(result) == [("alice", "student", 3), ("bob", "student", 4), ("carol", "ta", 6)]
    assert result.rows[1].display_name == 'Robert "Bob" Tables'
    assert result.rows[1].extras == {"Section": "B", "Notes": "needs\nextra time"}
    assert problems(result) == [(8, roster.E_INVALID_USERNAME), (9, roster.E_DUPLICATE)]


# ------------------------------------------------------------------------------------------------
# diff_roster


def rows(*pairs: tuple[str, str]) -> list[RosterRow]:
    return [RosterRow(name, role, i + 1) for i, (name, role) in enumerate(pairs)]


def test_plan_adds_changes_and_keeps():
    current = {"alice": "student", "bob": "student", "carol": "ta"}
    plan = diff_roster(current, rows(("alice", "student"), ("bob", "ta"), ("dave", "student")))
    assert [r.username for r in plan.adds] == ["dave"]
    assert plan.role_changes == (RoleChange("bob", "student", "ta", 2),)
    assert plan.unchanged == ("alice",)
    assert plan.removals == ()  # carol stays: without remove_missing an import only adds
    assert plan.applied_to(current) == {"alice": "student", "bob": "ta", "carol": "ta", "dave": "student"}


def test_plan_removes_missing_students_and_tas_only_when_asked():
    current = {"alice": "student", "carol": "ta", "tina": "teacher", "root": "admin"}
    plan = diff_roster(current, rows(("alice", "student")), remove_missing=True)
    assert plan.removals == (Removal("carol", "ta"),)
    assert plan.applied_to(current) == {"alice": "student", "tina": "teacher", "root": "admin"}


def test_plan_never_changes_staff_listed_in_the_roster():
    current = {"tina": "teacher"}
    plan = diff_roster(current, rows(("tina", "student")), remove_missing=True)
    assert plan.empty and plan.protected == ("tina",)
    assert plan.applied_to(current) == current


def test_plan_counts_a_repeated_row_once_first_wins():
    plan = diff_roster({}, rows(("alice", "ta"), ("alice", "student")))
    assert [(r.username, r.role) for r in plan.adds] == [("alice", "ta")]


def test_an_empty_roster_with_remove_missing_removes_every_student_but_no_staff():
    current = {"a": "student", "b": "ta", "t": "teacher"}
    plan = diff_roster(current, [], remove_missing=True)
    assert plan.removals == (Removal("a", "student"), Removal("b", "ta"))


def test_reimporting_the_same_file_is_a_no_op():
    text = (DATA / "lms-export.csv").read_bytes()
    first = diff_roster({"zoe": "student"}, parse_roster(text).rows, remove_missing=True)
    assert not first.empty
    after = first.applied_to({"zoe": "student"})
    for remove_missing in (False, True):
        assert diff_roster(after, parse_roster(text).rows, remove_missing).empty


# ------------------------------------------------------------------------------------------------
# A 500-row roster with everything a real one has


_NON_ASCII = ["张伟", "李娜", "José", "Zoë", "Łukasz", "Ørsted", "Дмитрий", "Ngọc", "محمد", "Müller", "ŞEN"]
_INVALID = ["a b", "dept/x", "x\x07y", "zw\u200bsp", "x" * 300, ""]
_ROLES = {
    "student": "student",
    "": "student",
    "Student": "student",
    "ta": "ta",
    "TA": "ta",
    "Teaching Assistant": "ta",
}


def _build_roster(seed: int) -> tuple[bytes, dict[str, tuple[str, int]], list[tuple[int, str, str]]]:
    """A 500-data-row CSV and what must come out of it: username -> (role, line), and errors."""
    rng = random.Random(seed)
    lines = ["Username,Full Name,Email,Role"]
    expected: dict[str, tuple[str, int]] = {}
    raw_of: dict[str, str] = {}
    errors: list[tuple[int, str, str]] = []
    for n in range(500):
        while rng.random() < 0.08:
            lines.append(rng.choice(["", "   ", "# section B", ",,,"]))
        line = len(lines) + 1
        kind = rng.choices(["ascii", "unicode", "dup", "invalid", "badrole"], [60, 15, 10, 10, 5])[0]
        if kind == "dup" and not expected:
            kind = "ascii"
        role_cell = rng.choice(list(_ROLES))
        if kind == "ascii":
            raw = rng.choice(["s", "S", " s"]) + f"{n:04d}"
        elif kind == "unicode":
            raw = f"{rng.choice(_NON_ASCII)}{n}"
        elif kind == "dup":
            name = rng.choice(sorted(expected))
            raw = raw_of[name].upper() if rng.random() < 0.5 else raw_of[name]
            first_role, first_line = expected[name]
            if rng.random() < 0.5:
                role_cell = {"student": "ta", "ta": "student"}[first_role]
                errors.append((line, roster.E_ROLE_CONFLICT, f"already on line {first_line} as {first_role}"))
            else:
                role_cell = first_role
                errors.append((line, roster.E_DUPLICATE, f"already on line {first_line}"))
        elif kind == "invalid":
            raw = rng.choice(_INVALID)
            errors.append((line, roster.E_INVALID_USERNAME, ""))
        else:
            raw = f"t{n}"
            role_cell = rng.choice(["teacher", "tutor"])
            code = roster.E_STAFF_ROLE if role_cell == "teacher" else roster.E_UNKNOWN_ROLE
            errors.append((line, code, ""))
        display = f'"{raw.strip()}, Jr."' if rng.random() < 0.3 else raw.strip().title()
        lines.append(f"{raw},{display},{raw.strip()}@example.edu,{role_cell}")
        if kind in ("ascii", "unicode"):
            name = raw.strip().lower()
            expected[name] = (_ROLES[role_cell], line)
            raw_of[name] = raw
    return ("\r\n".join(lines) + "\r\n").encode("utf-8-sig"), expected, errors


def test_a_500_row_roster_reports_every_bad_row_on_its_line_and_imports_the_rest():
    data, expected, expected_errors = _build_roster(seed=5)
    assert data.startswith(b"\xef\xbb\xbf") and data.count(b"\r\n") > 500
    assert {kind for _, kind, _ in expected_errors} == {
        roster.E_DUPLICATE,
        roster.E_ROLE_CONFLICT,
        roster.E_INVALID_USERNAME,
        roster.E_STAFF_ROLE,
        roster.E_UNKNOWN_ROLE,
    }
    assert any(not name.isascii() for name in expected)

    result = parse_roster(data)
    assert result.has_header and result.delimiter == ","
    assert {r.username: (r.role, r.line) for r in result.rows} == expected
    assert len(result.rows) == len(expected)
    assert [(e.line, e.code) for e in result.errors] == [(line, code) for line, code, _ in expected_errors]
    for error, (_, _, words) in zip(result.errors, expected_errors, strict=True):
        assert words in error.message
    assert len(result.rows) + len(result.errors) == 500

    text_lines = data.decode("utf-8-sig").split("\r\n")
    for row in result.rows:
        assert row.username in text_lines[row.line - 1].lower()

    plan = diff_roster({}, result.rows, remove_missing=True)
    assert len(plan.adds) == len(expected)
    current = plan.applied_to({})
    assert diff_roster(current, parse_roster(data).rows, remove_missing=True).empty


# ------------------------------------------------------------------------------------------------
# Properties


_FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_invariants(result: roster.RosterResult) -> None:
    names = [r.username for r in result.rows]
    assert len(names) == len(set(names))
    for row in result.rows:
        assert roster.username_problem(row.username) is None
        assert row.role in ("student", "ta") and row.line >= 1
        for text in (row.display_name or "", row.email or "", *row.extras, *row.extras.values()):
            text.encode("utf-8")
    for error in result.errors:
        error.value.encode("utf-8")
        error.message.encode("utf-8")
        assert error.line >= 0 and error.message
    assert [e.line for e in result.errors] == sorted(e.line for e in result.errors)
    assert diff_roster(diff_roster({}, result.rows).applied_to({}), result.rows, True).empty


@_FAST
@given(st.binary(max_size=400))
def test_any_bytes_give_a_result_never_an_exception(data):
    _check_invariants(parse_roster(data))


@_FAST
@given(st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"]), st.binary(max_size=300))
def test_any_bytes_after_a_bom_give_a_result(bom, data):
    _check_invariants(parse_roster(bom + data))


@_FAST
@given(st.text(max_size=300))
def test_any_text_gives_a_result(text):
    _check_invariants(parse_roster(text))


# Characters and tokens that exercise the reader (quotes, delimiters, line breaks, comments, roles,
# invalid characters) without Unicode case/composition corner cases that would blur the comparison.
_CSV_ISH = st.lists(
    st.sampled_from([*'abcXYZ019_-.@张é Ø ,;\t"#\r\n/\x07\u200b', "ta", "TA,", "student", '""']),
    max_size=80,
).map("".join)


@_FAST
@given(_CSV_ISH)
def test_every_row_points_at_a_line_that_holds_its_username(text):
    result = parse_roster(text)
    _check_invariants(result)
    lines = re.split(r"\r\n|\r|\n", text)
    for row in result.rows:
        assert 1 <= row.line <= len(lines)
        # Quotes are CSV syntax ('""' inside a quoted cell is one quote), so compare without them.
        assert row.username.replace('"', "") in lines[row.line - 1].lower().replace('"', "")


_USERNAME = st.text(
    alphabet=st.characters(categories=["Ll", "Lu", "Lo", "Nd"], exclude_characters="İ"),
    min_size=1,
    max_size=12,
)


@_FAST
@given(
    st.lists(st.tuples(_USERNAME, st.sampled_from(["student", "ta"])), max_size=15),
    st.sampled_from([",", ";", "\t"]),
    st.sampled_from(["\n", "\r\n"]),
    st.sampled_from(["utf-8", "utf-8-sig", "utf-16"]),
    st.booleans(),
    st.booleans(),
)
def test_a_written_roster_reads_back_exactly(entries, delim, newline, encoding, header, quote):
    lines = ["username" + delim + "role"] if header else []
    want: dict[str, tuple[str, int]] = {}
    for name, role in entries:
        lines.append((f'"{name}"' if quote else name) + delim + role)
        key = unicodedata.normalize("NFC", name).lower()
        want.setdefault(key, (role, len(lines)))
    result = parse_roster((newline.join(lines) + newline).encode(encoding))
    assert {r.username: (r.role, r.line) for r in result.rows} == want
    assert all(e.code in (roster.E_DUPLICATE, roster.E_ROLE_CONFLICT) for e in result.errors)
    assert len(result.errors) == len(entries) - len(want)
