"""kiln.numpy.fft and the fft primitive: every op-record row eagerly against numpy.fft and
under jit; the primitive's rules (transposes by the dot-product test, batching, dtypes);
argument errors; the frequency grids."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.core.ad_util import UndefinedPrimal
from kiln.core.avals import ShapedArray
from kiln.primitives.fft import FftType, fft, fft_p
from tests._testing import assert_close, check_record_eager, check_record_jit, x64_mode
from tests.op_records_fft import FFT_RECORDS

CASES = [(r, s, d) for r in FFT_RECORDS for s, d in r.cases()]
IDS = [i for r in FFT_RECORDS for i in r.ids()]


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_fft_record_eager(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


@pytest.mark.parametrize("record,shapes,dtype", CASES[::3], ids=IDS[::3])
def test_fft_record_jit(record, shapes, dtype):
    check_record_jit(record, shapes, dtype)


def _inner(a, b):
    """The real inner product <a, b> = Re sum(a * conj(b)) of arrays seen as real vectors."""
    return float(np.real(np.sum(np.asarray(a, np.complex128) * np.conj(np.asarray(b)))))


@pytest.mark.parametrize(
    "fft_type,in_shape,lengths",
    [
        (FftType.FFT, (3, 8), (8,)),
        (FftType.IFFT, (2, 3, 4), (3, 4)),
        (FftType.RFFT, (3, 8), (8,)),
        (FftType.RFFT, (3, 7), (7,)),
        (FftType.RFFT, (2, 4, 6), (4, 6)),
        (FftType.IRFFT, (3, 5), (8,)),
        (FftType.IRFFT, (3, 4), (7,)),
        (FftType.IRFFT, (2, 4, 4), (4, 6)),
    ],
)
def test_transpose_is_adjoint_as_real_linear_map(fft_type, in_shape, lengths):
    """<ct, f(x)> == <f^T(ct), x> for x and ct in the real vector spaces the map acts on
    (complex numbers as pairs of reals): the transpose JAX defines for every fft type."""
    rng = np.random.default_rng(0)
    with x64_mode(True):
        real_in = fft_type == FftType.RFFT
        x = rng.standard_normal(in_shape)
        if not real_in:
            x = x + 1j * rng.standard_normal(in_shape)
        x = jnp.asarray(x)
        y = fft_p.bind(x, fft_type=fft_type, fft_lengths=lengths)
        ct = rng.standard_normal(y.shape)
        if fft_type != FftType.IRFFT:
            ct = ct + 1j * rng.standard_normal(y.shape)
        ct = jnp.asarray(ct)
        (x_ct,) = fft_p.rule("transpose")(
            ct, UndefinedPrimal(x.aval), fft_type=fft_type, fft_lengths=lengths
        )
        assert x_ct.shape == x.shape and x_ct.dtype == x.dtype
        # JAX's convention: the cotangent of a complex input is the conjugate of the adjoint's
        # value, so the pairing is Re sum(ct * y) on both sides (no conjugation).
        lhs = float(np.real(np.sum(np.asarray(ct) * np.asarray(y))))
        rhs = float(np.real(np.sum(np.asarray(x_ct) * np.asarray(x))))
        np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


def test_grad_of_power_spectrum_matches_hand_derivation():
    # Parseval: sum |fft(x)|^2 = N sum x^2, whose gradient is 2 N x.
    x = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    g = kiln.grad(lambda v: jnp.sum(jnp.abs(jnp.fft.fft(v)) ** 2))(jnp.asarray(x))
    assert_close(g, 2 * 8 * x, tol=1e-4)


def test_grad_through_rfft_matches_hand_derivation():
    x = np.array([0.125, -1.0, 0.5, 2.0, -0.25, 1.5, 0.0, -0.75], np.float32)
    g = kiln.grad(lambda v: jnp.sum(jnp.abs(jnp.fft.rfft(v)) ** 2))(jnp.asarray(x))
    # Hand derivation: sum_k |X_k|^2 over k = 0..N/2 is x^T M x with M = Re(A^H A); its
    # gradient is 2 M x.
    n = 8
    a = np.exp(-2j * np.pi * np.outer(np.arange(n // 2 + 1), np.arange(n)) / n)
    expected = 2 * np.real(a.conj().T @ a) @ x.astype(np.float64)
    assert_close(g, expected.astype(np.float32), tol=1e-4)


def test_irfft_jvp_and_vjp_of_complex_input():
    rng = np.random.default_rng(2)
    z = jnp.asarray((rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64))
    t = jnp.asarray((rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64))
    out, tangent = kiln.jvp(jnp.fft.irfft, (z,), (t,))
    assert_close(out, np.fft.irfft(np.asarray(z)).astype(np.float32), tol=1e-5)
    assert_close(tangent, np.fft.irfft(np.asarray(t)).astype(np.float32), tol=1e-5)


def test_batching_moves_the_batch_axis_out_of_the_transform():
    x = np.random.default_rng(3).standard_normal((6, 4, 5)).astype(np.float32)
    out = kiln.vmap(lambda v: jnp.fft.rfft2(v), in_axes=2)(jnp.asarray(x))
    expected = np.stack([np.fft.rfft2(x[:, :, i]) for i in range(5)])
    assert_close(out, expected.astype(np.complex64), tol=1e-4)


def test_lax_level_fft_converts_and_checks_dtypes():
    assert fft(jnp.ones(4, jnp.int32), "fft", (4,)).dtype == np.complex64
    assert fft(jnp.ones(4), FftType.RFFT, (4,)).dtype == np.complex64
    assert fft(jnp.ones(4), "IRFFT", (6,)).shape == (6,)
    assert fft(jnp.ones(4), "fft", ()).dtype == np.complex64
    with pytest.raises(ValueError, match="only real valued inputs supported for rfft"):
        fft(jnp.ones(4, jnp.complex64), "rfft", (4,))
    with pytest.raises(ValueError, match="RFFT input must be float32 or float64"):
        fft(jnp.ones(4, jnp.float16), "rfft", (4,))
    with pytest.raises(ValueError, match="Unknown FFT type 'fourier'"):
        fft(jnp.ones(4), "fourier", (4,))
    with pytest.raises(TypeError, match="Unknown FFT type value"):
        fft(jnp.ones(4), 7, (4,))


def test_abstract_eval_errors():
    rule = fft_p.rule("abstract_eval")
    c64 = np.dtype(np.complex64)
    with pytest.raises(ValueError, match="at least as many input dimensions"):
        rule(ShapedArray((4,), c64), fft_type=FftType.FFT, fft_lengths=(2, 4))
    with pytest.raises(ValueError, match="minor dimensions must be equal to fft_lengths"):
        rule(ShapedArray((4,), c64), fft_type=FftType.FFT, fft_lengths=(5,))
    with pytest.raises(ValueError, match="IRFFT input must be complex64 or complex128"):
        rule(ShapedArray((4,), np.dtype(np.float32)), fft_type=FftType.IRFFT, fft_lengths=(6,))


def test_dtypes_follow_jax():
    assert jnp.fft.fft(jnp.ones(4, jnp.float16)).dtype == np.complex64
    assert jnp.fft.irfft(jnp.ones(4, jnp.float16)).dtype == np.float32
    assert jnp.fft.rfft(jnp.ones(4, jnp.int8)).dtype == np.complex64
    with x64_mode(True):
        assert jnp.fft.fft(jnp.ones(4)).dtype == np.complex128
        assert jnp.fft.irfft(jnp.ones(4, jnp.complex128)).dtype == np.float64
        x = np.random.default_rng(0).standard_normal(16)
        assert_close(jnp.fft.rfft(jnp.asarray(x)), np.fft.rfft(x), tol=1e-12)


def test_empty_and_degenerate_lengths():
    assert jnp.fft.fft(jnp.ones((0, 3))).shape == (0, 3)
    assert jnp.fft.irfft(jnp.ones(1, jnp.complex64)).shape == (0,)
    assert jnp.fft.fftn(jnp.ones((2, 3)), axes=()).dtype == np.complex64


def test_argument_errors():
    x = jnp.ones((4, 4))
    with pytest.raises(ValueError, match="Shape should be positive"):
        jnp.fft.fft(x, n=0)
    with pytest.raises(ValueError, match="Shape and axes have different lengths"):
        jnp.fft.fftn(x, s=(4,), axes=(0, 1))
    with pytest.raises(ValueError, match="does not support repeated axes"):
        jnp.fft.fftn(x, axes=(0, 0))
    with pytest.raises(ValueError, match="does not support multiple axes"):
        jnp.fft.fft(x, axis=(0, 1))
    with pytest.raises(ValueError, match="only supports 2 axes"):
        jnp.fft.fft2(jnp.ones((2, 2, 2)), axes=(0, 1, 2))
    with pytest.raises(ValueError, match="Invalid norm value"):
        jnp.fft.fft(x, norm="unitary")
    with pytest.raises(TypeError, match="requires ndarray or scalar"):
        jnp.fft.fft([1.0, 2.0])
    with pytest.raises(ValueError, match="out of bounds"):
        jnp.fft.fft(jnp.ones(()))


@pytest.mark.parametrize("n,d", [(1, 1.0), (5, 1.0), (8, 0.25), (7, 3)])
def test_frequency_grids(n, d):
    assert_close(jnp.fft.fftfreq(n, d), np.fft.fftfreq(n, d).astype(np.float32), tol=1e-6)
    assert_close(jnp.fft.rfftfreq(n, d), np.fft.rfftfreq(n, d).astype(np.float32), tol=1e-6)


def test_frequency_grid_dtypes_and_errors():
    assert jnp.fft.fftfreq(4, dtype=jnp.int32).dtype == np.int32
    assert jnp.fft.rfftfreq(4, dtype=jnp.int32).dtype == np.float32
    assert_close(
        kiln.jit(lambda d: jnp.fft.fftfreq(4, d))(jnp.float32(0.5)),
        np.fft.fftfreq(4, 0.5).astype(np.float32),
    )
    with pytest.raises(ValueError, match="only takes an int"):
        jnp.fft.fftfreq([4])
    with pytest.raises(ValueError, match="only takes a single value"):
        jnp.fft.rfftfreq(4, [1.0])


def test_jaxpr_holds_one_fft_per_transform():
    jaxpr = kiln.make_jaxpr(lambda v: jnp.fft.rfft2(v))(jnp.ones((4, 6)))
    assert str(jaxpr).count("fft[") == 1
    jaxpr = kiln.make_jaxpr(lambda v: jnp.fft.fftn(v))(jnp.ones((2, 2, 2, 2, 2)))
    assert str(jaxpr).count("fft[") == 2
