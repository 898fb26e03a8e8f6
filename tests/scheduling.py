"""How ``make test`` hands the suite's modules to its pytest-xdist workers (``--dist loadfile``).

pytest-xdist's own ``loadfile`` keeps a module's tests on one worker (its module-scoped hub is
started once), but since pytest-xdist 3.7 hands modules out by their number of tests, most first
(``--loadscope-reorder``, on by default): the unit modules with hundreds of parametrized cases
went first, and the hub modules with a few long tests (the quota race: 4 tests, 3-6 minutes) near
the end, where one of them could run alone on one worker while the others had nothing left to do.

This scheduler hands modules out in collection order instead, which ``tests/conftest.py`` makes
slowest first (``SLOWEST_FIRST``): the longest-processing-time-first rule.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadFileScheduling


class SlowestModulesFirst(LoadFileScheduling):
    """``--dist loadfile`` handing modules out in collection order."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self.config.option.loadscopereorder = False  # keep the order tests/conftest.py made
