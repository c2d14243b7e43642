"""Every differentiable row of the op table, differentiated: check_grads at order 2 (which
checks order 1 first), forward and reverse, in float32 and float64, against central finite
differences along random directions. Linear rows also pass the transposition check of
`linear_transpose` against their jvp."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.test_util import check_grads
from tests._testing import make_args, x64_mode
from tests.op_records import ALL_RECORDS

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)


def _case(record):
    """One representative case per row: the first shape set with no empty array, preferring
    one with a non-scalar array; and the row's float (or complex) dtype."""
    dtypes = [np.dtype(d) for d in record.dtypes]
    if F32 in dtypes:
        dtype = F32
    elif C64 in dtypes:
        dtype = C64
    elif any(d.kind == "f" or d.name == "bfloat16" for d in dtypes):
        dtype = F32  # a row listed for half floats only: the same function in float32
    else:
        return None
    candidates = [s for s in record.shapes if all(0 not in shape for shape in s)]
    if not candidates:
        return None
    non_scalar = [s for s in candidates if any(len(shape) for shape in s)]
    if not non_scalar and record.label.split("-")[0] in ("std", "nanstd"):
        return None  # the standard deviation of one number: sqrt at 0, no derivative
    return (non_scalar or candidates)[0], dtype


# Rows kiln, like JAX, does not differentiate: nextafter has no derivative rule; scatter_mul's
# derivative in its updates needs unique indices; and a gather in promise_in_bounds mode with
# out-of-bounds indices (gather_rows, gather_patches) reads clamped windows that its
# transpose, a scatter-add in the same mode, drops.
NOT_DIFFERENTIATED = {
    "lax.nextafter",
    "jnp.nextafter",
    "scatter_mul_rows",
    "scatter_mul_points_clip",
    "gather_rows",
    "gather_patches",
}

CASES = []
for _record in ALL_RECORDS:
    if _record.differentiable and _record.label not in NOT_DIFFERENTIATED:
        _c = _case(_record)
        if _c is not None:
            CASES.append((_record, *_c))

# Tolerances of the finite-difference comparison: float32 differences carry about
# ulp / eps of noise (eps = 1e-3 here), second derivatives more.
TOL = {F32: 3e-2, C64: 3e-2, F64: 1e-5, C128: 1e-5}
EPS = {F32: 1e-3, C64: 1e-3, F64: 1e-6, C128: 1e-6}


def _run(record, shapes, dtype, wide: bool):
    kwargs = record.static_kwargs
    if wide:
        dtype = {F32: F64, C64: C128}[dtype]
    raw = make_args(record, shapes, dtype, seed=1)
    args = [jnp.asarray(a) for a in raw]
    # Integer and bool arguments (indices, predicates, exponents) are held fixed.
    is_float = [np.asarray(a).dtype.kind in "fc" for a in raw]
    fixed = [a for a, f in zip(args, is_float) if not f]

    def f(*float_args):
        floats, ints = iter(float_args), iter(fixed)
        xs = [next(floats) if f else next(ints) for f in is_float]
        return record.fn(*xs, **kwargs)

    float_args = [a for a, f in zip(args, is_float) if f]
    # A row whose output is narrower than its input (a conversion to float32) is compared at
    # the output's precision.
    out_leaves = kiln.tree_util.tree_leaves(f(*float_args))
    narrow = [np.dtype(o.dtype) for o in out_leaves if np.dtype(o.dtype) in (F32, C64)]
    if narrow and dtype in (F64, C128):
        dtype = narrow[0]
    tol = TOL[dtype]
    check_grads(f, float_args, order=2, modes=("fwd", "rev"), atol=tol, rtol=tol, eps=EPS[dtype])


@pytest.mark.parametrize(
    "record,shapes,dtype", CASES, ids=[f"{r.family}-{r.label}" for r, _, _ in CASES]
)
def test_check_grads_float32(record, shapes, dtype):
    _run(record, shapes, dtype, wide=False)


@pytest.mark.parametrize(
    "record,shapes,dtype", CASES, ids=[f"{r.family}-{r.label}" for r, _, _ in CASES]
)
def test_check_grads_float64(record, shapes, dtype):
    with x64_mode(True):
        _run(record, shapes, dtype, wide=True)


def test_every_differentiable_row_is_checked():
    """Every differentiable row is checked, except those listed above and those whose only
    cases are empty arrays (nothing to differentiate)."""
    checked = {id(r) for r, _, _ in CASES}
    missing = [
        r.label
        for r in ALL_RECORDS
        if r.differentiable
        and id(r) not in checked
        and r.label not in NOT_DIFFERENTIATED
        and any(all(0 not in shape for shape in s) for s in r.shapes)
        and not r.label.startswith(("std", "nanstd"))
    ]
    assert not missing, missing
