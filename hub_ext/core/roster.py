"""Course roster import: a teacher's CSV of students and TAs -> checked rows -> a membership plan.

Teachers export rosters from spreadsheets and school systems, so the input is messy: Excel writes
UTF-16 or a UTF-8 BOM, European locales separate with ';', files have titles, blank lines, notes and
stray quotes. This module turns any such file into valid :class:`RosterRow` s plus one
:class:`RosterError` per bad line, with the line number the teacher's editor shows and a message
saying what to change. It never raises on bad input: one broken line must not stop the other 499
students from getting in, and the upload handler should not need a try/except around the parser.

:func:`diff_roster` then compares the rows with the course's current members and returns a
:class:`RosterPlan` (adds, role changes, removals). Importing the same file twice yields an empty
plan, so the service can apply plans blindly and a teacher can re-upload without fear.

The roster never makes teachers or admins: that is a hub admin's decision, so a "teacher" role in
the file is an error, and existing teachers are never demoted or removed by a plan.

Pure logic, standard library only (design rule 1).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from hub_ext.core import roles

#: JupyterHub stores usernames in a 255-character column; longer ones cannot exist.
MAX_USERNAME_LENGTH = 255
#: Default upper bound on data rows: far above any course, low enough to bound the work per upload.
DEFAULT_MAX_ROWS = 20_000
#: Default upper bound on the upload size (5 MiB is ~100 bytes per row for 20,000 rows, with slack).
DEFAULT_MAX_BYTES = 5 * 1024 * 1024
_SURROGATE = re.compile("[\ud800-\udfff]")

#: ``RosterError.line`` of errors about the file as a whole rather than one line.
FILE_LEVEL = 0

#: The roles a roster may give. Teachers and admins are made by hub admins only.
ROSTER_ROLES = (roles.STUDENT, roles.TA)

# Error codes, so the service and UI can group errors without parsing messages.
E_TOO_LARGE = "too-large"
E_TOO_MANY_ROWS = "too-many-rows"
E_NOT_CSV = "not-csv"
E_ENCODING = "encoding"
E_NO_USERNAME_COLUMN = "no-username-column"
E_UNCLOSED_QUOTE = "unclosed-quote"
E_INVALID_USERNAME = "invalid-username"
E_NORMALIZE_FAILED = "normalize-failed"
E_UNKNOWN_ROLE = "unknown-role"
E_STAFF_ROLE = "staff-role"
E_DUPLICATE = "duplicate"
E_ROLE_CONFLICT = "role-conflict"


def default_normalize(username: str) -> str:
    """JupyterHub's default ``Authenticator.normalize_username`` (lower case), after stripping.

    The hub lower-cases every login, so a roster entry "Alice" must become "alice" or the student
    would never match it. Sites whose authenticator maps names differently pass its
    ``normalize_username`` instead.
    """
    return username.strip().lower()


@dataclass(frozen=True)
class RosterRow:
    """One student or TA to be in the course, read from ``line`` of the file.

    ``line`` is the 1-based line where the username is written, so "line 12" in the UI is the line
    the teacher sees in their editor. ``extras`` keeps the other columns (keyed by header text, or
    "column N" without a header) so nothing the teacher uploaded is silently dropped.
    """

    username: str
    role: str
    line: int
    display_name: str | None = None
    email: str | None = None
    extras: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.role not in ROSTER_ROLES:
            raise ValueError(f"a roster row's role must be one of {ROSTER_ROLES}, not {self.role!r}")


@dataclass(frozen=True)
class RosterError:
    """A line that was not imported (or a problem with the whole file when ``line`` is 0).

    ``value`` is the offending cell as written (or the line, for parse errors), so the UI can show
    it next to ``message``, which says what to change. ``code`` is one of the ``E_*`` constants.
    """

    line: int
    value: str
    message: str
    code: str

    def __post_init__(self) -> None:
        # Undecodable bytes survive decoding as lone surrogates; they must not reach JSON or a
        # database, which cannot encode them, so the stored value shows them as U+FFFD.
        for name in ("value", "message"):
            text = getattr(self, name)
            if _SURROGATE.search(text):
                object.__setattr__(self, name, _SURROGATE.sub("\ufffd", text))

    def __str__(self) -> str:
        where = "file" if self.line == FILE_LEVEL else f"line {self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class RosterResult:
    """What :func:`parse_roster` read: valid rows, errors, and how the file was understood.

    ``encoding``, ``delimiter`` and ``has_header`` are reported so the UI can say "read as UTF-16,
    tab separated, with a header row" when a teacher wonders why their columns came out wrong.
    """

    rows: list[RosterRow]
    errors: list[RosterError]
    encoding: str = "utf-8"
    delimiter: str = ","
    has_header: bool = False

    @property
    def ok(self) -> bool:
        """True when every line was imported."""
        return not self.errors


@dataclass(frozen=True)
class RoleChange:
    """A current member whose role the roster changes (student <-> TA)."""

    username: str
    old: str
    new: str
    line: int


@dataclass(frozen=True)
class Removal:
    """A current member who is not in the roster and will be removed (``remove_missing``)."""

    username: str
    role: str


@dataclass(frozen=True)
class RosterPlan:
    """The changes that make the course's membership match the roster.

    ``protected`` lists staff (teachers, admins) that the roster names with a student or TA role:
    the plan leaves them alone, and the UI should say so rather than pretend they were changed.
    """

    adds: tuple[RosterRow, ...] = ()
    role_changes: tuple[RoleChange, ...] = ()
    removals: tuple[Removal, ...] = ()
    unchanged: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """True when applying the plan changes nothing (a re-import of the same file)."""
        return not (self.adds or self.role_changes or self.removals)

    def applied_to(self, current: Mapping[str, str]) -> dict[str, str]:
        """The membership (username -> role) after applying this plan to ``current``."""
        result = dict(current)
        for removal in self.removals:
            result.pop(removal.username, None)
        for change in self.role_changes:
            result[change.username] = change.new
        for row in self.adds:
            result[row.username] = row.role
        return result


# --------------------------------------------------------------------------------------------------
# Vocabulary: header names and role words, compared after _key() folding.


def _key(text: str) -> str:
    """Fold a header or role cell so "E-mail", "e_mail " and "E.Mail" all compare equal."""
    text = unicodedata.normalize("NFKC", text).replace("\ufeff", "").strip().lower()
    return re.sub(r"[\s_.\-]+", " ", text).strip()


_USERNAME_COLUMNS = frozenset(
    {
        "username",
        "user name",
        "user",
        "login",
        "login name",
        "userid",
        "user id",
        "netid",
        "net id",
        "uid",
        "account",
        "account name",
        "hub username",
        "jupyterhub username",
        "benutzername",
        "usuario",
        "用户名",
        "账号",
    }
)
_NAME_COLUMNS = frozenset(
    {"name", "display name", "full name", "fullname", "displayname", "student name", "姓名"}
)
_EMAIL_COLUMNS = frozenset({"email", "e mail", "email address", "e mail address", "mail", "邮箱"})
_ROLE_COLUMNS = frozenset({"role", "roles", "course role", "rolle", "角色"})
_KNOWN_COLUMNS = _USERNAME_COLUMNS | _NAME_COLUMNS | _EMAIL_COLUMNS | _ROLE_COLUMNS

_STUDENT_WORDS = frozenset({"student", "students", "learner", "learners", "学生"})
_TA_WORDS = frozenset({"ta", "tas", "t a", "teaching assistant", "teaching assistants", "assistant", "助教"})
_TEACHER_WORDS = frozenset(
    {"teacher", "teachers", "instructor", "professor", "prof", "lecturer", "owner", "教师", "老师"}
)
_ADMIN_WORDS = frozenset({"admin", "admins", "administrator"})
_ROLE_WORDS = _STUDENT_WORDS | _TA_WORDS | _TEACHER_WORDS | _ADMIN_WORDS

_DELIMITERS = (",", ";", "\t")
_SNIFF_RECORDS = 20
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_LINE_END = "\r\n"


# --------------------------------------------------------------------------------------------------
# Bytes -> text.


def _decode(data: bytes) -> tuple[str, str]:
    """Decode an upload; never raises. Returns (text, encoding name).

    BOMs decide (Excel's "Unicode text" is UTF-16 LE with a BOM; "CSV UTF-8" has a UTF-8 BOM).
    Without one the file is read as UTF-8, and bytes that are not UTF-8 become lone surrogates
    (``surrogateescape``) so that only the lines containing them are rejected, not the file.
    UTF-16 without a BOM is recognised by its NUL bytes, since no sane CSV contains NULs.
    """
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        codec = "utf-32-le" if data[0] == 0xFF else "utf-32-be"
        return data[4:].decode(codec, errors="replace"), codec
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="surrogateescape"), "utf-8-sig"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        codec = "utf-16-le" if data[0] == 0xFF else "utf-16-be"
        return data[2:].decode(codec, errors="replace"), codec
    sample = data[:4096]
    if len(sample) >= 4 and sample.count(0) * 4 >= len(sample):
        odd_nuls, even_nuls = sample[1::2].count(0), sample[0::2].count(0)
        codec = "utf-16-le" if odd_nuls >= even_nuls else "utf-16-be"
        return data.decode(codec, errors="replace"), codec
    return data.decode("utf-8", errors="surrogateescape"), "utf-8"


def _is_undecodable(ch: str) -> bool:
    return "\udc80" <= ch <= "\udcff"


# What surrogateescape makes of bytes that are not UTF-8.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


# --------------------------------------------------------------------------------------------------
# Text -> records. A small CSV reader of our own rather than the csv module, because we need the line
# each cell starts on (for exact line numbers through quoted newlines), recovery from an unclosed
# quote, and no failure modes (csv raises on oversized fields and has no way to resume).

# A cell is (text, line its content starts on); a record is its cells plus the line it starts on.
_Cell = tuple[str, int]


@dataclass
class _Record:
    line: int
    cells: list[_Cell]


@dataclass
class _Unclosed:
    line: int
    text: str


def _split_lines(text: str) -> list[str]:
    """Physical lines without terminators, split on CRLF, CR or LF only (what editors count)."""
    return [m.group().rstrip(_LINE_END) for m in _LINE.finditer(text)]


def _skippable(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _parse_quoted(lines: list[str], start: int, delim: str) -> tuple[list[_Cell], int] | None:
    """Parse the record starting at ``lines[start]`` that contains a quote character.

    Follows Excel/RFC 4180: a field whose content starts with '"' is quoted, '""' inside it is a
    quote, and delimiters and line breaks inside it are content. Text after a closing quote is kept
    (as the csv module does). Returns (cells, index of the next line), or None if the quote is never
    closed.
    """
    cells: list[_Cell] = []
    buf: list[str] = []
    row = start
    cell_begin = start + 1  # line where the current cell begins
    content_line = 0  # line of its first non-space character, 0 while none
    state = 0  # 0 field start, 1 unquoted, 2 quoted, 3 quote seen inside quoted
    while True:
        lineno = row + 1
        for ch in lines[row]:
            if state == 2:
                if ch == '"':
                    state = 3
                else:
                    buf.append(ch)
                    if not content_line and not ch.isspace():
                        content_line = lineno
                continue
            if state == 3:
                if ch == '"':
                    buf.append(ch)
                    content_line = content_line or lineno
                    state = 2
                    continue
                state = 1
            if ch == delim:
                cells.append(("".join(buf), content_line or cell_begin))
                buf, content_line, cell_begin, state = [], 0, lineno, 0
            elif ch == '"' and state == 0:
                buf, content_line, state = [], 0, 2
            else:
                buf.append(ch)
                if not ch.isspace():
                    content_line = content_line or lineno
                    state = 1
        if state != 2:
            cells.append(("".join(buf), content_line or cell_begin))
            return cells, row + 1
        row += 1
        if row == len(lines):
            return None
        buf.append("\n")


def _records(lines: list[str], delim: str, first: int = 0) -> Iterator[_Record | _Unclosed]:
    """Records from ``lines[first:]``, skipping blank lines, all-empty rows and comment lines."""
    i = first
    n = len(lines)
    while i < n:
        line = lines[i]
        if _skippable(line):
            i += 1
            continue
        if '"' not in line:
            if not line.replace(delim, "").strip():
                i += 1
                continue
            yield _Record(i + 1, [(text, i + 1) for text in line.split(delim)])
            i += 1
            continue
        parsed = _parse_quoted(lines, i, delim)
        if parsed is None:
            yield _Unclosed(i + 1, line)
            i += 1  # resume on the next line: one stray quote must not swallow the rest of the file
            continue
        cells, i_next = parsed
        if any(text.strip() for text, _ in cells):
            yield _Record(i + 1, cells)
        i = i_next


def _is_header(cells: list[_Cell]) -> bool:
    """A header names at least one known column and holds no role word.

    So "username,role" is a header but "user,student" is a student called "user". A header-less
    file whose first username is itself a column name ("login", "name") alone on its line is read
    as a header; the row count in the UI shows it, and such usernames are rare.
    """
    keys = {_key(text) for text, _ in cells}
    return bool(keys & _KNOWN_COLUMNS) and not (keys & _ROLE_WORDS)


def _sniff(lines: list[str]) -> str:
    """Pick the delimiter among ',', ';' and tab.

    A header that splits into a known username column decides at once. Otherwise the delimiter that
    splits the most sample records, most consistently, into the most fields wins; ties go to ','.
    A one-column file splits on none of them, and then the choice does not matter.
    """
    best, best_score = ",", (0, False, 0.0)
    for delim in _DELIMITERS:
        sample: list[list[_Cell]] = []
        for record in _records(lines, delim):
            if isinstance(record, _Record):
                sample.append(record.cells)
                if len(sample) >= _SNIFF_RECORDS:
                    break
        if not sample:
            continue
        if (
            len(sample[0]) > 1
            and _is_header(sample[0])
            and any(_key(text) in _USERNAME_COLUMNS for text, _ in sample[0])
        ):
            return delim
        counts = [len(cells) for cells in sample]
        score = (sum(c > 1 for c in counts), len(set(counts)) == 1, sum(counts) / len(counts))
        if score[0] and score > best_score:
            best, best_score = delim, score
    return best


# --------------------------------------------------------------------------------------------------
# Cells -> rows.


def _show(value: str, limit: int = 60) -> str:
    """Quote a value for a message, making invisible characters visible and bounding its length."""
    out = []
    for ch in value[:limit]:
        if _is_undecodable(ch):
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ch.isprintable() and unicodedata.category(ch) != "Cf":
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "'" + "".join(out) + ("…'" if len(value) > limit else "'")


def _codepoint(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def username_problem(username: str) -> str | None:
    """Why ``username`` (already normalized) cannot be a JupyterHub user, or None if it can.

    Non-ASCII letters are fine (JupyterHub escapes names in URLs): "张伟" and "josé" are valid.
    What breaks logins is what the teacher cannot see or the hub cannot route: control and
    invisible characters pasted along with a name, spaces, '/', and over-long names.
    """
    shown = _show(username)
    if not username:
        return "the username is empty; fill it in or delete the line"
    for ch in username:
        if "\ud800" <= ch <= "\udfff":
            return (
                f"username {shown} contains bytes that are not valid UTF-8; save the file as "
                "'CSV UTF-8' (or UTF-16) and upload it again"
            )
        if ch == "\ufffd":
            return (
                f"username {shown} contains U+FFFD, a sign that the file's encoding was damaged; "
                "save the file as 'CSV UTF-8' and upload it again"
            )
        if ch.isspace():
            return (
                f"username {shown} contains whitespace ({_codepoint(ch)}); usernames cannot contain "
                "spaces: remove it or use '-' or '_' instead"
            )
        category = unicodedata.category(ch)
        if category == "Cc":
            return (
                f"username {shown} contains the control character {_codepoint(ch)}; delete it "
                "(it is usually pasted in invisibly along with the name)"
            )
        if category == "Cf":
            return (
                f"username {shown} contains the invisible character {_codepoint(ch)}; delete it "
                "(retype the name if you cannot see it)"
            )
        if ch == "/":
            return f"username {shown} contains '/', which JupyterHub does not allow; remove it"
    if len(username) > MAX_USERNAME_LENGTH:
        return (
            f"username {shown} is {len(username)} characters long; the limit is "
            f"{MAX_USERNAME_LENGTH}: shorten it"
        )
    return None


def _role_of(raw: str) -> tuple[str | None, str, str]:
    """(role, "", "") for a valid role cell, else (None, message, error code)."""
    key = _key(raw)
    if not key or key in _STUDENT_WORDS:
        return roles.STUDENT, "", ""
    if key in _TA_WORDS:
        return roles.TA, "", ""
    shown = _show(raw.strip())
    fix = "delete this line or change the role to 'student' or 'ta'"
    if key in _TEACHER_WORDS:
        message = (
            f"role {shown}: a roster cannot make teachers; ask a hub admin to add them as a teacher "
            f"of the course, and {fix}"
        )
        return None, message, E_STAFF_ROLE
    if key in _ADMIN_WORDS:
        return None, f"role {shown}: a roster cannot make admins, only hub admins can; {fix}", E_STAFF_ROLE
    return (
        None,
        f"unknown role {shown}; use 'student' or 'ta' (or leave it empty for student)",
        E_UNKNOWN_ROLE,
    )


def _clean(value: str) -> str:
    """An informational cell (name, email, extras): stripped, NFC, undecodable bytes as U+FFFD."""
    return _SURROGATE.sub("\ufffd", unicodedata.normalize("NFC", value.strip()))


@dataclass
class _Columns:
    username: int
    role: int | None
    name: int | None
    email: int | None
    extra_names: dict[int, str]


def _columns_from_header(cells: list[_Cell]) -> _Columns | None:
    """Map header cells to columns; None when no column can hold the username."""
    keys = [_key(text) for text, _ in cells]

    def first(names: frozenset[str]) -> int | None:
        return next((i for i, k in enumerate(keys) if k in names), None)

    username = first(_USERNAME_COLUMNS)
    name, email, role = first(_NAME_COLUMNS), first(_EMAIL_COLUMNS), first(_ROLE_COLUMNS)
    if username is None:
        # "Name" alone is most often the login in a hand-made list; failing that, sites that log in
        # with e-mail addresses (OAuth) use the address as the username.
        username = name if name is not None else email
        if username == name:
            name = None
    if username is None:
        return None
    used = {i for i in (username, role, name, email) if i is not None}
    extra_names = {
        i: (_clean(text) or f"column {i + 1}") for i, (text, _) in enumerate(cells) if i not in used
    }
    return _Columns(username, role, name, email, extra_names)


_HEADERLESS = _Columns(username=0, role=1, name=None, email=None, extra_names={})


def _cell(cells: list[_Cell], index: int | None) -> str:
    if index is None or index >= len(cells):
        return ""
    return cells[index][0]


def parse_roster(
    data: bytes | str,
    normalize: Callable[[str], str] = default_normalize,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> RosterResult:
    """Read a roster CSV into valid rows and per-line errors; never raises on any input.

    ``data`` is the uploaded file (bytes, any of the encodings Excel writes) or already-decoded text.
    ``normalize`` turns a cell into a hub username; pass the authenticator's ``normalize_username``
    so roster names match logins. Files over ``max_bytes`` or with more than ``max_rows`` data rows
    are rejected whole (no rows, one file-level error): a half-imported huge file is worse than a
    clear refusal.

    Each valid username is imported once; a repeat is reported on its own line and the first
    occurrence wins. Rows with an invalid username or role are reported and skipped; the rest import.
    """
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        message = (
            f"the file is {size:,} bytes; the limit is {max_bytes:,}. Split it into smaller files "
            "or ask a hub admin to raise the limit"
        )
        return RosterResult([], [_file_error(message, E_TOO_LARGE)])
    errors: list[RosterError] = []
    if isinstance(data, bytes):
        if data.startswith((b"PK\x03\x04", b"\xd0\xcf\x11\xe0")):
            message = (
                "this is an Excel workbook, not a CSV file; in Excel use File > Save As > "
                "'CSV UTF-8 (Comma delimited)' and upload that"
            )
            return RosterResult([], [_file_error(message, E_NOT_CSV)])
        text, encoding = _decode(data)
    else:
        text, encoding = data, "text"
    text = text.removeprefix("\ufeff")
    lines = _split_lines(text)
    delim = _sniff(lines)
    if isinstance(data, bytes):
        bad_line = next((i + 1 for i, line in enumerate(lines) if _UNDECODABLE.search(line)), None)
        if bad_line is not None:
            message = (
                f"the file is not valid UTF-8 (first bad byte on line {bad_line}); save it as "
                "'CSV UTF-8' and upload it again. Rows whose usernames are affected are listed "
                "separately; in other columns the bad bytes were replaced with U+FFFD"
            )
            errors.append(RosterError(bad_line, "", message, E_ENCODING))

    records = _records(lines, delim)
    columns: _Columns | None = None
    has_header = False
    rows: list[RosterRow] = []
    seen: dict[str, RosterRow] = {}
    count = 0
    for record in records:
        if isinstance(record, _Unclosed):
            message = (
                f'a quote (") opened on line {record.line} is never closed, so this line was not '
                "imported; remove the quote or add the closing one"
            )
            errors.append(RosterError(record.line, record.text, message, E_UNCLOSED_QUOTE))
            continue
        if columns is None:
            if _is_header(record.cells):
                has_header = True
                columns = _columns_from_header(record.cells)
                if columns is None:
                    header = delim.join(text for text, _ in record.cells)
                    message = (
                        "the header row has no username column; name the column that holds the "
                        "usernames 'username'"
                    )
                    error = RosterError(record.line, header, message, E_NO_USERNAME_COLUMN)
                    return RosterResult([], [*errors, error], encoding, delim, True)
                continue
            columns = _HEADERLESS
        count += 1
        if count > max_rows:
            message = (
                f"the file has more than {max_rows:,} rows (row {count:,} is on line {record.line}); "
                "split it into smaller files or ask a hub admin to raise the limit"
            )
            return RosterResult([], [_file_error(message, E_TOO_MANY_ROWS)], encoding, delim, has_header)
        row, error = _row(record, columns, normalize, seen)
        if error is not None:
            errors.append(error)
        if row is not None:
            seen[row.username] = row
            rows.append(row)
    errors.sort(key=lambda e: e.line)
    return RosterResult(rows, errors, encoding, delim, has_header)


def _file_error(message: str, code: str) -> RosterError:
    return RosterError(FILE_LEVEL, "", message, code)


def _row(
    record: _Record,
    columns: _Columns,
    normalize: Callable[[str], str],
    seen: Mapping[str, RosterRow],
) -> tuple[RosterRow | None, RosterError | None]:
    """Check one data record: (row to import or None, error to report or None)."""
    cells = record.cells
    raw = _cell(cells, columns.username)
    line = cells[columns.username][1] if columns.username < len(cells) else record.line
    try:
        username = normalize(unicodedata.normalize("NFC", raw.strip()))
    except Exception as exc:  # the caller's normalize may reject a name by raising; report it
        message = f"username {_show(raw.strip())} was rejected by the site's username rules: {exc}"
        return None, RosterError(line, raw, message, E_NORMALIZE_FAILED)
    if not isinstance(username, str):
        message = f"username {_show(raw.strip())} could not be normalized (got {type(username).__name__})"
        return None, RosterError(line, raw, message, E_NORMALIZE_FAILED)
    problem = username_problem(username)
    if problem is not None:
        return None, RosterError(line, raw, problem, E_INVALID_USERNAME)

    raw_role = _cell(cells, columns.role)
    role, problem, code = _role_of(raw_role)
    if role is None:
        return None, RosterError(line, raw_role, problem, code)

    first = seen.get(username)
    if first is not None:
        as_written = "" if raw.strip() == username else f" (written {_show(raw.strip())})"
        if first.role != role:
            message = (
                f"{_show(username)}{as_written} is already on line {first.line} as {first.role}, but "
                f"this line says {role}; line {first.line} was kept: fix or delete one of the two"
            )
            return None, RosterError(line, raw, message, E_ROLE_CONFLICT)
        message = f"{_show(username)}{as_written} is already on line {first.line}; delete this line"
        return None, RosterError(line, raw, message, E_DUPLICATE)

    name = _clean(_cell(cells, columns.name)) or None
    email = _clean(_cell(cells, columns.email)) or None
    used = {i for i in (columns.username, columns.role, columns.name, columns.email) if i is not None}
    extras: dict[str, str] = {}
    for i, (text, _) in enumerate(cells):
        value = _clean(text)
        if i not in used and value:
            extras.setdefault(columns.extra_names.get(i, f"column {i + 1}"), value)
    return RosterRow(username, role, line, name, email, extras), None


# --------------------------------------------------------------------------------------------------
# Rows + current membership -> plan.


def diff_roster(
    current: Mapping[str, str], wanted: Iterable[RosterRow], remove_missing: bool = False
) -> RosterPlan:
    """What to change so the course's students and TAs match ``wanted``.

    ``current`` maps each member's (normalized) username to their role in the course. Members whose
    role is not student or TA (teachers, admins) are never changed or removed: the roster cannot
    make or unmake staff, so listing a teacher as a student puts them in ``protected`` instead.
    Without ``remove_missing`` the import only adds and re-roles, which is the safe default for
    "add these late enrolments"; with it, students and TAs absent from the file are removed.
    A username listed twice in ``wanted`` counts once, first one wins (as in :func:`parse_roster`).
    """
    listed: set[str] = set()
    adds: list[RosterRow] = []
    changes: list[RoleChange] = []
    unchanged: list[str] = []
    protected: list[str] = []
    for row in wanted:
        if row.username in listed:
            continue
        listed.add(row.username)
        have = current.get(row.username)
        if have is None:
            adds.append(row)
        elif have == row.role:
            unchanged.append(row.username)
        elif have in ROSTER_ROLES:
            changes.append(RoleChange(row.username, have, row.role, row.line))
        else:
            protected.append(row.username)
    removals: list[Removal] = []
    if remove_missing:
        removals = [
            Removal(name, role)
            for name, role in sorted(current.items())
            if name not in listed and role in ROSTER_ROLES
        ]
    return RosterPlan(tuple(adds), tuple(changes), tuple(removals), tuple(unchanged), tuple(protected))
