"""Op-record rows of the linear algebra family: kiln.numpy.linalg and kiln.lax.linalg, checked
against NumPy/SciPy computed in float64 (complex128).

Matrices are drawn well conditioned (`well_conditioned`, `spd`), so that float32 results agree
with the references to a few ulps times a small condition number and finite differences stay
meaningful. Decompositions whose factors are unique only up to signs (eigh, svd) are compared
after fixing the sign of each vector by its first component, the same way on both sides; eig
rows compare sorted eigenvalues and the residual a v - v diag(w), which are unique.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

import kiln.numpy as jnp
from kiln import lax
from tests._testing import OpRecord

F32, C64 = np.dtype(np.float32), np.dtype(np.complex64)
I32 = np.dtype(np.int32)
DTYPES = [F32, C64]
TOL = {F32: 2e-4, C64: 2e-4}


# --- draw kinds ------------------------------------------------------------------------------


def _normal(shape, dtype, rng):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x


def well_conditioned(shape, dtype, rng):
    """Square matrices I * 2.5 + noise of spectral radius about 1: condition number < 10."""
    n = shape[-1]
    x = _normal(shape, dtype, rng) / np.sqrt(max(n, 1)) * 0.7 + 2.5 * np.eye(n)
    return np.asarray(x).astype(dtype)


def spd(shape, dtype, rng):
    """Hermitian positive-definite matrices x x^H / n + I."""
    n = shape[-1]
    x = _normal(shape, dtype, rng)
    a = x @ np.conj(np.swapaxes(x, -1, -2)) / max(n, 1) + np.eye(n)
    return np.asarray(a).astype(dtype)


def rank_two(shape, dtype, rng):
    """Matrices of rank min(2, m, n)."""
    left = _normal(shape[:-1] + (2,), dtype, rng)
    right = _normal(shape[:-2] + (2, shape[-1]), dtype, rng)
    return np.asarray(left @ right).astype(dtype)


def pivots_of(size: int):
    """LAPACK-style row swaps for `size` rows: pivot i is in [i, size)."""

    def draw(shape, dtype, rng):
        k = shape[-1]
        low = np.arange(k)
        return (low + rng.integers(0, size - low, shape)).astype(dtype)

    return draw


# --- references ------------------------------------------------------------------------------


def wide(x):
    x = np.asarray(x)
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _hermitian(a):
    return (a + np.conj(np.swapaxes(a, -1, -2))) / 2


def _fix_signs(v, *others_rows):
    """Each column of v scaled by the sign (phase) of its first entry; the rows of each matrix
    in others_rows by the same (conjugate) factor."""
    first = v[..., :1, :]
    phase = np.where(np.abs(first) > 0, first / np.where(first == 0, 1, np.abs(first)), 1)
    phase = np.conj(phase)
    out = [v * phase]
    for rows in others_rows:
        out.append(rows * np.swapaxes(np.conj(phase), -1, -2))
    return out


def _kiln_fix_signs(v, *others_rows):
    first = v[..., :1, :]
    magnitude = jnp.abs(first)
    safe = jnp.where(magnitude > 0, magnitude, 1).astype(v.dtype)
    phase = jnp.where(magnitude > 0, first / safe, jnp.ones((), v.dtype))
    phase = jnp.conj(phase) if jnp.iscomplexobj(v) else phase
    out = [v * phase]
    for rows in others_rows:
        back = jnp.conj(phase) if jnp.iscomplexobj(v) else phase
        out.append(rows * jnp.swapaxes(back, -1, -2))
    return out


def np_eigh(a):
    w, v = np.linalg.eigh(_hermitian(wide(a)))
    return (w, *_fix_signs(v))


def kiln_eigh(a):
    w, v = jnp.linalg.eigh(a)
    return (w, *_kiln_fix_signs(v))


def np_svd(a):
    u, s, vh = np.linalg.svd(wide(a), full_matrices=False)
    fixed_u, fixed_vh = _fix_signs(u, vh)
    return fixed_u, s, fixed_vh


def kiln_svd(a):
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    fixed_u, fixed_vh = _kiln_fix_signs(u, vh)
    return fixed_u, s, fixed_vh


def kiln_lax_svd(a):
    u, s, vh = lax.linalg.svd(a, full_matrices=False)
    fixed_u, fixed_vh = _kiln_fix_signs(u, vh)
    return fixed_u, s, fixed_vh


def np_eig(a):
    w = np.linalg.eigvals(wide(a)).astype(np.complex128)
    return np.sort(w), np.zeros(a.shape, np.complex128)


def kiln_eig(a):
    w, v = jnp.linalg.eig(a)
    residual = a.astype(v.dtype) @ v - v * w[..., None, :]
    return jnp.sort(w), residual


def np_triangular_solve(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    a = np.tril(wide(a)) if lower else np.triu(wide(a))
    if unit_diagonal:
        n = a.shape[-1]
        a = a * (1 - np.eye(n)) + np.eye(n)
    op = np.swapaxes(a, -1, -2) if transpose_a else a
    if left_side:
        return np.linalg.solve(op, wide(b))
    return np.swapaxes(
        np.linalg.solve(np.swapaxes(op, -1, -2), np.swapaxes(wide(b), -1, -2)), -1, -2
    )


def _lu_one(a):
    factors, pivots = scipy.linalg.lu_factor(a)
    permutation = np.arange(a.shape[0])
    for i, p in enumerate(pivots):
        permutation[[i, p]] = permutation[[p, i]]
    return factors, pivots.astype(np.int32), permutation.astype(np.int32)


def np_lu(a):
    a = np.asarray(a)
    flat = a.reshape((-1,) + a.shape[-2:])
    parts = [_lu_one(m) for m in flat]
    k = min(a.shape[-2:])
    return (
        np.stack([p[0] for p in parts]).reshape(a.shape),
        np.stack([p[1] for p in parts]).reshape(a.shape[:-2] + (k,)),
        np.stack([p[2] for p in parts]).reshape(a.shape[:-2] + (a.shape[-2],)),
    )


def np_pivots_to_permutation(pivots, size):
    flat = pivots.reshape(-1, pivots.shape[-1])
    out = np.tile(np.arange(size), (flat.shape[0], 1))
    for row, swaps in zip(out, flat):
        for i, p in enumerate(swaps):
            row[[i, p]] = row[[p, i]]
    return out.reshape(pivots.shape[:-1] + (size,)).astype(np.int32)


def np_pivoted_qr(a):
    a = wide(a)
    flat = a.reshape((-1,) + a.shape[-2:])
    parts = [scipy.linalg.qr(m, mode="economic", pivoting=True) for m in flat]
    k = min(a.shape[-2:])
    batch = a.shape[:-2]
    return (
        np.stack([p[0] for p in parts]).reshape(batch + (a.shape[-2], k)),
        np.stack([p[1] for p in parts]).reshape(batch + (k, a.shape[-1])),
        np.stack([p[2] for p in parts]).reshape(batch + (a.shape[-1],)).astype(np.int32),
    )


def tridiagonal(shape, dtype, rng):
    """Diagonals of a diagonally dominant tridiagonal system: d about 4, the others about 1."""
    if len(shape) and shape[-1] >= 1:
        return (4 + _normal(shape, dtype, rng) * 0.5).astype(dtype)
    return _normal(shape, dtype, rng).astype(dtype)


def np_tridiagonal_solve(dl, d, du, b):
    m = d.shape[-1]
    a = (
        d[..., :, None] * np.eye(m)
        + dl[..., :, None] * np.eye(m, k=-1)
        + du[..., :, None] * np.eye(m, k=1)
    )
    return np.linalg.solve(wide(a), wide(b))


def np_slogdet(a):
    sign, logdet = np.linalg.slogdet(wide(a))
    return sign, logdet


def np_lstsq(a, b):
    x, resid, _, _ = np.linalg.lstsq(wide(a), wide(b), rcond=None)
    return x, resid


def np_lstsq_rank(a, b):
    # JAX's default cutoff uses the input's epsilon (NumPy's, float64's).
    rcond = np.finfo(np.float32).eps * max(a.shape)
    _, _, rank, s = np.linalg.lstsq(wide(a), wide(b), rcond=rcond)
    return rank, s


def np_tensorsolve(a, b):
    return np.linalg.tensorsolve(wide(a), wide(b))


def _tensor_wc(shape, dtype, rng):
    """A tensor whose (first axes) x (rest) matrix is well conditioned."""
    rows = int(np.prod(shape[:1]))
    return well_conditioned((rows, rows), dtype, rng).reshape(shape)


def _tensor_wc_2(shape, dtype, rng):
    rows = int(np.prod(shape[:2]))
    return well_conditioned((rows, rows), dtype, rng).reshape(shape)


# --- rows ------------------------------------------------------------------------------------


def _row(name, fn, ref, shapes, kind="normal", dtypes=DTYPES, differentiable=True, **kwargs):
    return dict(
        name=name,
        fn=fn,
        ref=ref,
        shapes=shapes,
        dtypes=dtypes,
        kind=kind,
        differentiable=differentiable,
        **kwargs,
    )


def _w(fn):
    """A NumPy reference run in float64 (complex128) on every float argument."""

    def ref(*args, **kwargs):
        return fn(*[wide(a) if np.asarray(a).dtype.kind in "fc" else a for a in args], **kwargs)

    return ref


SQUARE = [((4, 4),), ((2, 3, 3),)]

_ROWS = [
    # kiln.numpy.linalg
    _row("linalg.cholesky", jnp.linalg.cholesky, _w(np.linalg.cholesky), SQUARE, spd),
    _row(
        "linalg.cholesky_upper",
        lambda a: jnp.linalg.cholesky(a, upper=True),
        _w(lambda a: np.conj(np.swapaxes(np.linalg.cholesky(a), -1, -2))),
        SQUARE,
        spd,
    ),
    _row(
        "linalg.solve",
        jnp.linalg.solve,
        _w(np.linalg.solve),
        [((4, 4), (4,)), ((4, 4), (4, 2)), ((2, 3, 3), (2, 3, 2)), ((2, 3, 3), (3,))],
        (well_conditioned, "normal"),
    ),
    _row(
        "linalg.solve_broadcast",
        jnp.linalg.solve,
        _w(np.linalg.solve),
        [((3, 3), (2, 3, 2))],
        (well_conditioned, "normal"),
    ),
    _row("linalg.inv", jnp.linalg.inv, _w(np.linalg.inv), SQUARE, well_conditioned),
    _row(
        "linalg.det",
        jnp.linalg.det,
        _w(np.linalg.det),
        [((4, 4),), ((2, 5, 5),), ((2, 2),), ((2, 3, 3),), ((1, 1),)],
        well_conditioned,
    ),
    _row(
        "linalg.slogdet",
        jnp.linalg.slogdet,
        np_slogdet,
        [((4, 4),), ((2, 3, 3),), ((2, 2),)],
        well_conditioned,
    ),
    _row(
        "linalg.slogdet_negative",
        jnp.linalg.slogdet,
        np_slogdet,
        [((4, 4),)],
        lambda s, d, r: -well_conditioned(s, d, r),
    ),
    _row(
        "linalg.qr",
        lambda a: tuple(jnp.linalg.qr(a)),
        _w(lambda a: tuple(np.linalg.qr(a))),
        [((4, 3),), ((3, 5),), ((2, 4, 4),)],
    ),
    _row(
        "linalg.qr_complete",
        lambda a: tuple(jnp.linalg.qr(a, mode="complete")),
        _w(lambda a: tuple(np.linalg.qr(a, mode="complete"))),
        [((5, 3),), ((2, 3, 3),)],
    ),
    _row(
        "linalg.qr_r",
        lambda a: jnp.linalg.qr(a, mode="r"),
        _w(lambda a: np.linalg.qr(a, mode="r")),
        [((4, 3),)],
    ),
    _row("linalg.svd", kiln_svd, np_svd, [((4, 3),), ((3, 5),), ((2, 4, 4),)]),
    _row(
        "linalg.svdvals",
        lambda a: jnp.linalg.svd(a, compute_uv=False),
        _w(lambda a: np.linalg.svd(a, compute_uv=False)),
        [((4, 3),), ((2, 3, 5),)],
    ),
    _row(
        "linalg.svd_hermitian",
        lambda a: jnp.linalg.svd(a, hermitian=True, compute_uv=False),
        _w(lambda a: np.linalg.svd(a, hermitian=True, compute_uv=False)),
        [((4, 4),)],
        lambda s, d, r: _hermitian(well_conditioned(s, d, r) - 2.5 * np.eye(s[-1])).astype(d),
    ),
    _row("linalg.eigh", kiln_eigh, np_eigh, SQUARE),
    _row(
        "linalg.eigvalsh",
        jnp.linalg.eigvalsh,
        lambda a: np.linalg.eigvalsh(_hermitian(wide(a))),
        SQUARE,
    ),
    _row("linalg.eig", kiln_eig, np_eig, SQUARE, differentiable=False),
    _row(
        "linalg.eigvals",
        lambda a: jnp.sort(jnp.linalg.eigvals(a)),
        lambda a: np.sort(np.linalg.eigvals(wide(a)).astype(np.complex128)),
        SQUARE,
        differentiable=False,
    ),
    _row(
        "linalg.lstsq",
        lambda a, b: jnp.linalg.lstsq(a, b)[:2],
        np_lstsq,
        [((5, 3), (5,)), ((5, 3), (5, 2))],
    ),
    _row(
        "linalg.lstsq_rank",
        lambda a, b: jnp.linalg.lstsq(a, b)[2:],
        np_lstsq_rank,
        [((5, 3), (5,)), ((4, 4), (4, 2))],
        (rank_two, "normal"),
        differentiable=False,
    ),
    _row(
        "linalg.pinv",
        jnp.linalg.pinv,
        _w(np.linalg.pinv),
        [((4, 3),), ((3, 5),), ((2, 3, 3),)],
    ),
    _row(
        "linalg.matrix_rank",
        jnp.linalg.matrix_rank,
        np.linalg.matrix_rank,
        [((4, 4),), ((2, 3, 5),), ((5,),)],
        rank_two,
        differentiable=False,
    ),
    _row(
        "linalg.matrix_power-n=3",
        lambda a: jnp.linalg.matrix_power(a, 3),
        _w(lambda a: np.linalg.matrix_power(a, 3)),
        SQUARE,
        well_conditioned,
    ),
    _row(
        "linalg.matrix_power-n=-2",
        lambda a: jnp.linalg.matrix_power(a, -2),
        _w(lambda a: np.linalg.matrix_power(a, -2)),
        SQUARE,
        well_conditioned,
    ),
    _row(
        "linalg.matrix_power-n=0",
        lambda a: jnp.linalg.matrix_power(a, 0),
        lambda a: np.linalg.matrix_power(a, 0),
        SQUARE,
        well_conditioned,
        differentiable=False,
    ),
    _row("linalg.cond", jnp.linalg.cond, _w(np.linalg.cond), SQUARE, well_conditioned),
    _row(
        "linalg.cond-p=fro",
        lambda a: jnp.linalg.cond(a, "fro"),
        _w(lambda a: np.linalg.cond(a, "fro")),
        SQUARE,
        well_conditioned,
    ),
    _row(
        "linalg.multi_dot",
        lambda *xs: jnp.linalg.multi_dot(xs),
        _w(lambda *xs: np.linalg.multi_dot(xs)),
        [((3, 4), (4, 5), (5, 2)), ((4,), (4, 5), (5, 3), (3,)), ((2, 6), (6, 2))],
        linear=True,
    ),
    _row(
        "linalg.tensorsolve",
        jnp.linalg.tensorsolve,
        np_tensorsolve,
        [((6, 2, 3), (6,))],
        (_tensor_wc, "normal"),
    ),
    _row(
        "linalg.tensorinv-ind=1",
        lambda a: jnp.linalg.tensorinv(a, ind=1),
        _w(lambda a: np.linalg.tensorinv(a, ind=1)),
        [((6, 2, 3),)],
        _tensor_wc,
    ),
    _row(
        "linalg.tensorinv-ind=2",
        lambda a: jnp.linalg.tensorinv(a, ind=2),
        _w(lambda a: np.linalg.tensorinv(a, ind=2)),
        [((2, 3, 6),)],
        _tensor_wc_2,
    ),
    _row(
        "linalg.norm-ord=2",
        lambda a: jnp.linalg.norm(a, ord=2, axis=(-2, -1)),
        _w(lambda a: np.linalg.norm(a, ord=2, axis=(-2, -1))),
        [((4, 3),), ((2, 3, 3),)],
    ),
    _row(
        "linalg.norm-ord=nuc",
        lambda a: jnp.linalg.norm(a, ord="nuc", axis=(-2, -1)),
        _w(lambda a: np.linalg.norm(a, ord="nuc", axis=(-2, -1))),
        [((4, 3),), ((2, 3, 3),)],
    ),
    _row(
        "linalg.norm-ord=-2",
        lambda a: jnp.linalg.norm(a, ord=-2, axis=(0, 2), keepdims=True),
        _w(lambda a: np.linalg.norm(a, ord=-2, axis=(0, 2), keepdims=True)),
        [((3, 2, 4),)],
    ),
    # kiln.lax.linalg
    _row("lax.linalg.cholesky", lax.linalg.cholesky, _w(np.linalg.cholesky), SQUARE, spd),
    _row(
        "lax.linalg.lu",
        lambda a: lax.linalg.lu(a)[0],
        lambda a: np_lu(wide(a))[0],
        [((4, 4),), ((3, 5),), ((5, 3),), ((2, 3, 3),)],
    ),
    _row(
        "lax.linalg.lu_outputs",
        lax.linalg.lu,
        lambda a: np_lu(wide(a)),
        [((4, 4),), ((3, 5),), ((2, 5, 3),)],
        differentiable=False,
    ),
    _row(
        "lax.linalg.lu_pivots_to_permutation",
        lambda p: lax.linalg.lu_pivots_to_permutation(p, 5),
        lambda p: np_pivots_to_permutation(p, 5),
        [((4,),), ((2, 3, 5),)],
        pivots_of(5),
        dtypes=[I32],
        differentiable=False,
    ),
    _row(
        "lax.linalg.qr",
        lambda a: lax.linalg.qr(a, full_matrices=False),
        _w(lambda a: tuple(np.linalg.qr(a))),
        [((4, 3),), ((2, 3, 5),)],
    ),
    _row(
        "lax.linalg.qr_pivoting",
        lambda a: lax.linalg.qr(a, pivoting=True, full_matrices=False)[:2],
        lambda a: np_pivoted_qr(a)[:2],
        [((5, 3),), ((2, 3, 4),)],
    ),
    _row(
        "lax.linalg.qr_pivots",
        lambda a: lax.linalg.qr(a, pivoting=True, full_matrices=False)[2],
        lambda a: np_pivoted_qr(a)[2],
        [((5, 3),), ((2, 3, 4),)],
        differentiable=False,
    ),
    _row(
        "lax.linalg.tridiagonal_solve",
        lax.linalg.tridiagonal_solve,
        np_tridiagonal_solve,
        [((5,), (5,), (5,), (5, 2)), ((2, 4), (2, 4), (2, 4), (2, 4, 3)), ((1,),) * 3 + ((1, 2),)],
        ("normal", tridiagonal, "normal", "normal"),
    ),
    _row("lax.linalg.svd", kiln_lax_svd, np_svd, [((4, 3),), ((2, 3, 3),)]),
    _row(
        "lax.linalg.eigh",
        lambda a: lax.linalg.eigh(a)[1],
        lambda a: np.linalg.eigvalsh(_hermitian(wide(a))),
        SQUARE,
    ),
    _row(
        "lax.linalg.eig",
        lambda a: jnp.sort(lax.linalg.eig(a)[0]),
        lambda a: np.sort(np.linalg.eigvals(wide(a)).astype(np.complex128)),
        SQUARE,
        differentiable=False,
    ),
]

for _params in (
    dict(left_side=True, lower=True, transpose_a=False, unit_diagonal=False),
    dict(left_side=True, lower=False, transpose_a=True, unit_diagonal=False),
    dict(left_side=False, lower=True, transpose_a=False, unit_diagonal=True),
    dict(left_side=False, lower=False, transpose_a=True, unit_diagonal=False),
):
    _label = "-".join(f"{k}={int(v)}" for k, v in _params.items())
    _b_shape = (3, 2) if _params["left_side"] else (2, 3)
    _ROWS.append(
        _row(
            f"lax.linalg.triangular_solve-{_label}",
            lambda a, b, p=_params: lax.linalg.triangular_solve(a, b, **p),
            lambda a, b, p=_params: np_triangular_solve(a, b, **p),
            [((3, 3), _b_shape), ((2, 3, 3), (2,) + _b_shape)],
            (well_conditioned, "normal"),
        )
    )
_ROWS.append(
    _row(
        "lax.linalg.triangular_solve-vector",
        lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
        lambda a, b: np_triangular_solve(
            a, b[..., None], left_side=True, lower=True, transpose_a=False, unit_diagonal=False
        )[..., 0],
        [((3, 3), (3,)), ((2, 4, 4), (2, 4))],
        (well_conditioned, "normal"),
    )
)


def _record(row: dict) -> OpRecord:
    row = dict(row)
    differentiable = row.pop("differentiable")
    linear = row.pop("linear", False)
    record = OpRecord(
        row.pop("name"),
        row.pop("fn"),
        row.pop("ref"),
        row.pop("shapes"),
        row.pop("dtypes"),
        kind=row.pop("kind"),
        tol=TOL,
    )
    assert not row, row
    record.family = "linalg"
    record.linear = linear
    record.differentiable = differentiable or linear
    return record


LINALG_RECORDS = [_record(row) for row in _ROWS]


from tests.op_records_linalg_more import MORE_ROWS  # noqa: E402

LINALG_RECORDS += [_record(row) for row in MORE_ROWS]
