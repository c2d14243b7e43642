"""kiln/examples/tour.py (what `make tour` runs): every section runs, none is skipped, and every
section that carries the document's output (the grad, value_and_grad, has_aux, second
derivative, pytree-gradient and vmap sections among them) prints exactly that text."""

import importlib
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_tour():
    return importlib.import_module("kiln.examples.tour")


def test_tour_runs_every_section_and_matches_the_document():
    result = subprocess.run(
        [sys.executable, "-m", "kiln.examples.tour"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    tour = load_tour()
    checked = [title for title, _, expected, _ in tour.SECTIONS if expected is not None]
    summary = result.stdout.strip().splitlines()[-1]
    assert summary == (
        f"{len(tour.SECTIONS)} sections ({len(checked)} checked against the "
        "document's output), 0 failed, 0 skipped"
    )
    assert result.stdout.count("(matches the document)") == len(checked)
    assert "Traceback" not in result.stdout


def test_the_autodiff_and_vmap_sections_are_checked():
    tour = load_tour()
    expected = {title: text for title, _, text, _ in tour.SECTIONS}
    assert expected["second derivative: grad of grad"] == "d0x: 2.0, d1x: 6.0, d2x: 12.0\n"
    assert (
        "(Array(10., dtype=float32, weak_type=True), Array(2., dtype=float32, "
        "weak_type=True))" in expected["grad and value_and_grad"]
    )
    assert (
        expected["grad of a loss with respect to a pytree of parameters"]
        == "PyTreeDef([{'W': *, 'b': *}, {'W': *, 'b': *}])\n"
    )
    assert "PyTreeDef" in expected["value_and_grad with has_aux"]
    assert expected["vmap: a per-example function made batched"].startswith("[ 1.  5. 25.]")


def test_a_section_printing_other_text_fails(capsys):
    tour = load_tour()
    assert tour.run_section(lambda: print("2.0"), "2.0\n")
    assert not tour.run_section(lambda: print("2.5"), "2.0\n")
    assert not tour.run_section(lambda: 1 / 0, None)
    assert "expected:" in capsys.readouterr().out
