"""bench/admission.py still runs: a small synthetic trace and a small cycle, last line's format.

The benchmark measures; this test checks the report's shape and that every job finished, never
timing."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parent.parent / "bench" / "admission.py"
LAST_LINE = re.compile(
    r"util_vs_besteffort=(\d+\.\d{3}) delay_vs_strict=(\d+\.\d{3}|inf) "
    r"bigjob_delay_vs_strict=(\d+\.\d{3}|inf) cycle_ms_p50=(\d+\.\d)")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_admission", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_a_small_synthetic_trace_reports_every_policy_and_the_last_line(capsys):
    bench = load_bench()
    result = bench.main(["--synthetic", "3", "--synthetic-nodes", "6", "--synthetic-jobs", "120",
                         "--cycle-nodes", "20", "--cycle-waiting", "100", "--cycle-runs", "3",
                         "--loop-running", "16", "--loop-runs", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("cycle: 20 nodes") and "MiB" in line and "cpu_p50=" in line
               for line in lines)
    assert any(line.startswith("loop: the service's JobLoop on sqlite, 16 jobs running, 16 waiting")
               and "cpu_per_cycle=" in line for line in lines)
    assert LAST_LINE.fullmatch(lines[-1]), lines[-1]
    assert lines[-1] == result["line"]
    for policy in ("classhub", "strict", "besteffort"):
        assert any(line.startswith(f"{policy} ") and "utilisation=" in line for line in lines)
        metrics = result["results"][policy]
        assert metrics.jobs == 120 and 0 < metrics.utilisation <= 1
    assert lines[0].startswith("trace: synthetic seed 3: 6 nodes, 48 GPUs, 120 jobs")


def test_csv_input_reports_bad_rows_with_their_line_and_skips_them(tmp_path, capsys):
    bench = load_bench()
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("name,gpus,gpu_model,rack\nn1,8,NVIDIA-H200,r1\nn2,eight\nn3,4\n")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "name,submit_s,duration_s,replicas,gpus_per_replica,gpu_milli,course,priority,max_runtime_s,x\n"
        "a,0,100,1,1,,cs,0,,ignored\n"
        "b,5,200,2,4,,cs,0,300,\n"
        "c,5,-1,1,1,,cs,0,,\n"
        "d,6,50,1,2,500,cs,0,,\n"
        "e,7,60,1,1,250,ml,1,,\n")
    result = bench.main(["--nodes", str(nodes), "--jobs", str(jobs), "--cycle-nodes", "10",
                         "--cycle-waiting", "20", "--cycle-runs", "2", "--loop-running", "8",
                         "--loop-runs", "1"])
    out = capsys.readouterr().out
    assert f"{nodes}:3: invalid literal for int() with base 10: 'eight'; row skipped" in out
    assert f"{jobs}:4: duration_s must be a positive number; row skipped" in out
    assert f"{jobs}:5: gpu_milli below 1000 is a share of one GPU" in out
    assert result["results"]["classhub"].jobs == 3
    assert len(result["errors"]) == 3


def test_the_benchmark_drives_the_classes_the_service_loop_runs():
    """What the benchmark measures is what runs: the queue, the cluster picture and the cycle
    the service's job loop imports are the very objects bench/admission.py drives, and the
    benchmark's loop figure comes from the loop class itself."""
    import ast

    from hub_ext.service.jobs import loop

    def admission_imports(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("hub_ext.core.admission") for alias in node.names}

    looped = admission_imports(Path(loop.__file__))
    driven = {"QueueManager", "ClusterState", "admission_cycle"}
    assert driven <= looped, "the loop no longer runs these: update the benchmark with it"
    bench = load_bench()
    assert driven <= admission_imports(BENCH)
    for name in driven:
        assert getattr(bench, name) is getattr(loop, name), name
    source = BENCH.read_text()
    assert "from hub_ext.service.jobs.loop import JobLoop" in source


def test_seeds_mode_prints_a_row_per_seed_and_the_worst_figures_last(capsys):
    bench = load_bench()
    result = bench.main(["--seeds", "3-4", "--synthetic-nodes", "6", "--synthetic-jobs", "80",
                         "--cycle-nodes", "20", "--cycle-waiting", "50", "--cycle-runs", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert LAST_LINE.fullmatch(lines[-1]), lines[-1]
    rows = [line.split() for line in lines if re.match(r"^\s+[34]\s+\d", line)]
    assert [row[0] for row in rows] == ["3", "4"]
    worst_big = max(float(row[3]) for row in rows)
    assert f"bigjob_delay_vs_strict={worst_big:.3f}" in lines[-1]
    assert lines[-2] == f"{result['met']} of 2 seeds meet every goal"


def test_a_bad_seed_range_is_refused_with_a_sentence(capsys):
    bench = load_bench()
    with pytest.raises(SystemExit):
        bench.main(["--seeds", "one-twenty"])
    assert "--seeds takes a range such as 1-20" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "says"), [
    (["--depth", "0"], "--depth must be at least 1 (one reservation: EASY backfilling), not 0"),
    (["--starving-reservations", "-1"], "--starving-reservations must be 0 (none) or more, not -1"),
])
def test_a_policy_option_out_of_range_is_refused_with_a_sentence(args, says):
    """The policy's two options, as `c.ClasshubJobs` takes them (docs/admission.md)."""
    bench = load_bench()
    with pytest.raises(SystemExit) as refused:
        bench.main(["--synthetic", "3", *args])
    assert str(refused.value) == says


def test_the_baseline_cache_reuses_a_trace_s_fifo_figures_and_only_that_trace_s(tmp_path, capsys):
    bench = load_bench()
    small = ["--synthetic-nodes", "6", "--synthetic-jobs", "80", "--cycle-nodes", "20",
             "--cycle-waiting", "50", "--cycle-runs", "2", "--baseline-cache", str(tmp_path)]
    first = bench.main(["--seeds", "3", *small])
    assert len(list(tmp_path.glob("*.json"))) == 2  # strict and best-effort of seed 3

    def no_simulation(strict):
        raise AssertionError("a cached baseline was simulated again")

    bench.fifo_policy = no_simulation
    again = bench.main(["--seeds", "3", *small])
    for policy in ("strict", "besteffort"):
        assert again["rows"][0][1]["results"][policy] == first["rows"][0][1]["results"][policy]
    assert again["line"].split()[:3] == first["line"].split()[:3]
    with pytest.raises(AssertionError, match="simulated again"):
        bench.main(["--seeds", "4", *small])  # another trace: not in the cache
    capsys.readouterr()
