"""The top-level helpers: kiln.tree, eval_shape, the context managers (disable_jit,
ensure_compile_time_eval, default_device, named_scope), device_get, kiln.dtypes, kiln.errors,
print_environment_info, pickling and DLPack exchange of kiln arrays."""

import pickle

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from tests._testing import x64_mode


# --- kiln.tree ---------------------------------------------------------------------------------
def test_tree_functions():
    tree = {"a": 1, "b": (2, [3, 4])}
    assert kiln.tree.leaves(tree) == [1, 2, 3, 4]
    assert kiln.tree.map(lambda x, y: x + y, tree, tree) == {"a": 2, "b": (4, [6, 8])}
    leaves, treedef = kiln.tree.flatten(tree)
    assert kiln.tree.unflatten(treedef, [x * 10 for x in leaves]) == {"a": 10, "b": (20, [30, 40])}
    assert kiln.tree.structure(tree) == treedef
    assert kiln.tree.reduce(lambda a, b: a * b, tree) == 24
    assert kiln.tree.reduce(lambda a, b: a + b, [], 7) == 7
    assert kiln.tree.all([True, (1, 2)]) and not kiln.tree.all([True, 0])
    paths = [kiln.tree_util.keystr(p) for p, _ in kiln.tree.leaves_with_path({"a": [5]})]
    assert paths == ["['a'][0]"]
    assert kiln.tree.map_with_path(lambda p, x: len(p) + x, {"a": [5]}) == {"a": [7]}
    outer = kiln.tree.structure([0, 0])
    inner = kiln.tree.structure({"x": 0, "y": 0})
    transposed = kiln.tree.transpose(outer, inner, [{"x": 1, "y": 2}, {"x": 3, "y": 4}])
    assert transposed == {"x": [1, 3], "y": [2, 4]}
    assert kiln.tree.broadcast([1, 2], [[3, 4], {"a": 5}]) == [[1, 1], {"a": 2}]
    assert kiln.tree.reduce_associative(lambda a, b: a + b, [1, 2, 3, 4, 5]) == 15
    with pytest.raises(TypeError, match="identity"):
        kiln.tree.reduce_associative(lambda a, b: a + b, [])
    assert kiln.tree.reduce_associative(lambda a, b: a + b, [], identity=0) == 0


# --- eval_shape --------------------------------------------------------------------------------
def test_eval_shape_traces_without_computing():
    calls = []

    def f(x, y):
        calls.append(type(x))
        return {"sum": x + y, "total": jnp.sum(x)}

    spec = kiln.ShapeDtypeStruct((2, 3), jnp.float32)
    out = kiln.eval_shape(f, spec, 1.0)
    assert out["sum"] == kiln.ShapeDtypeStruct((2, 3), jnp.float32)
    assert out["total"].shape == () and out["total"].dtype == np.float32
    assert calls and calls[0] is not kiln.Array
    weak = kiln.eval_shape(lambda x: x * 2, 1.0)
    assert (
        weak.weak_type and repr(weak) == "ShapeDtypeStruct(shape=(), dtype=float32, weak_type=True)"
    )
    arrays = kiln.eval_shape(jnp.matmul, jnp.ones((4, 5)), jnp.ones((5, 2), jnp.int32))
    assert arrays.shape == (4, 2) and arrays.dtype == np.float32
    with pytest.raises(TypeError):
        kiln.eval_shape(lambda x: x, "not an array")


# --- context managers ---------------------------------------------------------------------------
def test_disable_jit_runs_python_each_call():
    trace_count = []

    @kiln.jit
    def f(x):
        trace_count.append(type(x))
        return x * 2

    f(jnp.ones(2))
    f(jnp.ones(2))
    assert len(trace_count) == 1
    with kiln.disable_jit():
        assert kiln.config.disable_jit
        out = f(jnp.ones(2))
        assert trace_count[-1] is kiln.Array
        np.testing.assert_array_equal(out, [2.0, 2.0])
    assert not kiln.config.disable_jit
    with kiln.disable_jit(False):
        assert not kiln.config.disable_jit


def test_ensure_compile_time_eval_computes_constants_during_tracing():
    seen = {}

    @kiln.jit
    def f(x):
        with kiln.ensure_compile_time_eval():
            table = jnp.sin(jnp.arange(3.0))
            seen["table"] = type(table)
            y = x + table  # traced operand: staged as usual
            seen["y"] = type(y)
        return y

    out = f(jnp.zeros(3))
    assert seen["table"] is kiln.Array
    assert seen["y"] is not kiln.Array
    np.testing.assert_allclose(out, np.sin(np.arange(3.0)), rtol=1e-6)
    jaxpr = kiln.make_jaxpr(lambda x: f(x))(jnp.zeros(3))
    assert "sin" not in str(jaxpr)
    with kiln.ensure_compile_time_eval():  # no trace: nothing changes
        assert type(jnp.ones(2) + 1) is kiln.Array


def test_ensure_compile_time_eval_lets_python_branch_on_computed_constants():
    @kiln.jit
    def f(x):
        with kiln.ensure_compile_time_eval():
            n = jnp.sum(jnp.arange(4))
            if n > 5:  # concrete: a Python branch works
                return x + 1
        return x

    np.testing.assert_array_equal(f(jnp.zeros(2)), [1.0, 1.0])


def test_default_device_and_named_scope():
    with kiln.default_device(kiln.devices()[0]):
        assert jnp.ones(2).device == kiln.devices()[0]
    with kiln.default_device("cpu"):
        pass
    with pytest.raises(ValueError, match="host CPU"):
        with kiln.default_device("gpu"):
            pass
    with kiln.named_scope("layer1"):
        np.testing.assert_array_equal(kiln.jit(lambda x: x + 1)(jnp.zeros(1)), [1.0])
    with pytest.raises(TypeError, match="must be a string"):
        with kiln.named_scope(3):
            pass


# --- host helpers -------------------------------------------------------------------------------
def test_device_get_returns_numpy():
    out = kiln.device_get({"a": jnp.ones(2), "b": 1.0, "c": "text"})
    assert type(out["a"]) is np.ndarray and out["b"] == 1.0 and out["c"] == "text"
    assert type(kiln.device_get(jnp.arange(3))) is np.ndarray


def test_print_environment_info(capsys):
    text = kiln.print_environment_info(return_string=True)
    assert "kiln:" in text and "numpy:" in text and "python:" in text
    assert kiln.print_environment_info() is None
    assert "kiln:" in capsys.readouterr().out


def test_dtypes_namespace():
    assert kiln.dtypes.float0.itemsize == 0
    assert kiln.dtypes.canonicalize_dtype(np.float64) == np.float32
    with x64_mode(True):
        assert kiln.dtypes.canonicalize_dtype(np.float64) == np.float64
    assert kiln.dtypes.issubdtype(jnp.bfloat16, np.floating)
    assert kiln.dtypes.result_type(1.0, jnp.ones(2, jnp.float16)) == np.float16
    assert kiln.dtypes.result_type(1, 2.0, return_weak_type_flag=True) == (np.float32, True)
    assert kiln.dtypes.scalar_type_of(jnp.ones(2, jnp.int8)) is int
    assert kiln.dtypes.scalar_type_of(1.5) is float
    assert kiln.dtypes.itemsize_bits(jnp.bfloat16) == 16
    assert kiln.dtypes.finfo(jnp.bfloat16).bits == 16
    assert issubclass(kiln.dtypes.TypePromotionError, ValueError)


def test_errors_namespace():
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda x: int(x.sum() > 0))(jnp.ones(2))
    with pytest.raises(kiln.errors.TracerBoolConversionError):
        kiln.jit(lambda x: 1 if x.sum() > 0 else 0)(jnp.ones(2))
    assert issubclass(kiln.errors.TracerBoolConversionError, kiln.errors.ConcretizationTypeError)
    assert issubclass(kiln.errors.JAXTypeError, TypeError)
    assert issubclass(kiln.errors.NonConcreteBooleanIndexError, IndexError)


# --- pickling and DLPack ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, np.complex64, "bfloat16"])
def test_pickle_round_trips_as_kiln_array(dtype):
    x = jnp.asarray(np.arange(6).reshape(2, 3).astype(dtype))
    y = pickle.loads(pickle.dumps(x))
    assert type(y) is kiln.Array and y.dtype == x.dtype and not y.weak_type
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    weak = pickle.loads(pickle.dumps(jnp.array(2.0)))
    assert weak.weak_type == jnp.array(2.0).weak_type


def test_dlpack_export_is_zero_copy():
    x = jnp.arange(6.0).reshape(2, 3)
    assert x.__dlpack_device__() == (1, 0)
    y = np.from_dlpack(x)
    assert np.shares_memory(y, np.asarray(x))
    np.testing.assert_array_equal(y, np.asarray(x))


def test_from_dlpack_imports_without_copy():
    source = np.arange(5, dtype=np.float32)
    x = kiln.dlpack.from_dlpack(source)
    assert type(x) is kiln.Array
    assert np.shares_memory(np.asarray(x), source)
    y = jnp.from_dlpack(np.arange(3, dtype=np.int64))  # 64-bit narrows (a copy) without x64
    assert y.dtype == np.int32
    with x64_mode(True):
        assert kiln.dlpack.from_dlpack(np.arange(3, dtype=np.int64)).dtype == np.int64
    round_trip = kiln.dlpack.from_dlpack(jnp.arange(4.0))
    np.testing.assert_array_equal(round_trip, [0.0, 1.0, 2.0, 3.0])
    assert kiln.dlpack.is_supported_dtype(np.float16)
    with pytest.raises(TypeError, match="__dlpack__"):
        kiln.dlpack.from_dlpack([1, 2])
