"""Executables: what `kiln.jit` runs on a cache hit, plus host <-> device transfer helpers.

An `Executable` is one compiled program for one input signature. The contract every backend
implements (the interpreter here; the native LLVM backend, the default, in kiln/runtime/native.py):

* The backend is built from a *program*: a ClosedJaxpr whose invars are the hidden arguments
  followed by the user's flattened arguments, and whose consts are small constants the backend
  may bake into its code. `hidden_args` (kiln Arrays, the large constants the function captured)
  are bound by reference on every call, never copied into code.
* `execute(flat_args)` receives a sequence (list or tuple) of kiln Arrays, one per user
  argument leaf in pytree order, whose shapes and dtypes equal `in_avals` exactly (the caller
  converted scalars and NumPy values; weak types are irrelevant). It must not write them. It
  returns a list of kiln Arrays, one per output, with `out_avals`' shapes, dtypes and weak
  types. Outputs may share buffers with inputs or constants: arrays are immutable. A backend
  that cannot compile a program raises NotImplementedError from its constructor, and the
  pipeline falls back to the interpreter.
* `as_text()` is the human-readable program (the optimized jaxpr, plus whatever a backend adds,
  e.g. its kernel program).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kiln.core import rules
from kiln.core.array import CPU, Array, Device
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Literal


class Executable:
    """The interface of a compiled program (see the module docstring for the exact contract)."""

    backend: str = "abstract"

    def __init__(self, program: ClosedJaxpr, hidden_args: Sequence[Array], name: str):
        self.program = program
        self.hidden_args = tuple(hidden_args)
        self.name = name
        num_hidden = len(self.hidden_args)
        self.in_avals: tuple[ShapedArray, ...] = tuple(program.in_avals[num_hidden:])
        self.out_avals: tuple[ShapedArray, ...] = tuple(program.out_avals)

    def execute(self, flat_args: list) -> list:
        """Run on the user's argument leaves (kiln Arrays); returns the output kiln Arrays."""
        raise NotImplementedError

    def as_text(self) -> str:
        """The program this executable runs, as text."""
        return self.program.pretty_print()

    def donate(self, positions: Sequence[int]) -> list[int]:
        """Let outputs reuse the buffers of the user arguments at `positions`; returns those
        it cannot use (here: all of them; the native backend plans donation)."""
        return list(positions)

    def memory_stats(self):
        """Sizes of the program's memory (kiln/runtime/memory_plan.MemoryStats). Without a
        memory plan, every intermediate value counts as its own temp."""
        from kiln.runtime import memory_plan

        jaxpr = self.program.jaxpr
        outs = jaxpr.outvars
        temps = sum(
            memory_plan.nbytes_of(v.aval)
            for eqn in jaxpr.eqns
            for v in eqn.outvars
            if not isinstance(v, DropVar) and all(v is not o for o in outs)
        )
        arguments = sum(memory_plan.nbytes_of(a) for a in self.in_avals)
        outputs = sum(memory_plan.nbytes_of(v.aval) for v in memory_plan.distinct_outputs(outs))
        return memory_plan.make_stats(arguments, outputs, 0, temps)


class InterpretedExecutable(Executable):
    """Runs the optimized jaxpr with each primitive's NumPy impl, and nothing else per call.

    The jaxpr is translated once into a straight-line Python function (one impl call per
    equation, params and constants bound as globals of that function), so a call costs the
    impl calls themselves plus unwrapping the arguments and wrapping the results."""

    backend = "interpreter"

    def __init__(self, program: ClosedJaxpr, hidden_args: Sequence[Array], name: str):
        super().__init__(program, hidden_args, name)
        self.source, namespace = _python_source(program, self.hidden_args)
        code = compile(self.source, f"<kiln interpreter: {name}>", "exec")
        exec(code, namespace)
        # An instance attribute: a call to `execute` is a direct call of the generated function.
        self.execute = namespace["entry"]


def _python_source(program: ClosedJaxpr, hidden_args: tuple) -> tuple[str, dict]:
    """Straight-line Python source for the program, and the globals it needs."""
    jaxpr = program.jaxpr
    namespace: dict[str, Any] = {"wrap": Array._wrap, "asarray": np.asarray}
    names: dict = {}  # Var -> local or global name

    def bind_global(prefix: str, value: Any) -> str:
        name = f"{prefix}{len(namespace)}"
        namespace[name] = value
        return name

    for var, const in zip(jaxpr.constvars, program.consts):
        names[var] = bind_global("c", _host_value(const))
    hidden_vars = jaxpr.invars[: len(hidden_args)]
    user_vars = jaxpr.invars[len(hidden_args) :]
    for var, value in zip(hidden_vars, hidden_args):
        names[var] = bind_global("h", _host_value(value))

    def atom(a) -> str:
        if type(a) is Literal:
            return bind_global("l", np.asarray(a.val, dtype=a.aval.dtype))
        return names[a]

    lines = ["def entry(args):"]
    if user_vars:
        arg_names = [f"a{i}" for i in range(len(user_vars))]
        lines.append(f"    {', '.join(arg_names)}, = args")
        for i, var in enumerate(user_vars):
            names[var] = f"v{len(names)}"
            lines.append(f"    {names[var]} = a{i}._value")

    def new_local() -> str:
        return f"v{len(names)}"

    for eqn in jaxpr.eqns:
        lines.extend(
            "    " + line for line in impl_call_lines(eqn, atom, bind_global, new_local, names)
        )
    results = [f"wrap({atom(v)}, {v.aval.weak_type})" for v in jaxpr.outvars]
    lines.append(f"    return [{', '.join(results)}]")
    return "\n".join(lines) + "\n", namespace


def impl_call_lines(eqn, atom, bind_global, new_local, names: dict) -> list[str]:
    """Python statements that run one equation through its primitive's NumPy impl, binding
    its outputs to fresh local names (recorded in `names`). Shared by the interpreter and the
    native backend's reference stages."""
    impl = rules.impl_rules.get(eqn.primitive)
    if impl is None:
        raise NotImplementedError(
            f"`{eqn.primitive}` has no impl rule, so it cannot run through the reference evaluator"
        )
    call_args = [atom(a) for a in eqn.invars]
    fn_name = bind_global("f", impl)
    for key, value in eqn.params.items():
        call_args.append(f"{key}={bind_global('p', value)}")
    call = f"{fn_name}({', '.join(call_args)})"
    outs = []
    for var in eqn.outvars:
        if isinstance(var, DropVar):
            outs.append("_")
        else:
            names[var] = new_local()
            outs.append(names[var])
    if not eqn.primitive.multiple_results:
        # NumPy ufuncs return NumPy scalars for 0-d operands; impls expect arrays.
        if eqn.outvars[0].aval.shape == ():
            call = f"asarray({call})"
        return [f"{outs[0]} = {call}"]
    if outs:
        return [f"{', '.join(outs)}, = {call}"] + [
            f"{o} = asarray({o})"
            for o, v in zip(outs, eqn.outvars)
            if o != "_" and v.aval.shape == ()
        ]
    return [call]


def _host_value(value: Any) -> np.ndarray:
    if isinstance(value, Array):
        return value._value
    return np.asarray(value)


# --- host <-> device ----------------------------------------------------------------------------


def devices(backend: str | None = None) -> list[Device]:
    """The devices kiln computes on: the host CPU."""
    return [CPU]


def default_backend() -> str:
    """The platform kiln computes on by default ("cpu")."""
    return "cpu"


def _to_device(x: Any) -> Any:
    from kiln.core import dtypes
    from kiln.core.trace import Tracer

    if isinstance(x, (Array, Tracer)):
        return x
    if isinstance(x, (bool, int, float, complex)):
        dtype, weak = dtypes.dtype_and_weak_of(x)
        return Array._wrap(np.asarray(x, dtype=dtype), weak)
    if isinstance(x, (np.ndarray, np.generic)):
        return Array(x)  # copies: the caller may write its NumPy array later
    raise TypeError(
        f"device_put: cannot transfer a value of type {type(x).__name__}; "
        "expected arrays, NumPy values or Python scalars (or pytrees of them)."
    )


def device_put(x: Any, device: Device | None = None) -> Any:
    """Transfer `x` (a pytree of arrays, NumPy values and scalars) to the device: kiln Arrays."""
    import optree

    if device is not None and device is not CPU and getattr(device, "platform", None) != "cpu":
        raise ValueError(f"device_put: unknown device {device!r}; kiln runs on {CPU!r}")
    return optree.tree_map(_to_device, x, namespace="kiln")


def block_until_ready(x: Any) -> Any:
    """Wait for every array in the pytree `x`; kiln computes synchronously, so returns `x`."""
    if type(x) is Array:  # (the common case, without flattening)
        return x
    import optree

    for leaf in optree.tree_leaves(x, namespace="kiln"):
        wait = getattr(leaf, "block_until_ready", None)
        if wait is not None:
            wait()
    return x
