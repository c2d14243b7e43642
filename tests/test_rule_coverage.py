"""Every primitive kiln defines has the rules the issue requires: an impl (the NumPy reference)
and an abstract evaluation; and kiln.numpy offers the API NumPy users reach for first."""

import importlib
import pkgutil

import pytest

import kiln
import kiln.numpy as jnp
import kiln.primitives
from kiln.core.primitive import Primitive


def all_primitives() -> dict[str, Primitive]:
    found = {}
    for info in pkgutil.iter_modules(kiln.primitives.__path__):
        module = importlib.import_module(f"kiln.primitives.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Primitive):
                found[value.name] = value
    return found


PRIMITIVES = all_primitives()

# The primitive set the foundation issue lists; each must exist under its JAX name.
REQUIRED = """
add sub mul div rem neg integer_pow pow max min abs sign floor ceil round exp exp2 log log1p
expm1 sqrt rsqrt cbrt sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh atan2 logistic
erf erfc erf_inv lgamma digamma is_finite eq ne lt le gt ge not and or xor shift_left
shift_right_logical shift_right_arithmetic select_n clamp convert_element_type nextafter
reduce_sum reduce_prod reduce_max reduce_min argmax argmin reduce_and reduce_or
broadcast_in_dim reshape squeeze transpose rev concatenate pad slice dynamic_slice
dynamic_update_slice iota gather scatter scatter-add dot_general cumsum cumprod cummax cummin
sort copy
""".split()


@pytest.mark.parametrize("name", REQUIRED)
def test_required_primitive_exists(name):
    assert name in PRIMITIVES, f"primitive {name} is missing"


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_primitive_has_impl_and_abstract_eval(name):
    prim = PRIMITIVES[name]
    assert prim.rule("impl") is not None, f"{name} has no impl rule"
    assert prim.rule("abstract_eval") is not None, f"{name} has no abstract_eval rule"


def test_kiln_numpy_offers_at_least_200_functions():
    public = [n for n in dir(jnp) if not n.startswith("_") and callable(getattr(jnp, n))]
    assert len(public) >= 200, len(public)


NUMPY_FIRST = """
array asarray zeros ones full arange linspace eye zeros_like ones_like full_like where sum
prod max min argmax argmin mean var std any all matmul dot vdot outer inner einsum tensordot
concatenate stack split transpose moveaxis swapaxes squeeze expand_dims tile repeat broadcast_to
ravel reshape flip roll tril triu take take_along_axis sort argsort cumsum clip isnan isfinite
allclose array_equal exp log sqrt abs sin cos tanh maximum minimum
""".split()


@pytest.mark.parametrize("name", NUMPY_FIRST)
def test_numpy_function_exists(name):
    assert callable(getattr(jnp, name, None)), f"kiln.numpy.{name} is missing"


def test_linalg_norm_and_nn_exist():
    assert callable(jnp.linalg.norm)
    for name in (
        "relu",
        "gelu",
        "sigmoid",
        "tanh",
        "softmax",
        "log_softmax",
        "logsumexp",
        "one_hot",
        "silu",
        "softplus",
        "elu",
        "selu",
        "leaky_relu",
    ):
        assert callable(getattr(kiln.nn, name, None)), f"kiln.nn.{name} is missing"


# --- derivative and batching rules ------------------------------------------------------------


# The primitives that are linear in some operand: each must have a transpose rule.
LINEAR = """
add add_any sub neg mul div convert_element_type real imag conj complex select_n
broadcast_in_dim reshape squeeze transpose rev copy slice pad concatenate dynamic_slice
dynamic_update_slice gather scatter-add scatter scatter-mul reduce_sum cumsum reduce_precision
dot_general pjit cond scan custom_lin psum fft triangular_solve tridiagonal_solve
conv_general_dilated reduce_window_sum select_and_gather_add select_and_scatter_add
""".split()


def _all_primitives_with_extras() -> dict[str, Primitive]:
    found = dict(PRIMITIVES)
    import kiln.callbacks
    import kiln.debug

    for module in (kiln.callbacks, kiln.debug):
        for value in vars(module).values():
            if isinstance(value, Primitive):
                found[value.name] = value
    return found


ALL_PRIMITIVES = _all_primitives_with_extras()


@pytest.mark.parametrize("name", sorted(ALL_PRIMITIVES))
def test_primitive_has_jvp_rule_or_says_why_not(name):
    prim = ALL_PRIMITIVES[name]
    if name == "custom_lin":  # the tangent map of a custom_vjp: transposed, never differentiated
        return
    assert prim.rule("jvp") is not None, f"{name} has no jvp rule"
    if prim.non_differentiable_reason is not None:
        assert len(prim.non_differentiable_reason) > 20


@pytest.mark.parametrize("name", LINEAR)
def test_linear_primitive_has_transpose_rule(name):
    assert name in ALL_PRIMITIVES, f"primitive {name} is missing"
    assert ALL_PRIMITIVES[name].rule("transpose") is not None, f"{name} has no transpose rule"


@pytest.mark.parametrize("name", sorted(ALL_PRIMITIVES))
def test_primitive_has_batching_rule(name):
    prim = ALL_PRIMITIVES[name]
    assert prim.rule("batching") is not None or prim.rule("collective_batching") is not None, (
        f"{name} has no batching rule"
    )
