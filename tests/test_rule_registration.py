"""Registering rules: one `def_<kind>` method per rule kind on Primitive, compiler tables keyed
by the primitive object, and the derivative helpers of primitives/base.py checked against
derivatives worked out by hand."""

import numpy as np
import pytest

import kiln.numpy as jnp
from kiln import lax
from kiln.compiler import lower
from kiln.compiler.passes.simplify import simplify_rules
from kiln.core import rules
from kiln.core.primitive import Primitive
from kiln.primitives import base
from kiln.primitives.elementwise import mul_p, neg_p

KINDS = [
    "impl",
    "abstract_eval",
    "jvp",
    "transpose",
    "batching",
    "effects",
    "dce",
    "partial_eval",
    "collective_batching",
]


@pytest.mark.parametrize("kind", KINDS)
def test_def_method_works_as_decorator_and_as_call(kind):
    prim = Primitive(f"registration_test_{kind}")
    method = getattr(prim, f"def_{kind}")

    @method
    def first(*args, **params):
        return "first"

    assert first(None) == "first"  # the decorator gives the function back unchanged
    assert prim.rule(kind) is first
    assert rules.PRIMITIVE_RULE_TABLES[kind][prim] is first

    def second(*args, **params):
        return "second"

    assert method(second) is second
    assert prim.rule(kind) is second


def test_a_primitive_without_a_rule_reports_none():
    prim = Primitive("registration_test_bare")
    assert all(prim.rule(kind) is None for kind in KINDS)


def test_every_primitive_rule_kind_has_a_def_method():
    assert sorted(rules.PRIMITIVE_RULE_TABLES) == sorted(KINDS)
    for kind in KINDS:
        assert callable(getattr(Primitive, f"def_{kind}"))


def test_compiler_tables_are_keyed_by_primitive_objects():
    assert all(isinstance(p, Primitive) for p in lower.lowering_rules)
    assert all(isinstance(p, Primitive) for p in simplify_rules)
    assert mul_p in simplify_rules and neg_p in lower.lowering_rules
    # Another primitive under the same name gets none of mul's rules.
    impostor = Primitive("mul")
    assert impostor not in simplify_rules and impostor not in lower.lowering_rules


# --- derivative helpers ------------------------------------------------------------------------

sin_like_p = base.standard_unop("registration_test_sin", np.sin, base.FLOAT)
base.defjvp(sin_like_p, lambda g, x: lax.mul(g, lax.cos(x)))

add_like_p = base.standard_binop("registration_test_add", np.add, base.FLOAT)
base.defjvp(add_like_p, lambda g, x, y: g, lambda g, x, y: g)

neg_like_p = base.standard_unop("registration_test_neg", np.negative, base.FLOAT)
base.deflinear(neg_like_p, lambda cotangent, x: [lax.neg(cotangent)])

sum_like_p = base.standard_binop("registration_test_linear_add", np.add, base.FLOAT)
base.deflinear(
    sum_like_p,
    lambda cotangent, x, y: [
        base.unbroadcast(cotangent, x.shape),
        base.unbroadcast(cotangent, y.shape),
    ],
)


def test_defjvp_elementwise_rule_is_g_times_derivative():
    x = np.array([0.0, 0.5, 2.0], np.float32)
    g = np.array([1.0, -2.0, 3.0], np.float32)
    out, tangent = sin_like_p.rule("jvp")((jnp.asarray(x),), (jnp.asarray(g),))
    np.testing.assert_allclose(np.asarray(out), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tangent), g * np.cos(x), rtol=1e-6)


def test_defjvp_with_a_zero_tangent_gives_a_zero_tangent():
    _, tangent = sin_like_p.rule("jvp")((jnp.asarray(np.ones(3, np.float32)),), (None,))
    assert tangent is None


def test_defjvp_broadcasts_and_adds_the_contributions():
    x = jnp.asarray(np.float32(1.0))  # rank-0: broadcast against y
    y = jnp.asarray(np.arange(3, dtype=np.float32))
    out, tangent = add_like_p.rule("jvp")(
        (x, y), (jnp.asarray(np.float32(2.0)), jnp.asarray(np.ones(3, np.float32)))
    )
    np.testing.assert_array_equal(np.asarray(out), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(tangent), [3.0, 3.0, 3.0])
    _, only_x = add_like_p.rule("jvp")((x, y), (jnp.asarray(np.float32(2.0)), None))
    assert only_x.shape == (3,)
    np.testing.assert_array_equal(np.asarray(only_x), [2.0, 2.0, 2.0])


def test_deflinear_jvp_applies_the_op_to_the_tangents():
    x = jnp.asarray(np.array([1.0, -2.0], np.float32))
    t = jnp.asarray(np.array([0.5, 4.0], np.float32))
    out, tangent = neg_like_p.rule("jvp")((x,), (t,))
    np.testing.assert_array_equal(np.asarray(out), [-1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(tangent), [-0.5, -4.0])
    assert neg_like_p.rule("jvp")((x,), (None,))[1] is None


def test_deflinear_fills_a_zero_tangent_with_zeros():
    x = jnp.asarray(np.array([1.0, 2.0], np.float32))
    y = jnp.asarray(np.array([10.0, 20.0], np.float32))
    _, tangent = sum_like_p.rule("jvp")((x, y), (None, jnp.asarray(np.ones(2, np.float32))))
    np.testing.assert_array_equal(np.asarray(tangent), [1.0, 1.0])


def test_deflinear_transpose_unbroadcasts_a_rank0_operand():
    x = jnp.asarray(np.float32(1.0))
    y = jnp.asarray(np.zeros(3, np.float32))
    cotangent = jnp.asarray(np.array([1.0, 2.0, 4.0], np.float32))
    ct_x, ct_y = sum_like_p.rule("transpose")(cotangent, x, y)
    assert ct_x.shape == () and float(ct_x) == 7.0
    np.testing.assert_array_equal(np.asarray(ct_y), [1.0, 2.0, 4.0])
