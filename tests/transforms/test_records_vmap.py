"""Every row of the op table under vmap, against a Python loop over slices: the batch axis first,
last, and mixed with unbatched arguments; nested vmap on a sample of rows."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from tests._testing import assert_close, make_args
from tests.op_records import ALL_RECORDS

B = 3


def _case(record):
    """One case per row: the first shape set with no empty array, preferring a non-scalar one;
    the row's first dtype, float32 where the row has it."""
    dtypes = [np.dtype(d) for d in record.dtypes]
    dtype = np.dtype(np.float32) if np.dtype(np.float32) in dtypes else dtypes[0]
    candidates = [s for s in record.shapes if all(0 not in shape for shape in s)]
    if not candidates:
        return None
    non_scalar = [s for s in candidates if any(len(shape) for shape in s)]
    return (non_scalar or candidates)[0], dtype


CASES = []
for _record in ALL_RECORDS:
    _c = _case(_record)
    if _c is not None:
        CASES.append((_record, *_c))
IDS = [f"{r.family}-{r.label}" for r, _, _ in CASES]


def _examples(record, shapes, dtype):
    """B independent argument sets of one case."""
    return [make_args(record, shapes, dtype, seed=10 + b) for b in range(B)]


def _loop(record, examples, batched):
    """The reference: the row's function on each example, outputs stacked on axis 0. Unbatched
    arguments take the first example's value."""
    outs = []
    for b in range(B):
        args = [
            jnp.asarray(examples[b][i] if batched[i] else examples[0][i])
            for i in range(len(batched))
        ]
        outs.append(record.fn(*args, **record.static_kwargs))
    if isinstance(outs[0], (tuple, list)):
        return [np.stack([np.asarray(o[k]) for o in outs]) for k in range(len(outs[0]))]
    return np.stack([np.asarray(o) for o in outs])


def _check(record, shapes, dtype, axis_of):
    """vmap with each argument's batch axis given by `axis_of(i, rank)` (None: unbatched)."""
    examples = _examples(record, shapes, dtype)
    n = len(shapes)
    in_axes, batched, args = [], [], []
    for i in range(n):
        rank = len(shapes[i])
        axis = axis_of(i, rank)
        in_axes.append(axis)
        batched.append(axis is not None)
        if axis is None:
            args.append(jnp.asarray(examples[0][i]))
        else:
            stacked = np.stack(
                [examples[b][i] for b in range(B)], axis=axis if axis >= 0 else rank + 1 + axis
            )
            args.append(jnp.asarray(stacked))
    if not any(batched):
        return
    kwargs = record.static_kwargs
    actual = kiln.vmap(lambda *xs: record.fn(*xs, **kwargs), in_axes=tuple(in_axes))(*args)
    expected = _loop(record, examples, batched)
    if isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(
                a,
                e.astype(np.asarray(a).dtype),
                record.tol,
                check_dtype=False,
                err_msg=f"{record.label} (vmap in_axes={in_axes})",
            )
    else:
        assert_close(
            actual,
            expected.astype(np.asarray(actual).dtype),
            record.tol,
            check_dtype=False,
            err_msg=f"{record.label} (vmap in_axes={in_axes})",
        )


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_vmap_axis_0(record, shapes, dtype):
    _check(record, shapes, dtype, lambda i, rank: 0)


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_vmap_axis_last(record, shapes, dtype):
    _check(record, shapes, dtype, lambda i, rank: -1)


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_vmap_mixed_with_unbatched(record, shapes, dtype):
    if len(shapes) == 1:
        # one argument: batch it in the middle instead (axis 1 where the rank allows)
        _check(record, shapes, dtype, lambda i, rank: min(1, rank))
        return
    _check(record, shapes, dtype, lambda i, rank: 0 if i == 0 else None)
    _check(record, shapes, dtype, lambda i, rank: None if i == 0 else -1)


NESTED = CASES[::25]


@pytest.mark.parametrize(
    "record,shapes,dtype", NESTED, ids=[f"{r.family}-{r.label}" for r, _, _ in NESTED]
)
def test_nested_vmap(record, shapes, dtype):
    """vmap of vmap over a (2, B) grid of examples equals the doubly nested loop."""
    grid = [
        [make_args(record, shapes, dtype, seed=100 + 10 * i + j) for j in range(B)]
        for i in range(2)
    ]
    args = [
        jnp.asarray(np.stack([np.stack([grid[i][j][k] for j in range(B)]) for i in range(2)]))
        for k in range(len(shapes))
    ]
    kwargs = record.static_kwargs
    fn = kiln.vmap(kiln.vmap(lambda *xs: record.fn(*xs, **kwargs)))
    actual = fn(*args)
    for i in range(2):
        for j in range(B):
            expected = record.fn(*[jnp.asarray(a) for a in grid[i][j]], **kwargs)
            if isinstance(expected, (tuple, list)):
                for a, e in zip(actual, expected):
                    assert_close(
                        np.asarray(a)[i, j],
                        np.asarray(e),
                        record.tol,
                        check_dtype=False,
                        err_msg=record.label,
                    )
            else:
                assert_close(
                    np.asarray(actual)[i, j],
                    np.asarray(expected),
                    record.tol,
                    check_dtype=False,
                    err_msg=record.label,
                )
