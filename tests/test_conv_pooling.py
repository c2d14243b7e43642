"""The max/min-pooling derivative impls (select_and_gather_add, select_and_scatter_add)
against a loop over windows that applies XLA's running select(ge(acc, x), acc, x) tap by tap:
overlapping and disjoint windows, padding, dilations, ties and NaN."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kiln.core import rules
from kiln.primitives.windowed import select_and_gather_add_p, select_and_scatter_add_p

SCATTER = rules.impl_rules[select_and_scatter_add_p]
GATHER = rules.impl_rules[select_and_gather_add_p]


def _loop_selection(operand, select_prim, window, strides, padding, base_dilation, dilation):
    """{output index: flat operand index chosen, or None for a window of padding only}."""
    dilated = [(n - 1) * b + 1 for n, b in zip(operand.shape, base_dilation)]
    padded = [n + lo + hi for n, (lo, hi) in zip(dilated, padding)]
    extents = [(w - 1) * d + 1 for w, d in zip(window, dilation)]
    out_shape = [max(0, (p - e) // s + 1) for p, e, s in zip(padded, extents, strides)]
    chosen = {}
    for out in itertools.product(*(range(n) for n in out_shape)):
        best, best_index = None, None
        for tap in itertools.product(*(range(w) for w in window)):
            coords, inside = [], True
            for d in range(operand.ndim):
                position = out[d] * strides[d] + tap[d] * dilation[d] - padding[d][0]
                q, r = divmod(position, base_dilation[d])
                if position < 0 or r or q >= operand.shape[d]:
                    inside = False
                coords.append(q)
            if inside:
                value, index = operand[tuple(coords)], np.ravel_multi_index(coords, operand.shape)
            else:  # padding holds the identity of the selection
                value, index = (-np.inf if select_prim == "ge" else np.inf), None
            if best is None:
                best, best_index = value, index
                continue
            keep = best >= value if select_prim == "ge" else best <= value
            if not keep:
                best, best_index = value, index
        chosen[out] = best_index
    return out_shape, chosen


CASES = {
    "disjoint_2x2": ((2, 6, 6, 3), (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0),) * 4, (1,) * 4, (1,) * 4),
    "overlapping_3x3_stride_2": (
        (2, 7, 7, 2),
        (1, 3, 3, 1),
        (1, 2, 2, 1),
        ((0, 0),) * 4,
        (1,) * 4,
        (1,) * 4,
    ),
    "padded_same": (
        (1, 5, 6, 2),
        (1, 3, 3, 1),
        (1, 2, 2, 1),
        ((0, 0), (1, 1), (1, 1), (0, 0)),
        (1,) * 4,
        (1,) * 4,
    ),
    "window_dilated": (
        (2, 3, 9, 8),
        (1, 1, 2, 2),
        (1, 1, 3, 3),
        ((0, 0),) * 4,
        (1,) * 4,
        (1, 1, 2, 3),
    ),
    "base_dilated": (
        (1, 2, 4, 5),
        (1, 1, 2, 3),
        (1, 1, 1, 2),
        ((0, 0), (0, 0), (1, 0), (0, 1)),
        (1, 1, 2, 2),
        (1,) * 4,
    ),
}


@pytest.mark.parametrize("select_prim", ["ge", "le"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_selection_impls_match_the_window_loop(case, select_prim):
    shape, window, strides, padding, base_dilation, dilation = CASES[case]
    rng = np.random.default_rng(0)
    # Few distinct values, so that windows hold ties; one NaN.
    operand = rng.integers(-2, 3, shape).astype(np.float32)
    operand.reshape(-1)[5] = np.nan
    params = dict(
        window_dimensions=window,
        window_strides=strides,
        padding=padding,
        base_dilation=base_dilation,
        window_dilation=dilation,
    )
    out_shape, chosen = _loop_selection(
        operand, select_prim, window, strides, padding, base_dilation, dilation
    )
    source = rng.standard_normal(out_shape).astype(np.float32)
    expected = np.zeros(operand.size, np.float64)
    for out, index in chosen.items():
        if index is not None:
            expected[index] += source[out]
    got = SCATTER(source, operand, select_prim=select_prim, **params)
    assert got.dtype == np.float32 and got.shape == operand.shape
    np.testing.assert_allclose(got.reshape(-1), expected, rtol=1e-6, atol=1e-6)

    tangent = rng.standard_normal(shape).astype(np.float32)
    gathered = GATHER(tangent, operand, select_prim=select_prim, **params)
    expected_gather = np.zeros(out_shape, np.float32)
    for out, index in chosen.items():
        if index is not None:
            expected_gather[out] = tangent.reshape(-1)[index]
    np.testing.assert_array_equal(gathered, expected_gather)
