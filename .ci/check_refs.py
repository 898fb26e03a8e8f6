#!/usr/bin/env python3
"""Check that what the code and the docs cite exists.

Code comments and docstrings cite the documentation as ``docs/<page>.md, "<heading>"`` (also
``README, "<heading>"``, ``README's "<heading>"``) and ``docs/<page>.md, rule N`` (a numbered
rule of that page, e.g. docs/architecture.md's rules). Markdown pages link each other with
``[text](page.md#anchor)``. Moved text leaves such references dangling without anyone noticing,
so this script fails (exit 1, one line per problem: file, line, what is missing) when a cited
page, heading, rule or anchor does not exist. ``.ci/run`` and ``make docs`` run it;
tests/test_check_refs.py shows it failing on a deliberately broken copy.

Usage: ``python .ci/check_refs.py [ROOT]`` (default: the checkout this file is in).
"""

from __future__ import annotations

import re
import sys
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

#: Where citations are looked for (folders, recursively, and single files).
CODE = ("hub_ext", "spawner", "culler", "tests", "bench", "labextension/src", "labextension/scripts",
        "images", "helm-values", "docs", "README.md", ".ci", "Makefile", "setup.cfg", "pyproject.toml",
        "setup.py", "build_backend.py")
CODE_SUFFIXES = {".py", ".ts", ".tsx", ".js", ".yaml", ".yml", ".cfg", ".toml", ".html", ".sh", ".md", ""}
#: Not ours, or data: never scanned.
SKIP = (".ci/check_refs.py", "tests/data", "tests/upstream_kubespawner", "node_modules", "__pycache__",
        "docs/_build", "docs/reference/_generated")
#: Markdown whose links are checked.
PAGES = ("README.md", "docs")

_PAGE = r"(?P<page>README(?:\.md)?|docs/[\w./-]+?\.md)"
#: ``docs/x.md, "Heading"``, ``README's "Heading"``, ``README "Heading"``, optional ``, rule N``.
CITE = re.compile(_PAGE + r"(?:'s)?(?:,\s*|\s+)(?:section\s+)?[\"“](?P<heading>[^\"”\n]{1,120})[\"”]")
#: ``docs/x.md, rule N`` and ``docs/x.md, rules N and M``.
RULES = re.compile(_PAGE + r"(?:,\s*\"[^\"]*\")?,\s*rules?\s+(?P<rules>\d+(?:(?:\s*,\s*|\s+and\s+)\d+)*)")
#: ``docs/x.md#anchor``.
ANCHORED = re.compile(r"(?P<page>docs/[\w./-]+?\.md)#(?P<anchor>[\w-]+)")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
RULE_ITEM = re.compile(r"^(\d+)\.\s")
#: A comment's leader at the start of a continued line (#, //, *), dropped when lines are joined.
LEADER = re.compile(r"[ \t]*\n[ \t]*(?:(?:#+|//+|\*(?!/))[ \t]?)?[ \t]*")


def headings(page: Path) -> list[str]:
    """The headings of a Markdown page (outside code fences), as written."""
    found, fence = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        elif not fence and (m := HEADING.match(line)):
            found.append(m.group(2))
    return found


def slug(heading: str) -> str:
    """The anchor MyST (myst_heading_anchors) and GitHub give a heading."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def rules(page: Path) -> set[int]:
    """Numbers of the page's numbered list items at the start of a line (its rules)."""
    return {int(m.group(1)) for line in page.read_text(encoding="utf-8").splitlines()
            if (m := RULE_ITEM.match(line))}


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _page(root: Path, name: str) -> Path:
    return root / ("README.md" if name.startswith("README") else name)


def _files(root: Path, names: tuple[str, ...], suffixes: set[str] | None) -> Iterator[Path]:
    for name in names:
        path = root / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for file in candidates:
            rel = file.relative_to(root).as_posix()
            if not file.is_file() or any(part in rel for part in SKIP):
                continue
            if suffixes is None or file.suffix in suffixes or file.name == "Dockerfile":
                yield file


def check_citations(root: Path) -> list[str]:
    """Problems with the citations in the code: a page, heading, rule or anchor that is missing."""
    problems: list[str] = []
    for file in _files(root, CODE, CODE_SUFFIXES):
        try:
            raw = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        rel = file.relative_to(root).as_posix()
        problems += [f"{rel}:{line}: {message}" for line, message in check_text(root, raw)]
    return sorted(set(problems))


def check_text(root: Path, raw: str) -> Iterator[tuple[int, str]]:
    """(line, problem) for each citation in one file's text whose target does not exist."""
    text, line_of = joined(raw)
    for m in CITE.finditer(text):
        page = _page(root, m.group("page"))
        if not page.exists():
            yield line_of(m.start()), f"{m.group('page')} does not exist"
        elif _norm(m.group("heading")) not in {_norm(h) for h in headings(page)}:
            yield line_of(m.start()), f"{m.group('page')} has no heading \"{m.group('heading')}\""
    for m in RULES.finditer(text):
        page = _page(root, m.group("page"))
        if not page.exists():
            yield line_of(m.start()), f"{m.group('page')} does not exist"
            continue
        have = rules(page)
        for number in map(int, re.findall(r"\d+", m.group("rules"))):
            if number not in have:
                yield line_of(m.start()), f"{m.group('page')} has no rule {number}"
    for m in ANCHORED.finditer(text):
        page = root / m.group("page")
        if page.exists() and m.group("anchor") not in {slug(h) for h in headings(page)}:
            yield line_of(m.start()), f"{m.group('page')} has no heading with the anchor #{m.group('anchor')}"
    for m in re.finditer(r"docs/[\w./-]+?\.md\b", text):
        if not (root / m.group(0)).exists():
            yield line_of(m.start()), f"{m.group(0)} does not exist"


def joined(raw: str) -> tuple[str, Callable[[int], int]]:
    """The text with comment lines joined (a citation may go on over a line break, behind a
    comment's leader), and a function from a position in it to the line number in ``raw``."""
    pieces, starts, origins, r, t = [], [], [], 0, 0
    for m in LEADER.finditer(raw):
        pieces.append(raw[r:m.start()] + " ")
        starts.append(t)
        origins.append(r)
        t += m.start() - r + 1
        r = m.end()
    pieces.append(raw[r:])
    starts.append(t)
    origins.append(r)

    def line_of(pos: int) -> int:
        i = bisect_right(starts, pos) - 1
        return raw.count("\n", 0, origins[i] + pos - starts[i]) + 1

    return "".join(pieces), line_of


def check_links(root: Path) -> list[str]:
    """Problems with the Markdown links between pages: a missing file or heading anchor."""
    problems = []
    for file in _files(root, PAGES, {".md"}):
        rel = file.relative_to(root).as_posix()
        fence = False
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith(("```", "~~~")):
                fence = not fence
                continue
            if fence:
                continue
            for m in LINK.finditer(line):
                target = m.group("target")
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                    continue
                path, _, anchor = target.partition("#")
                goal = (file.parent / path).resolve() if path else file
                if not goal.exists():
                    problems.append(f"{rel}:{number}: link to {target}: {path} does not exist")
                elif anchor and goal.suffix == ".md" and anchor not in {slug(h) for h in headings(goal)}:
                    problems.append(f"{rel}:{number}: link to {target}: no heading with that anchor")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]).resolve() if args else Path(__file__).resolve().parent.parent
    problems = check_citations(root) + check_links(root)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_refs: {len(problems)} reference(s) to a page, heading, rule or anchor that "
              "does not exist; fix the citation or the page it names", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
