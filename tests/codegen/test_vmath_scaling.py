"""The two ways vmath scales by 2**n: llvm.ldexp (one vscalef on AVX-512 hosts) and the portable
two-step product used elsewhere, which must meet the same MAX_ULP bounds and special values.

The portable path is forced here by patching vmath_base.native_ldexp, so it is checked even on
AVX-512 machines (where test_vmath.py exercises the ldexp path).
"""

from __future__ import annotations

import numpy as np
import pytest

import test_vmath as tv
from kiln.codegen.llvm import target, vmath, vmath_base

# Every op whose result goes through Emitter.scale (exp_kernel, exp2_kernel, expm1_kernel).
SCALED_OPS = ("exp", "exp2", "expm1", "pow", "sinh", "cosh", "tanh", "logistic", "erfc")


@pytest.fixture(scope="module")
def portable_jit():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vmath_base, "native_ldexp", lambda: False)
        return tv._Jit(SCALED_OPS)


def test_portable_path_emits_no_ldexp(portable_jit):
    assert "llvm.ldexp" not in portable_jit.optimized_ir


def test_avx512_path_uses_ldexp():
    if not target.current_target().has_avx512:
        pytest.skip("ldexp is used on AVX-512 targets only")
    assert "llvm.ldexp" in tv.jit().optimized_ir


@pytest.mark.parametrize("op", SCALED_OPS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_portable_path_accuracy_and_specials(portable_jit, monkeypatch, op, dtype):
    monkeypatch.setattr(tv, "jit", lambda: portable_jit)
    err, worst = tv.measure(op, dtype)
    assert err <= vmath.MAX_ULP[(op, dtype)], f"{op} {dtype}: {err:.2f} ulp at {worst}"
    tv.test_special_values(op, dtype)


@pytest.mark.parametrize("portable", [False, True])
def test_exp_edges_on_both_paths(portable_jit, portable):
    """NaN (payload kept as NaN), ±inf, the overflow edge and gradual underflow, float32."""
    jit = portable_jit if portable else tv.jit()
    info = np.finfo(np.float32)
    x = np.array(
        [
            np.nan,
            -np.nan,
            np.inf,
            -np.inf,
            88.72283,
            88.7229,
            1e30,
            3e38,
            -87.4,
            -100.0,
            -103.9,
            -104.0,
            -1e30,
            -0.0,
            0.0,
        ],
        dtype=np.float32,
    )
    got = jit("exp", "float32", x)
    assert np.isnan(got[:2]).all()
    assert got[2] == np.inf and got[3] == 0.0 and not np.signbit(got[3])
    assert np.isfinite(got[4]) and got[4] > 3.4e38 and got[5] == np.inf
    assert got[6] == np.inf and got[7] == np.inf
    assert 0 < got[9] < info.smallest_normal and got[11] == 0.0 and got[12] == 0.0
    assert got[13] == 1.0 and got[14] == 1.0
    with np.errstate(all="ignore"):
        ref = np.exp(x.astype(np.float64))
    finite = np.isfinite(ref) & (ref < float(info.max))
    assert tv.ulp_error(got[finite], ref[finite]).max() <= vmath.MAX_ULP[("exp", "float32")]
