"""Equations with several results in the compiler: a lowering rule returns one expression per
output (built from shared, hash-consed nodes), `lowerable` accepts such equations, and fusion
either fuses all their outputs into consumers that read them at one index or stores them all
from one loop nest that computes the shared work once. threefry2x32 is the equation used; its
reference values are the published known-answer vectors of Threefry-2x32 with 20 rounds."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import lax
from kiln.compiler import fusion, kir, lower
from kiln.compiler.kir import Buffer, Var
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import Var as JaxprVar
from kiln.primitives import random_bits
from kiln.primitives.random_bits import threefry2x32, threefry2x32_p

U32 = np.uint32

# (key word 1, key word 2, counter word 1, counter word 2) -> (hashed word 1, hashed word 2),
# from the Random123 distribution's known-answer tests.
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF,) * 4, (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344, 0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


def _columns():
    """The known answers as uint32 arrays: k1, k2, x1, x2 and the expected y1, y2."""
    inputs = np.array([case for case, _ in KNOWN_ANSWERS], U32).T
    outputs = np.array([words for _, words in KNOWN_ANSWERS], U32).T
    return list(inputs), list(outputs)


def _compile(fn, *args):
    compiled = kiln.jit(fn, backend="native").lower(*args).compile()
    executable = compiled._entry.executable
    return [s for s in executable.segments if s is not None], compiled


def _hash_eqn(shape=(5,)):
    avals = [ShapedArray(shape, np.dtype(U32))] * 4
    closed = kiln.make_jaxpr(threefry2x32)(*[np.zeros(a.shape, U32) for a in avals])
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive is threefry2x32_p]
    return closed.jaxpr, eqn


def test_rule_builds_both_outputs_from_shared_nodes():
    jaxpr, eqn = _hash_eqn()
    loaded = {v: Buffer(f"x{n}", v.aval.dtype, v.aval.shape) for n, v in enumerate(jaxpr.invars)}
    builder = lower.ExprBuilder({v: eqn for v in eqn.outvars}, loaded)
    index = (Var("i0"),)
    first, second = (builder.read(v, index) for v in eqn.outvars)
    assert first is not second and first.dtype == second.dtype == np.dtype(U32)
    nodes_first, nodes_second = set(kir.toposort([first])), set(kir.toposort([second]))
    # 20 rounds of add/rotate/xor: the second word only adds its last few steps.
    assert len(nodes_first) > 100
    assert len(nodes_second - nodes_first) < 10
    # Reading the same output at the same index again gives the same node.
    assert builder.read(eqn.outvars[0], index) is first


def test_multiple_result_equations_are_lowerable_when_their_outputs_share_a_shape():
    _, eqn = _hash_eqn()
    assert lower.lowerable(eqn)
    assert lower.transcendental_count(eqn) == 0
    uneven = eqn.replace(
        outvars=[JaxprVar(ShapedArray((5,), np.dtype(U32))), JaxprVar(ShapedArray((4,), U32))]
    )
    assert not lower.lowerable(uneven)


def test_a_rule_returning_the_wrong_number_of_values_is_caught():
    jaxpr, eqn = _hash_eqn()
    saved = lower.lowering_rules[threefry2x32_p]
    try:
        lower.register_lowering(threefry2x32_p)(lambda ctx, index, *xs: (xs[2].read(index),))
        builder = lower.ExprBuilder(
            {v: eqn for v in eqn.outvars},
            {v: Buffer(f"x{n}", v.aval.dtype, v.aval.shape) for n, v in enumerate(jaxpr.invars)},
        )
        with pytest.raises(kir.KirError, match="produced 1 values for 2 results"):
            builder.read(eqn.outvars[0], (Var("i0"),))
    finally:
        lower.register_lowering(threefry2x32_p)(saved)


def test_both_outputs_are_stored_by_one_loop_nest():
    inputs, expected = _columns()
    segments, compiled = _compile(lambda *a: threefry2x32(*a), *inputs)
    (segment,) = segments
    (kernel,) = segment.plan.program.kernels
    stores = [s for s in kir.walk_stmts(kernel.body) if isinstance(s, kir.Store)]
    assert len(stores) == 2
    # The second store's value reuses the first one's hash: one copy of the rounds.
    values = [s.value for s in stores]
    assert len(set(kir.toposort(values))) < 1.1 * len(set(kir.toposort(values[:1])))
    for got, want in zip(compiled(*inputs), expected):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_outputs_read_at_one_index_fuse_into_the_consumer():
    inputs, expected = _columns()

    def mixed(*a):
        y1, y2 = threefry2x32(*a)
        return lax.bitwise_xor(y1, lax.shift_right_logical(y2, U32(3)))

    segments, compiled = _compile(mixed, *inputs)
    (segment,) = segments
    assert len(segment.plan.program.kernels) == 1 and not segment.plan.temps
    np.testing.assert_array_equal(
        np.asarray(compiled(*inputs)), expected[0] ^ (expected[1] >> U32(3))
    )


def test_outputs_read_at_different_indices_are_stored_together():
    inputs, expected = _columns()

    def flat(*a):
        y1, y2 = threefry2x32(*a)
        return lax.concatenate([y1, y2], 0) + U32(1)

    segments, compiled = _compile(flat, *inputs)
    (segment,) = segments
    plan = segment.plan
    assert len(plan.temps) == 2
    first = plan.program.kernels[0]
    stored = {s.buffer for s in kir.walk_stmts(first.body) if isinstance(s, kir.Store)}
    assert stored == {plan.buffers[v] for v in plan.temps}
    np.testing.assert_array_equal(np.asarray(compiled(*inputs)), np.concatenate(expected) + U32(1))


def test_one_output_dropped():
    inputs, expected = _columns()
    _, compiled = _compile(lambda *a: threefry2x32(*a)[1] * U32(3), *inputs)
    np.testing.assert_array_equal(np.asarray(compiled(*inputs)), expected[1] * U32(3))


def test_rank0_keys_broadcast_and_large_inputs_match_the_reference():
    rng = np.random.default_rng(0)
    x1, x2 = (rng.integers(0, 2**32, (3, 1001), dtype=U32) for _ in range(2))
    k1, k2 = U32(0x13198A2E), U32(0x03707344)
    got = kiln.jit(threefry2x32, backend="native")(k1, k2, x1, x2)
    want = random_bits._threefry2x32_numpy(k1, k2, x1, x2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_read_analysis_stores_every_read_output_or_none():
    inputs, _ = _columns()

    def program(*a):
        y1, y2 = threefry2x32(*a)
        return lax.concatenate([y1, y2], 0)

    closed = kiln.make_jaxpr(program)(*inputs)
    eqns = closed.jaxpr.eqns
    producers = {v: e for e in eqns for v in e.outvars}
    (hash_eqn,) = [e for e in eqns if e.primitive is threefry2x32_p]
    reads = fusion.ReadAnalysis(eqns, producers, closed.jaxpr.outvars, {})
    assert set(hash_eqn.outvars) <= reads.materialized
    same_index = kiln.make_jaxpr(lambda *a: lax.add(*threefry2x32(*a)))(*inputs).jaxpr
    producers = {v: e for e in same_index.eqns for v in e.outvars}
    reads = fusion.ReadAnalysis(same_index.eqns, producers, same_index.outvars, {})
    assert not reads.materialized
