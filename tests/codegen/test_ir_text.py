"""ir_text.module_text against llvmlite's own str(module): the same text, character for
character, for every module kiln emits while it compiles a spread of programs (element-wise
math with vmath's tables and branch weights, every integer and float width, reductions,
gathers and scatters, small and BLAS-sized products, random numbers, loops and branches),
and for a hand-built module with the constructs the fast writers leave to llvmlite."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from llvmlite import ir

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.codegen.llvm import ir_text


@pytest.fixture
def recorded(monkeypatch):
    """Every module the engine writes as text during the test, checked against str()."""
    original = ir_text.module_text
    seen: list[int] = []

    def checked(module):
        text = original(module)
        assert text == str(module), module.name
        seen.append(text.count("\n"))
        return text

    monkeypatch.setattr(ir_text, "module_text", checked)
    kiln.clear_caches()  # (nothing shared with earlier tests or targets: every one is emitted)
    return seen


def _programs(rng):
    x = rng.standard_normal((37, 29)).astype(np.float32)
    y = rng.standard_normal((29, 300)).astype(np.float32)
    ints = rng.integers(-100, 100, (37, 29)).astype(np.int32)
    key = kiln.random.PRNGKey(3)

    def body(carry):
        i, total = carry
        return i + 1, total * 0.5 + jnp.sin(total)

    return [
        (lambda a: jnp.tanh(a) * jnp.exp(-a) + jnp.log1p(jnp.abs(a)), (x,)),
        (lambda a: jnp.sin(a * 100.0) + jnp.cos(a) + jnp.arctan2(a, 1.5), (x,)),
        (lambda a: (a.astype(jnp.float16) * 3).astype(ml_dtypes.bfloat16), (x,)),
        (lambda a: jnp.sum(a, axis=0) + jnp.max(a, axis=0) * jnp.argmax(a, axis=0), (x,)),
        (lambda i: (i // 7) % 5 + (i >> 2) ^ jnp.uint8(3).astype(jnp.int32), (ints,)),
        (lambda i: i.astype(jnp.uint64) * 3 + i.astype(jnp.int8).astype(jnp.uint64), (ints,)),
        (lambda a: a[::-1, 3:20:2].T @ a[:, :17], (x,)),
        (lambda a, b: jax_relu(a @ b + 1.0), (x, y)),
        (lambda a: a.at[jnp.array([0, 5, 40])].add(1.0)[jnp.array([1, 2, 99])], (x,)),
        (lambda a: jnp.cumsum(a, axis=1) - jnp.sort(a, axis=0), (x,)),
        (lambda k: kiln.random.normal(k, (1000,)) + kiln.random.uniform(k, (1000,)), (key,)),
        (lambda a: lax.while_loop(lambda c: c[0] < 10, body, (0, a))[1], (x,)),
        (lambda a: lax.cond(jnp.sum(a) > 0, jnp.sin, jnp.cos, a), (x,)),
        (lambda a: lax.scan(lambda c, r: (c + r, c * r), a[0], a)[1], (x,)),
    ]


def jax_relu(z):
    return jnp.maximum(z, 0.0)


def test_every_emitted_module_matches_llvmlite(recorded):
    rng = np.random.default_rng(0)
    for function, args in _programs(rng):
        kiln.block_until_ready(kiln.jit(function)(*args))
    assert len(recorded) >= 14 and sum(recorded) > 3000


def test_the_constructs_left_to_llvmlite():
    module = ir.Module("hand-built")
    f32, i64 = ir.FloatType(), ir.IntType(64)
    vec = ir.VectorType(f32, 4)
    callee = ir.Function(module, ir.FunctionType(f32, [f32, ir.PointerType()]), "callee")
    callee.calling_convention = "fastcc"
    variadic = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64], var_arg=True), "v")
    plain = ir.Function(module, ir.FunctionType(f32, [f32]), "plain")
    function = ir.Function(module, ir.FunctionType(f32, [f32, ir.PointerType(), i64]), "f")
    function.attributes.add("nounwind")
    function.args[1].attributes.add("noalias")
    a, p, n = function.args
    entry, loop, done = (function.append_basic_block(name) for name in ("entry", "l.1", "d"))
    b = ir.IRBuilder(entry)
    slot = b.alloca(vec, name="slot")
    slot.align = 16
    b.store(ir.Constant(vec, [1.0, 2.0, 3.0, 4.0]), slot)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64, "i")
    i.add_incoming(ir.Constant(i64, 0), entry)
    loaded = b.load(slot, typ=vec)
    loaded.set_metadata("noalias", module.add_metadata([]))  # (metadata: llvmlite writes it)
    lane = b.extract_element(loaded, ir.Constant(ir.IntType(32), 1))
    fast = b.fadd(a, lane, flags=("fast",))
    called = b.call(callee, [fast, p])  # (calling convention: llvmlite)
    b.call(variadic, [n, fast])  # (variadic: llvmlite)
    b.call(plain, [called], arg_attrs={0: ("noundef",)})  # (argument attributes: llvmlite)
    tail = b.call(plain, [called], tail=True, fastmath=("nnan", "ninf"))
    shuffled = b.shuffle_vector(
        loaded, loaded, ir.Constant(ir.VectorType(ir.IntType(32), 2), [0, 5])
    )
    inserted = b.insert_element(loaded, tail, ir.Constant(ir.IntType(32), 0))
    b.store(inserted, b.gep(p, [i], inbounds=True, source_etype=vec), align=4)
    wide = b.fpext(b.extract_element(shuffled, ir.Constant(ir.IntType(32), 1)), ir.DoubleType())
    back = b.select(b.fcmp_unordered("uno", wide, wide), b.fptrunc(wide, f32), fast)
    following = b.add(i, ir.Constant(i64, 1), name="i.next", flags=("nsw",))
    i.add_incoming(following, loop)
    weighted = b.cbranch(b.icmp_signed("<", following, n), loop, done)
    weighted.set_weights([1, 99])  # (branch weights are metadata: llvmlite writes them)
    b.position_at_end(done)
    b.ret(b.fneg(back))
    glob = ir.GlobalVariable(module, ir.ArrayType(i64, 2), "table")
    glob.initializer = ir.Constant(ir.ArrayType(i64, 2), [1, 2])
    glob.global_constant = True
    assert ir_text.module_text(module) == str(module)
