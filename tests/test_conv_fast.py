"""The im2col + GEMM convolution engine (kiln/primitives/conv_gemm.py): every layout family,
strides, dilations, padding and odd shapes against the tap-loop NumPy reference and the
whole-matrix reference impl; the backward convolutions on the fast path; equal bits for every
thread count."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import lax
from kiln.core import rules
from kiln.primitives import conv as conv_module
from kiln.primitives import conv_gemm
from kiln.primitives.conv import conv_general_dilated_p
from tests._testing import x64_mode
from tests.op_records_conv import _dilate_pad, conv_reference

IMPL = rules.impl_rules[conv_general_dilated_p]

# (lhs spec, rhs spec, out spec): channels-last, channels-first, batch innermost, and mixes.
LAYOUTS_2D = [
    ("NHWC", "HWIO", "NHWC"),
    ("NCHW", "OIHW", "NCHW"),
    ("HWCN", "HWIO", "NHWC"),
    ("CHWN", "IOHW", "HWNC"),
    ("HNWC", "OHWI", "CNHW"),
]

# name -> (input spatial, kernel, strides, padding, lhs dilation, rhs dilation)
GEOMETRIES_2D = {
    "same": ((7, 6), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1)),
    "strided": ((9, 8), (3, 2), (2, 3), ((0, 1), (2, 0)), (1, 1), (1, 1)),
    "atrous": ((9, 7), (2, 3), (1, 1), ((1, 0), (0, 2)), (1, 1), (2, 2)),
    "lhs_dilated": ((5, 4), (3, 3), (1, 2), ((2, 2), (1, -1)), (2, 1), (1, 1)),
    "negative_pad": ((8, 7), (2, 2), (1, 1), ((-1, 0), (0, -2)), (1, 1), (1, 1)),
    # A kernel larger than the output (a kernel gradient's shape): the per-position family.
    "big_kernel": ((9, 8), (7, 6), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),
    "big_kernel_strided": ((11, 9), (4, 3), (1, 2), ((0, 1), (1, 0)), (1, 1), (3, 2)),
}


def _shape(spec: str, sizes: dict) -> tuple:
    return tuple(sizes[c] for c in spec)


def _operands(layout, spatial, kernel, dtype, rng, batch=3, features=5, out_features=4):
    lhs_spec, rhs_spec, _ = layout
    lhs_sizes = {"N": batch, "C": features, "H": spatial[0], "W": spatial[1]}
    rhs_sizes = {"O": out_features, "I": features, "H": kernel[0], "W": kernel[1]}
    lhs = rng.standard_normal(_shape(lhs_spec, lhs_sizes))
    rhs = rng.standard_normal(_shape(rhs_spec, rhs_sizes))
    if np.dtype(dtype).kind == "i":
        lhs, rhs = np.round(lhs * 3), np.round(rhs * 3)
    return lhs.astype(dtype), rhs.astype(dtype)


def _impl(lhs, rhs, layout, strides, padding, lhs_dilation, rhs_dilation, groups=(1, 1)):
    dnums = lax.conv_dimension_numbers(lhs.shape, rhs.shape, layout)
    return IMPL(
        lhs,
        rhs,
        window_strides=strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dnums,
        feature_group_count=groups[0],
        batch_group_count=groups[1],
        precision=None,
        preferred_element_type=None,
    )


def _reference_impl(lhs, rhs, layout, strides, padding, lhs_dilation, rhs_dilation):
    dnums = lax.conv_dimension_numbers(lhs.shape, rhs.shape, layout)
    return conv_gemm.reference_conv(
        lhs,
        rhs,
        window_strides=strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dnums,
        feature_group_count=1,
        batch_group_count=1,
    )


def _assert_near(actual, expected, dtype):
    expected = np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == np.dtype(dtype)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    tol = {"f": 2e-6 if np.dtype(dtype).itemsize == 4 else 1e-13}.get(np.dtype(dtype).kind, 0)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tol * scale * 10)


@pytest.fixture
def engine_calls(monkeypatch):
    """Counts the convolutions that reach the fast engine."""
    calls = []
    original = conv_gemm.gemm_conv

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(conv_gemm, "gemm_conv", spy)
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", list(GEOMETRIES_2D), ids=list(GEOMETRIES_2D))
@pytest.mark.parametrize("layout", LAYOUTS_2D, ids=["".join(spec) for spec in LAYOUTS_2D])
def test_engine_matches_tap_loop_and_reference_impl(layout, geometry, dtype, engine_calls):
    spatial, kernel, strides, padding, lhs_dilation, rhs_dilation = GEOMETRIES_2D[geometry]
    rng = np.random.default_rng(hash((layout, geometry)) % 2**32)
    lhs, rhs = _operands(layout, spatial, kernel, dtype, rng)
    got = _impl(lhs, rhs, layout, strides, padding, lhs_dilation, rhs_dilation)
    assert len(engine_calls) == 1
    loops = conv_reference(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, layout)
    _assert_near(got, loops, dtype)
    whole = _reference_impl(lhs, rhs, layout, strides, padding, lhs_dilation, rhs_dilation)
    _assert_near(got, whole, dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.complex64])
def test_engine_other_dtypes(dtype, engine_calls):
    layout = ("NHWC", "HWIO", "NHWC")
    rng = np.random.default_rng(1)
    lhs, rhs = _operands(layout, (6, 5), (3, 2), np.float64, rng)
    if np.dtype(dtype).kind == "c":
        lhs = lhs + 1j * np.roll(lhs, 1)
    lhs, rhs = np.round(lhs * 3).astype(dtype), np.round(rhs * 3).astype(dtype)
    args = ((2, 1), ((1, 1), (0, 1)), (1, 1), (1, 2))
    got = _impl(lhs, rhs, layout, *args)
    assert len(engine_calls) == 1
    expected = conv_reference(lhs, rhs, *args, layout)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize(
    "layout,spatial,kernel,strides,padding,rhs_dilation",
    [
        (("NWC", "WIO", "NWC"), (11,), (3,), (2,), ((1, 2),), (2,)),
        (("NCW", "OIW", "NCW"), (10,), (4,), (1,), ((0, 0),), (1,)),
        (("CWN", "WIO", "NWC"), (9,), (8,), (1,), ((0, 1),), (1,)),
        (("NDHWC", "DHWIO", "NDHWC"), (4, 5, 3), (2, 3, 2), (1, 2, 1), ((1, 0),) * 3, (1, 1, 1)),
        (("NCDHW", "OIDHW", "NCDHW"), (5, 4, 4), (3, 2, 2), (2, 1, 1), ((0, 1),) * 3, (1, 2, 1)),
    ],
    ids=["1d_nwc", "1d_ncw", "1d_batch_minor", "3d_ndhwc", "3d_ncdhw"],
)
def test_engine_in_one_and_three_dimensions(
    layout, spatial, kernel, strides, padding, rhs_dilation, engine_calls
):
    rng = np.random.default_rng(2)
    chars = layout[2].replace("N", "").replace("C", "")
    lhs_sizes = {"N": 2, "C": 3, **dict(zip(chars, spatial))}
    rhs_sizes = {"O": 5, "I": 3, **dict(zip(chars, kernel))}
    lhs = rng.standard_normal(_shape(layout[0], lhs_sizes))
    rhs = rng.standard_normal(_shape(layout[1], rhs_sizes))
    ones = (1,) * len(spatial)
    got = _impl(lhs, rhs, layout, strides, padding, ones, rhs_dilation)
    assert len(engine_calls) == 1
    expected = conv_reference(lhs, rhs, strides, padding, ones, rhs_dilation, layout)
    _assert_near(got, expected, np.float64)


@pytest.mark.parametrize(
    "layout,groups",
    [
        (("NHWC", "HWIO", "NHWC"), (2, 1)),
        (("NHWC", "HWIO", "NHWC"), (6, 1)),  # depthwise, channel multiplier 2
        (("NCHW", "OIHW", "NCHW"), (3, 1)),
        (("NCHW", "OIHW", "NCHW"), (1, 2)),
        (("HWCN", "HWIO", "NHWC"), (1, 3)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_grouped_convolutions_match_the_tap_loop(layout, groups, dtype):
    rng = np.random.default_rng(3)
    feature_groups, batch_groups = groups
    features = 6
    lhs_sizes = {"N": 6, "C": features, "H": 7, "W": 5}
    rhs_sizes = {"O": 12, "I": features // feature_groups, "H": 3, "W": 2}
    lhs = rng.standard_normal(_shape(layout[0], lhs_sizes)).astype(dtype)
    rhs = rng.standard_normal(_shape(layout[1], rhs_sizes)).astype(dtype)
    args = ((2, 1), ((1, 1), (0, 1)), (1, 1), (1, 2))
    got = _impl(lhs, rhs, layout, *args, groups=groups)
    expected = conv_reference(lhs, rhs, *args, layout, feature_groups, batch_groups)
    _assert_near(got, expected, dtype)


# --- the backward convolutions ---------------------------------------------------------------


@pytest.mark.parametrize(
    "layout,strides,padding,rhs_dilation",
    [
        (("NHWC", "HWIO", "NHWC"), (1, 1), "SAME", (1, 1)),
        (("NHWC", "HWIO", "NHWC"), (2, 1), ((1, 0), (2, 1)), (1, 2)),
        (("NCHW", "OIHW", "NCHW"), (1, 1), "SAME", (1, 1)),
        (("NCHW", "OIHW", "NCHW"), (2, 2), "VALID", (2, 1)),
    ],
    ids=["nhwc_same", "nhwc_strided", "nchw_same", "nchw_strided"],
)
@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_gradients_are_exact_directional_derivatives(
    layout, strides, padding, rhs_dilation, use_jit, engine_calls
):
    """The loss <ct, conv(x, w)> is linear in each operand, so <grad_w, v> must equal
    <ct, conv(x, v)> and <grad_x, u> must equal <ct, conv(u, w)>, computed by the tap loop."""
    rng = np.random.default_rng(4)
    lhs, rhs = _operands(layout, (8, 7), (3, 3), np.float64, rng, batch=2, features=3)
    u, v = rng.standard_normal(lhs.shape), rng.standard_normal(rhs.shape)
    ones = (1, 1)

    def conv(x, w):
        return lax.conv_general_dilated(
            x, w, strides, padding, rhs_dilation=rhs_dilation, dimension_numbers=layout
        )

    with x64_mode(True):
        ct = rng.standard_normal(np.shape(conv(lhs, rhs)))

        def loss(x, w):
            return (conv(x, w) * ct).sum()

        grad = kiln.grad(loss, argnums=(0, 1))
        grad_x, grad_w = (kiln.jit(grad) if use_jit else grad)(lhs, rhs)
    assert len(engine_calls) >= 3  # forward, lhs gradient and kernel gradient
    if isinstance(padding, str):
        padding = conv_module.padtype_to_pads(
            [lhs.shape[layout[0].index(c)] for c in "HW"],
            [(rhs.shape[layout[1].index(c)] - 1) * d + 1 for c, d in zip("HW", rhs_dilation)],
            strides,
            padding,
        )
    expected_w = np.sum(ct * conv_reference(lhs, v, strides, padding, ones, rhs_dilation, layout))
    expected_x = np.sum(ct * conv_reference(u, rhs, strides, padding, ones, rhs_dilation, layout))
    np.testing.assert_allclose(np.sum(np.asarray(grad_w) * v), expected_w, rtol=1e-11)
    np.testing.assert_allclose(np.sum(np.asarray(grad_x) * u), expected_x, rtol=1e-11)


def test_backward_convolutions_take_the_fast_path(engine_calls, monkeypatch):
    """The two backward convolutions of a strided NHWC convolution (a transposed one, split
    into its four phases, and one with batch and features swapped) reach the engine, never the
    whole-matrix fallback."""
    fallback = []
    reference = conv_gemm.reference_conv
    monkeypatch.setattr(
        conv_gemm, "reference_conv", lambda *a, **k: (fallback.append(1), reference(*a, **k))[1]
    )
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 9, 9, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)

    def loss(x, w):
        y = lax.conv_general_dilated(
            x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return (y**2).sum()

    kiln.grad(loss, argnums=(0, 1))(x, w)
    assert len(engine_calls) == 1 + 4 + 1 and not fallback


# --- threads ----------------------------------------------------------------------------------

THREAD_CASES = {
    "rows_channels_last": (("NHWC", "HWIO", "NHWC"), (8, 20, 20, 16), (3, 3, 16, 32)),
    "rows_channels_first": (("NCHW", "OIHW", "NCHW"), (8, 16, 20, 20), (32, 16, 3, 3)),
    # Kernel gradients of an NHWC and of an NCHW convolution: batch and features swapped.
    "positions_batch_minor": (("CHWN", "IHWO", "HWNC"), (8, 22, 22, 16), (8, 20, 20, 32)),
    "positions_spatial_minor": (("CNHW", "IOHW", "HWNC"), (8, 16, 22, 22), (8, 32, 20, 20)),
}


@pytest.fixture
def restore_threads():
    previous = kiln.config.num_threads
    yield
    kiln.config.num_threads = previous


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(THREAD_CASES), ids=list(THREAD_CASES))
def test_thread_count_does_not_change_a_bit(case, dtype, restore_threads, monkeypatch):
    layout, lhs_shape, rhs_shape = THREAD_CASES[case]
    rng = np.random.default_rng(6)
    lhs = rng.standard_normal(lhs_shape).astype(dtype)
    rhs = rng.standard_normal(rhs_shape).astype(dtype)
    args = ((1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1))
    handed_off = []
    drain = conv_gemm._drain
    monkeypatch.setattr(conv_gemm, "_drain", lambda q: (handed_off.append(1), drain(q)))
    results = {}
    for threads in (1, 3, None):
        kiln.config.num_threads = threads
        results[threads] = _impl(lhs, rhs, layout, *args)
    assert len(handed_off) >= 3  # the three-thread run split its blocks
    np.testing.assert_array_equal(results[1], results[3])
    np.testing.assert_array_equal(results[1], results[None])
    expected = conv_reference(lhs, rhs, *args, layout)
    _assert_near(results[1], expected, dtype)


def test_thread_count_from_the_environment_gives_equal_results(tmp_path):
    """KILN_NUM_THREADS=1 in a fresh process computes the same bits as the default."""
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import sys, numpy as np, kiln\n"
        "from kiln import lax\n"
        "rng = np.random.default_rng(7)\n"
        "x = rng.standard_normal((8, 24, 24, 16)).astype(np.float32)\n"
        "w = rng.standard_normal((3, 3, 16, 32)).astype(np.float32)\n"
        "def loss(x, w):\n"
        "    y = lax.conv_general_dilated(x, w, (1, 1), 'SAME',\n"
        "        dimension_numbers=('NHWC', 'HWIO', 'NHWC'))\n"
        "    return (y ** 2).sum()\n"
        "gx, gw = kiln.jit(kiln.grad(loss, argnums=(0, 1)))(x, w)\n"
        "np.save(sys.argv[1], np.concatenate([np.ravel(gx), np.ravel(gw)]))\n"
    )
    import os

    outputs = []
    for threads in ("1", None):
        env = {k: v for k, v in os.environ.items() if k != "KILN_NUM_THREADS"}
        if threads is not None:
            env["KILN_NUM_THREADS"] = threads
        out = tmp_path / f"out{threads}.npy"
        subprocess.run(
            [sys.executable, str(script), str(out)], check=True, env=env, cwd=os.getcwd()
        )
        outputs.append(np.load(out))
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_empty_and_zero_size_operands_skip_the_engine(engine_calls):
    layout = ("NHWC", "HWIO", "NHWC")
    x = np.ones((0, 5, 5, 2), np.float32)
    w = np.ones((3, 3, 2, 4), np.float32)
    got = _impl(x, w, layout, (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1))
    assert got.shape == (0, 3, 3, 4) and not engine_calls
    x = np.ones((2, 2, 2, 2), np.float32)
    got = _impl(x, w, layout, (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1))
    assert got.shape == (2, 0, 0, 4)


@pytest.mark.parametrize("dilation", [1, 2, 3])
def test_dilate_and_pad_in_layout_matches_the_axis_by_axis_reference(dilation):
    rng = np.random.default_rng(8)
    checked = 0
    for size in (1, 2, 5):
        for low in (-4, -2, -1, 0, 1, 3):
            for high in (-4, -1, 0, 2):
                if (size - 1) * dilation + 1 + low + high < 0:
                    continue
                x = rng.standard_normal((2, size, 3, 4))
                # lhs spec (batch, feature, spatial...) = (0, 3, 1, 2): spatial axes 1 and 2.
                got = conv_gemm.dilate_and_pad_in_layout(
                    x, (0, 3, 1, 2), (dilation, 1), ((low, high), (1, 0))
                )
                expected = _dilate_pad(
                    x, (1, dilation, 1, 1), [(0, 0), (low, high), (1, 0), (0, 0)], 0
                )
                assert got.flags.c_contiguous
                np.testing.assert_array_equal(got, expected)
                checked += 1
    assert checked > 50


# --- dilated inputs (transposed convolutions) split by phase -------------------------------------

PHASE_CASES = {
    "stride2_same": ((6, 5), (3, 3), (2, 2), ((1, 2), (1, 2)), (1, 1)),
    "stride3_valid_like": ((4, 4), (3, 2), (3, 3), ((2, 2), (1, 1)), (1, 1)),
    "kernel_smaller_than_dilation": ((5, 4), (2, 1), (3, 2), ((0, 0), (0, 0)), (1, 1)),
    "negative_padding": ((6, 7), (3, 3), (2, 2), ((-1, 2), (2, -2)), (1, 1)),
    "one_axis_dilated": ((5, 6), (2, 3), (2, 1), ((1, 1), (0, 2)), (1, 2)),
    "large_padding": ((3, 3), (2, 2), (2, 3), ((4, 3), (3, 5)), (1, 1)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", LAYOUTS_2D[:3], ids=["nhwc", "nchw", "batch_minor"])
@pytest.mark.parametrize("case", list(PHASE_CASES), ids=list(PHASE_CASES))
def test_dilated_input_by_phases_matches_the_tap_loop(case, layout, dtype, monkeypatch):
    spatial, kernel, lhs_dilation, padding, rhs_dilation = PHASE_CASES[case]
    phases = []
    split = conv_gemm._convolve_by_phases
    monkeypatch.setattr(
        conv_gemm, "_convolve_by_phases", lambda *a: (phases.append(1), split(*a))[1]
    )
    rng = np.random.default_rng(9)
    lhs, rhs = _operands(layout, spatial, kernel, dtype, rng)
    args = ((1, 1), padding, lhs_dilation, rhs_dilation)
    got = _impl(lhs, rhs, layout, *args)
    assert phases
    _assert_near(got, conv_reference(lhs, rhs, *args, layout), dtype)
    _assert_near(got, _reference_impl(lhs, rhs, layout, *args), dtype)


@pytest.mark.parametrize("groups", [(2, 1), (1, 2)])
def test_dilated_input_by_phases_with_groups(groups):
    layout = ("NHWC", "HWIO", "NHWC")
    rng = np.random.default_rng(10)
    lhs = rng.standard_normal((4, 5, 4, 6))
    rhs = rng.standard_normal((3, 2, 6 // groups[0], 4))
    args = ((1, 1), ((1, 2), (0, 1)), (2, 3), (1, 1))
    got = _impl(lhs, rhs, layout, *args, groups=groups)
    _assert_near(got, conv_reference(lhs, rhs, *args, layout, *groups), np.float64)


def test_dilated_input_in_one_and_three_dimensions():
    rng = np.random.default_rng(11)
    for layout, lhs_shape, rhs_shape, dilation in [
        (("NWC", "WIO", "NWC"), (2, 5, 3), (4, 3, 2), (3,)),
        (("NCDHW", "OIDHW", "NCDHW"), (1, 2, 3, 2, 3), (3, 2, 2, 3, 2), (2, 1, 2)),
    ]:
        lhs, rhs = rng.standard_normal(lhs_shape), rng.standard_normal(rhs_shape)
        nsp = len(dilation)
        args = ((1,) * nsp, ((1, 1),) * nsp, dilation, (1,) * nsp)
        got = _impl(lhs, rhs, layout, *args)
        _assert_near(got, conv_reference(lhs, rhs, *args, layout), np.float64)


@pytest.mark.parametrize("layout", LAYOUTS_2D[:4], ids=["nhwc", "nchw", "hwcn", "chwn"])
def test_kernel_gradient_blocks_within_one_feature(layout, monkeypatch, restore_threads):
    """Tiny blocks force the contraction to be cut inside one feature (along the first kernel
    axis), as a large image does; any thread count sums the partials to the same bits."""
    monkeypatch.setattr(conv_gemm, "_BLOCK_ELEMENTS", 16)
    monkeypatch.setattr(conv_gemm, "_PARALLEL_MIN_WORK", 0)
    spatial, kernel, strides, padding, lhs_dilation, rhs_dilation = GEOMETRIES_2D["big_kernel"]
    rng = np.random.default_rng(12)
    lhs, rhs = _operands(layout, spatial, kernel, np.float64, rng)
    args = (strides, padding, lhs_dilation, rhs_dilation)
    results = []
    for threads in (1, 3):
        kiln.config.num_threads = threads
        results.append(_impl(lhs, rhs, layout, *args))
    np.testing.assert_array_equal(results[0], results[1])
    _assert_near(results[0], conv_reference(lhs, rhs, *args, layout), np.float64)
