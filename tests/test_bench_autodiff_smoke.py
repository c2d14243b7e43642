"""A tiny-size run of benchmarks/bench_autodiff.py, so the benchmark's code cannot rot: every
workload must trace, differentiate, compile and run under kiln, and the report must print.
Nothing here looks at a timing."""

from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_autodiff  # noqa: E402


def test_every_workload_runs_at_tiny_sizes(capsys):
    rows = bench_autodiff.run(small=True, with_jax=False, step_budget=0.0)
    report = capsys.readouterr().out
    assert len(rows) == len(bench_autodiff.workloads(small=True))
    for row in rows:
        assert "error" not in row["kiln"], f"{row['name']}: {row['kiln']['error']}"
        assert row["kiln"]["first"] > 0 and row["kiln"]["step"] > 0
        assert row["name"] in report
        if "kiln_eqns" in row:
            staged, optimized = row["kiln_eqns"]
            assert 0 < optimized <= staged
    assert "FAILED" not in report


def test_equation_count_descends_into_sub_jaxprs():
    # The scan's body holds 2 equations (mul, add); the scan itself is the third.
    def loss(c, x):
        carry, _ = bench_autodiff.kiln.lax.scan(lambda c, x_t: (c * x_t + 1.0, None), c, x)
        return carry

    jaxpr = bench_autodiff.kiln.make_jaxpr(loss)(np.float32(0.0), np.ones(3, np.float32))
    assert len(jaxpr.jaxpr.eqns) == 1
    assert bench_autodiff.count_equations(jaxpr) == 3
