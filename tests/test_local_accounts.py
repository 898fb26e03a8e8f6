"""User names become safe folder and account names; homes are private and never symlinks."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub_ext.backends.local import accounts

pytestmark = pytest.mark.unit


@given(st.text(min_size=1, max_size=80))
def test_safe_name_is_safe(name):
    safe = accounts.safe_name(name)
    assert safe and "/" not in safe and safe not in (".", "..")
    assert set(safe) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
    assert len(safe) <= 64


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_distinct_names_get_distinct_folders(a, b):
    if a != b:
        assert accounts.safe_name(a) != accounts.safe_name(b)


@given(st.text(min_size=1, max_size=80))
def test_system_account_names_are_valid_unix_names(name):
    account = accounts.system_account_name(name, "jupyter-")
    assert account.startswith("jupyter-")
    assert len(account) <= 32
    assert accounts._UNIX_NAME.match(account)


def test_hub_name_cannot_become_root():
    assert accounts.system_account_name("root", "jupyter-") == "jupyter-root"
    assert accounts.safe_name("../etc") == "-2e-2e-2fetc"


def test_prepare_home_refuses_a_symlinked_home(tmp_path):
    homes = tmp_path / "homes"
    homes.mkdir()
    (homes / "ann").symlink_to(tmp_path)
    with pytest.raises(accounts.AccountError, match="symlink"):
        accounts.prepare_home(homes, "ann", accounts.current_account(), private=False)


def test_prepare_home_rejects_path_like_folders(tmp_path):
    for bad in ("..", "a/b", ""):
        with pytest.raises(accounts.AccountError):
            accounts.prepare_home(tmp_path, bad, accounts.current_account(), private=False)


def test_private_home_modes(tmp_path):
    tmp_path.chmod(0o755)
    home = accounts.prepare_home(tmp_path / "homes", "ann", accounts.current_account(),
                                 private=True)
    assert os.stat(home).st_mode & 0o777 == 0o700
    assert os.stat(tmp_path / "homes").st_mode & 0o777 == 0o711


def test_missing_account_without_creation_says_what_to_do(tmp_path):
    with pytest.raises(accounts.AccountError, match="--create-system-users"):
        accounts.ensure_system_account("jupyter-no-such-user-x", tmp_path, create=False)


def test_the_grading_account_may_schedule_unless_cron_and_at_deny_it(tmp_path):
    """What the service warns about at start (a crontab a grading notebook left would run between
    jobs): cron lets every account when neither list exists (Debian), at only root; an allow list
    wins over a deny list; an uninstalled tool schedules nothing."""
    installed = {"crontab": "/usr/bin/crontab", "at": "/usr/bin/at"}.get
    assert accounts.may_schedule("classhub-grader", tmp_path, installed) == ["cron"]
    (tmp_path / "at.deny").write_text("daemon\n")
    assert accounts.may_schedule("classhub-grader", tmp_path, installed) == ["cron", "at"]
    (tmp_path / "cron.deny").write_text("nobody\n classhub-grader \n")
    (tmp_path / "at.deny").write_text("classhub-grader\n")
    assert accounts.may_schedule("classhub-grader", tmp_path, installed) == []
    (tmp_path / "cron.allow").write_text("classhub-grader\n")  # the allow list wins
    assert accounts.may_schedule("classhub-grader", tmp_path, installed) == ["cron"]
    assert accounts.may_schedule("classhub-grader", tmp_path, lambda command: None) == []
