"""bench/storm.py still runs: a 4-student storm against both hubs on the fake cluster.

Only the report's shape and the absence of errors are checked: the benchmark measures, it never
asserts timing, and neither does this test.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.cluster

BENCH = Path(__file__).resolve().parent.parent / "bench" / "storm.py"
LAST_LINE = re.compile(r"storm ratio p95_ready=(\d+\.\d{3}) hub_api_p95=(\d+\.\d{3}) errors=(\d+)")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_storm", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
def test_a_small_storm_in_two_rounds_reports_each_round_their_medians_and_no_errors(capsys):
    """``--repeat 2``: a ratio line per round, the second round with the other hub first, and a
    last line whose ratios are the medians of the rounds' ratios."""
    storm = load_bench()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = storm.main(["--users", "4", "--window", "1", "--readers", "2", "--read-seconds", "1",
                         "--repeat", "2"])
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert LAST_LINE.fullmatch(lines[-1]), out
    assert lines[-1] == result["line"]
    assert result["errors"] == 0, out
    starts = re.findall(r"^(stock|classhub): hub up", out, flags=re.M)
    assert starts == ["stock", "classhub", "classhub", "stock"], out
    rounds = re.findall(r"^round (\d) of 2: p95_ready=(\S+) hub_api_p95=(\S+) hub_cpu=(\S+)$", out,
                        flags=re.M)
    assert [r[0] for r in rounds] == ["1", "2"], out
    median = sum(float(r[1]) for r in rounds) / 2  # the median of two is their mean
    assert float(LAST_LINE.fullmatch(lines[-1]).group(1)) == pytest.approx(median, abs=0.002), out
    for tallies in result["rounds"]:
        for kind in ("classhub", "stock"):
            assert len(tallies[kind].ready) == 4, out
            assert tallies[kind].hub_api, out
        readers = tallies["classhub"].readers
        assert readers["api/me"] and readers["api/usage/me"], out
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], \
        "the benchmark left processes behind"

