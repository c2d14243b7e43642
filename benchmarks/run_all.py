"""Run every benchmark in this folder and report them together: each module's own tables as it
runs, then one combined table (kiln, NumPy and JAX times with ratios), saved as JSON and as a
bar chart of the ratios.

Run: .venv/bin/python benchmarks/run_all.py [--quick] [--out DIR] [--only native,jit]
JAX columns appear when this interpreter imports jax (for example
PYTHONPATH=.:.venv/lib/python3.11/site-packages <jax venv>/bin/python benchmarks/run_all.py).
Each bench_*.py stays runnable alone; here its `report_rows(quick)` is called, which prints the
module's tables and returns rows as made by `_harness.result_row`. Figures only: nothing here
fails on a timing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import pathlib
import platform
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT))

from _harness import format_time  # noqa: E402

SYSTEMS = ("kiln", "numpy", "jax")


def machine() -> dict:
    """What the figures were measured on: CPU model, core count, AVX-512, versions."""
    model, avx512 = platform.processor() or platform.machine(), False
    try:
        cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
        for line in cpuinfo.splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                avx512 = "avx512f" in line.split()
    except OSError:
        pass
    import numpy

    info = {
        "cpu": model,
        "cores": os.cpu_count(),
        "avx512": avx512,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "jax": None,
    }
    if importlib.util.find_spec("jax") is not None:
        import jax

        info["jax"] = jax.__version__
    return info


def collect(names: list[str] | None, quick: bool) -> list[dict]:
    """Every selected bench module's rows, each tagged with its module; a module that fails
    prints its traceback and adds one row saying so, and the others go on."""
    rows = []
    for path in sorted(HERE.glob("bench_*.py")):
        bench = path.stem.removeprefix("bench_")
        if names and bench not in names:
            continue
        print(f"\n##### {path.name}", flush=True)
        start = time.perf_counter()
        try:
            module = importlib.import_module(path.stem)
            module_rows = module.report_rows(quick=quick)
        except Exception as err:  # one broken benchmark must not hide the others' figures
            traceback.print_exc()
            module_rows = [
                {
                    "name": f"{bench}: FAILED",
                    "kiln": None,
                    "numpy": None,
                    "jax": None,
                    "note": f"{type(err).__name__}: {err}"[:200],
                }
            ]
        for row in module_rows:
            row["bench"] = bench
        rows += module_rows
        print(f"({path.name}: {time.perf_counter() - start:.0f} s)", flush=True)
    return rows


def ratio(row: dict, other: str) -> float | None:
    """kiln's time over `other`'s for one row (> 1: kiln is slower), None if either is missing."""
    kiln, theirs = row.get("kiln"), row.get(other)
    return kiln / theirs if kiln and theirs else None


def format_ratio(value: float) -> str:
    """Two decimals, or two significant digits for ratios below 0.1 (0.0012, not 0.00)."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def table_lines(rows: list[dict]) -> list[str]:
    """The combined table as text lines."""
    width = max([len(row["name"]) for row in rows] + [8]) + 2
    header = (
        f"{'workload':{width}s}{'kiln':>12s}{'numpy':>12s}{'jax':>12s}"
        f"{'kiln/numpy':>12s}{'kiln/jax':>10s}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        line = f"{row['name']:{width}s}"
        for system in SYSTEMS:
            seconds = row.get(system)
            line += f"{format_time(seconds) if seconds else '-':>12s}"
        for other, cell in (("numpy", 12), ("jax", 10)):
            value = ratio(row, other)
            line += f"{format_ratio(value):>{cell - 1}s}x" if value else f"{'-':>{cell}s}"
        if row.get("note"):
            line += f"  {row['note']}"
        lines.append(line)
    return lines


def write_chart(rows: list[dict], path: pathlib.Path, against: str) -> bool:
    """A horizontal bar chart of kiln/`against` per row on a log axis (kiln/JAX wherever a run
    has JAX figures, else kiln/NumPy); False (with a note) when matplotlib is not importable."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "matplotlib is not importable: no chart written "
            "(pip install matplotlib into this interpreter to get one)"
        )
        return False
    points = [(row["name"], ratio(row, against)) for row in rows if ratio(row, against)]
    if not points:
        print(f"no row has both kiln and {against} times: no chart written")
        return False
    names = [name for name, _ in points]
    values = [value for _, value in points]
    figure, axes = plt.subplots(figsize=(10, 0.28 * len(points) + 1.4))
    colors = ["#2a7f3f" if value <= 1 else "#b5452c" for value in values]
    axes.barh(range(len(points)), values, color=colors)
    axes.set_xscale("log")
    for position, value in enumerate(values):
        axes.text(value, position, f" {format_ratio(value)}", va="center", fontsize=6)
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_yticks(range(len(points)), names, fontsize=7)
    axes.invert_yaxis()
    label = "JAX CPU" if against == "jax" else "NumPy"
    axes.set_xlabel(f"kiln time / {label} time (log scale; below 1: kiln is faster)")
    axes.set_title(f"kiln / {label}, one run")
    low, high = min(values), max(values)
    axes.set_xlim(min(low / 1.5, 0.5), max(high * 1.5, 2.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    parser.add_argument(
        "--out",
        default=str(ROOT / "out" / "bench"),
        help="folder for results.json and ratios.png (default: out/bench/)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated benchmarks to run, e.g. native,jit (default: every bench_*.py)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        os.environ.setdefault("BENCH_ROUNDS", "2")
    info = machine()
    rows = collect([name for name in args.only.split(",") if name], args.quick)

    print(
        "\n##### combined: times per call (best or median, as each benchmark states); "
        "ratio > 1 means kiln is slower"
    )
    print(
        f"{info['cpu']}, {info['cores']} cores{', AVX-512' if info['avx512'] else ''}; "
        f"NumPy {info['numpy']}; JAX {info['jax'] or 'not importable'}"
        f"{'; --quick sizes' if args.quick else ''}"
    )
    lines = table_lines(rows)
    print("\n".join(lines))

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    results.write_text(
        json.dumps(
            {
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "machine": info,
                "quick": args.quick,
                "units": "seconds per call",
                "rows": [
                    dict(row, kiln_over_numpy=ratio(row, "numpy"), kiln_over_jax=ratio(row, "jax"))
                    for row in rows
                ],
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    (out / "table.txt").write_text("\n".join(lines) + "\n")
    print(f"\nwrote {results}\nwrote {out / 'table.txt'}")
    chart = out / "ratios.png"
    against = "jax" if any(ratio(row, "jax") for row in rows) else "numpy"
    if write_chart(rows, chart, against):
        print(f"wrote {chart}")


if __name__ == "__main__":
    main()
