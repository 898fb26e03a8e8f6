"""hub_ext.core.coursedata: which upload paths and ranges are taken, and what a size means."""

from __future__ import annotations

import pytest

from hub_ext.core.coursedata import (
    FINE,
    NEAR,
    OVER,
    DataPathError,
    Range,
    check_data_path,
    home_level,
    over_limit,
    parse_content_range,
)

pytestmark = pytest.mark.unit


def test_clean_paths_are_their_parts() -> None:
    assert check_data_path("images/train/cat 1.png") == ("images", "train", "cat 1.png")
    assert check_data_path("café/ü.txt") == ("café", "ü.txt")


@pytest.mark.parametrize("path, says", [
    ("", "Name a file"), ("/etc/passwd", "absolute"), ("a/../b", "'..'"), ("a//b", "empty"),
    ("a\\b", "backslash"), ("a\x00b", "NUL"), (".classhub-partial/x", "classhub's own"),
    ("x" * 256, "255 bytes"), ("/".join(["a"] * 65), "64 nested"),
])
def test_refused_paths_say_what_to_change(path: str, says: str) -> None:
    with pytest.raises(DataPathError, match=says):
        check_data_path(path)


def test_content_ranges() -> None:
    assert parse_content_range(None, 5) is None
    assert parse_content_range("bytes 0-4/10", 5) == Range(0, 4, 10)
    assert parse_content_range("bytes 5-9/10", None).completes
    assert parse_content_range("bytes */10", 0) == Range(None, None, 10)
    for header in ("bytes 5-4/10", "bytes 0-10/10", "items 0-1/2", "bytes 0-1"):
        with pytest.raises(DataPathError, match="Content-Range"):
            parse_content_range(header, None)
    with pytest.raises(DataPathError, match="body has 3"):
        parse_content_range("bytes 0-4/10", 3)


def test_limits_and_home_levels() -> None:
    assert over_limit(5, 5, 10, "ml") is None and over_limit(5, 5, None, "ml") is None
    assert "over its limit of 10 B (6 B used)" in over_limit(6, 5, 10, "ml")
    assert home_level(10, None) == FINE and home_level(89, 100) == FINE
    assert home_level(90, 100) == NEAR and home_level(101, 100) == OVER
