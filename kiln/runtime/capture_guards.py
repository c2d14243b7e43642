"""What a jitted function's trace depends on: content keys of functions (function_key), the
captured-value guards (Guard, record_captures, stale_guards) with the test of which code is the
user's, and describe_value for their warnings. Re-exported by kiln.runtime.cache."""

from __future__ import annotations

import dis
import functools
import math
import os
import sys
import sysconfig
import types
from typing import Any, Callable

import numpy as np

from kiln.core.array import Array


# --- content keys of functions -----------------------------------------------------------------


class Identity:
    """A key part compared by identity. It holds a strong reference, so the id of a live key can
    never be reused by another object."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other) -> bool:
        return type(other) is Identity and other.obj is self.obj


_MAX_DEPTH = 4
_EMPTY_CELL = ("<empty cell>",)


def _value_key(value: Any, depth: int) -> Any:
    """Closure values, defaults and partial arguments: hashable scalars, strings and tuples of
    them compare by value (floats by their bits, so -0.0 != 0.0); functions by content;
    everything else by identity."""
    t = type(value)
    if t is float:
        return (float, value.hex() if math.isfinite(value) else repr(value))
    if t is complex:
        return (complex, _value_key(value.real, depth), _value_key(value.imag, depth))
    if t in (int, bool, str, bytes, type(None)):
        return (t, value)
    if t is tuple:
        return (tuple, tuple(_value_key(v, depth) for v in value))
    if isinstance(value, np.generic):
        return (t, value.tobytes())
    if depth < _MAX_DEPTH and t in (types.FunctionType, functools.partial, types.MethodType):
        return function_key(value, depth + 1)
    return Identity(value)


def function_key(fun: Callable, depth: int = 0) -> Any:
    """A hashable key equal for functions that compute the same thing: code object, closure
    cell contents, defaults, kwdefaults and the identity of the globals dict; for
    functools.partial the key of its func plus its arguments; anything else by identity."""
    t = type(fun)
    if t is types.FunctionType:
        closure = fun.__closure__
        cells = () if closure is None else tuple(_value_key(_cell_value(c), depth) for c in closure)
        kwdefaults = fun.__kwdefaults__
        return (
            "function",
            fun.__code__,
            Identity(fun.__globals__),
            _value_key(fun.__defaults__, depth),
            None
            if not kwdefaults
            else tuple(sorted((k, _value_key(v, depth)) for k, v in kwdefaults.items())),
            cells,
        )
    if t is functools.partial:
        return (
            "partial",
            function_key(fun.func, depth),
            tuple(_value_key(a, depth) for a in fun.args),
            tuple(sorted((k, _value_key(v, depth)) for k, v in fun.keywords.items())),
        )
    if t is types.MethodType:
        return ("method", function_key(fun.__func__, depth), Identity(fun.__self__))
    return Identity(fun)


def _cell_value(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return _EMPTY_CELL


# --- the captured-value guards -------------------------------------------------------------------
#
# A trace bakes in every global, closure cell and attribute it reads. A Guard remembers one such
# read and its value, so that the cache can tell whether a trace is still what a fresh trace of
# the function would give. Values that can change a trace are guarded: arrays, scalars, strings,
# None, and small lists/tuples/dicts of them. Modules, classes and functions are not (functions
# are followed instead, to the globals they read). Values bound into the function object itself
# (defaults, partial arguments) are part of its content key; only mutable containers among them
# need a guard, for changes made in place.

_SCALAR_TYPES: tuple = (bool, int, float, complex, str, bytes, type(None))
_CONTAINER_TYPES: tuple = (list, tuple, dict)
#: Containers with more items than this are not guarded (comparing them would cost too much).
_MAX_CONTAINER_ITEMS = 64
#: Values checked on every call of an object using a trace (to warn or retrace); other guarded
#: values are checked only when a new object adopts the trace, keeping the call path short.
_WATCHED_TYPES: tuple = (bool, int, float, complex)


def _is_array(value: Any) -> bool:
    return isinstance(value, (Array, np.ndarray, np.generic))


def _is_data(value: Any) -> bool:
    return type(value) in _SCALAR_TYPES or _is_array(value) or _container_items(value) is not None


def _container_items(value: Any) -> list | None:
    """The leaves of a small list/tuple/dict nest holding at least one array or number, else
    None."""
    if type(value) not in _CONTAINER_TYPES:
        return None
    leaves: list = []
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) in _CONTAINER_TYPES:
            stack.extend(node.values() if type(node) is dict else node)
        else:
            leaves.append(node)
        if len(leaves) + len(stack) > _MAX_CONTAINER_ITEMS:
            return None
    if not any(type(v) in _SCALAR_TYPES[:4] or _is_array(v) for v in leaves):
        return None
    return leaves


def _capture_key(value: Any) -> Any:
    """What a guard compares: scalars by typed value (so rebinding 2.0 to an equal 2.0 is no
    change), containers by structure and items (so replacing an item in place is one), anything
    else by identity."""
    t = type(value)
    if t in _SCALAR_TYPES or isinstance(value, np.generic):
        return _value_key(value, _MAX_DEPTH)
    if t is list or t is tuple:
        return (t, tuple(_capture_key(v) for v in value))
    if t is dict:
        return (dict, tuple((k, _capture_key(v)) for k, v in value.items()))
    return Identity(value)


class Guard:
    """A global variable, closure cell or attribute read at trace time, with its value then.

    `container` is the mapping the name is read from (a module's globals, an instance's or a
    class's __dict__), for a closure variable the cell, and for a value bound into the function
    (kind "bound": a mutable default or partial argument) None. `watched` guards (arrays and
    numbers) are also checked on every call of the jitted objects using the trace."""

    __slots__ = ("kind", "container", "name", "value", "key", "watched")

    def __init__(self, kind: str, container: Any, name: str, value: Any):
        self.kind = kind  # "global", "closure", "attribute" or "bound"
        self.container = container
        self.name = name
        self.value = value
        self.key = _capture_key(value)
        self.watched = type(value) in _WATCHED_TYPES or _is_array(value)

    def current(self) -> Any:
        if self.kind == "closure":
            return _cell_value(self.container)
        if self.kind == "bound":
            return self.value  # the same object, perhaps changed in place
        return self.container.get(self.name, _EMPTY_CELL)

    def is_stale(self) -> bool:
        now = self.current()
        if now is self.value and self.watched:
            return False
        if _capture_key(now) != self.key:
            return True
        self.value = now  # an equal value was rebound: the identity check suffices next time
        return False

    def held(self) -> str:
        """What the variable held at trace time, in words (a container may have changed in
        place since, so it is not shown)."""
        if type(self.value) in _CONTAINER_TYPES:
            return f"a {type(self.value).__name__}"
        return describe_value(self.value)

    def describe(self) -> str:
        """How the warning names the variable."""
        if self.kind == "attribute":
            return f"attribute `{self.name}`"
        if self.kind == "bound":
            return f"bound argument `{self.name}`"
        return f"{self.kind} variable `{self.name}`"


def stale_guards(guards) -> list[Guard]:
    """The guards whose variable no longer holds its trace-time value."""
    return [g for g in guards if g.is_stale()]


def record_captures(fun: Callable) -> tuple[Guard, ...]:
    """The data-holding globals, closure cells and attributes `fun` reads: directly, through
    the user's own Python functions it calls (a few levels deep), through the functions and
    arguments of a functools.partial, and through `self` for a bound method."""
    guards: dict = {}
    _collect(fun, None, guards, set(), 0)
    return tuple(guards.values())


def _collect(fun: Any, owner: Any, guards: dict, seen: set, depth: int) -> None:
    """Add the guards of `fun` (called as a method of `owner` when that is not None)."""
    if depth > 3 or (id(fun), id(owner)) in seen:
        return
    seen.add((id(fun), id(owner)))
    if isinstance(fun, functools.partial):
        _collect(fun.func, owner, guards, seen, depth)
        bound = [(f"args[{i}]", v) for i, v in enumerate(fun.args)]
        for name, value in bound + list(fun.keywords.items()):
            _add_bound(guards, name, value, seen, depth)
        return
    if isinstance(fun, types.MethodType):
        _collect(fun.__func__, fun.__self__, guards, seen, depth)
        return
    if type(fun) is not types.FunctionType:
        call = getattr(type(fun), "__call__", None)
        if type(call) is types.FunctionType and _is_user_code(call.__code__):
            _collect(call, fun, guards, seen, depth)  # a callable object: its __call__
        return
    code, glob = fun.__code__, fun.__globals__
    for name in _global_loads(code):
        if name in glob:
            _add(guards, "global", glob, name, glob[name], seen, depth)
    for module_name, attr in _module_attribute_loads(code):
        module = glob.get(module_name)
        if isinstance(module, types.ModuleType) and _is_user_module(module):
            namespace = vars(module)
            if attr in namespace:
                _add(guards, "global", namespace, attr, namespace[attr], seen, depth)
    defaults = fun.__defaults__ or ()
    names = code.co_varnames[code.co_argcount - len(defaults) : code.co_argcount]
    for name, value in list(zip(names, defaults)) + list((fun.__kwdefaults__ or {}).items()):
        _add_bound(guards, name, value, seen, depth)
    for name, cell in zip(code.co_freevars, fun.__closure__ or ()):
        value = _cell_value(cell)
        if _is_data(value):
            guards.setdefault(("closure", id(cell)), Guard("closure", cell, name, value))
        elif type(value) in (types.FunctionType, functools.partial, types.MethodType):
            _collect(value, None, guards, seen, depth + 1)
    if owner is not None:
        _collect_attributes(code, owner, guards, seen, depth)


def _add(guards: dict, kind: str, namespace, name: str, value: Any, seen: set, depth: int) -> None:
    """Guard `namespace[name]` if it holds data; follow it if it is one of the user's functions."""
    if _is_data(value):
        guards.setdefault((kind, id(namespace), name), Guard(kind, namespace, name, value))
    elif type(value) is types.FunctionType and _is_user_code(value.__code__):
        _collect(value, None, guards, seen, depth + 1)
    elif isinstance(value, (type, np.dtype)) or (
        callable(value) and not isinstance(value, types.ModuleType)
    ):
        # A library function read through a variable (`fn = lax.sin`), or a dtype or class
        # (`for dt in (jnp.float32, jnp.int32): jit(lambda x: x.astype(dt))`), is part of the
        # trace: guard which one the name holds (by identity; never checked per call).
        guards.setdefault((kind, id(namespace), name), Guard(kind, namespace, name, value))


def _add_bound(guards: dict, name: str, value: Any, seen: set, depth: int) -> None:
    """Guard a default or partial argument that is a mutable container of data; follow one
    that is a function."""
    if type(value) in (list, dict) and _container_items(value) is not None:
        guards.setdefault(("bound", id(value)), Guard("bound", None, name, value))
    elif type(value) in (types.FunctionType, functools.partial, types.MethodType):
        _collect(value, None, guards, seen, depth + 1)


def _collect_attributes(
    code: types.CodeType, owner: Any, guards: dict, seen: set, depth: int
) -> None:
    """Guard the `self.name` reads of a method: instance attributes holding data, and class
    attributes holding data; follow `self.helper(...)` into the helper."""
    instance_dict = getattr(owner, "__dict__", None)
    for name in _self_attribute_loads(code):
        if isinstance(instance_dict, dict) and name in instance_dict:
            _add(guards, "attribute", instance_dict, name, instance_dict[name], seen, depth)
            continue
        for klass in type(owner).__mro__:
            if name in vars(klass):
                value = vars(klass)[name]
                if type(value) is types.FunctionType and _is_user_code(value.__code__):
                    _collect(value, owner, guards, seen, depth + 1)
                elif _is_data(value):
                    _add(guards, "attribute", vars(klass), name, value, seen, depth)
                break


@functools.lru_cache(maxsize=4096)
def _instructions(code: types.CodeType) -> tuple[tuple[str, Any], ...]:
    """(opname, argval) of a code object's instructions, decoded once for the analyses below:
    argval as dis gives it for the loads they read (_ARGVALS), None for the rest; no
    EXTENDED_ARG prefixes (an attribute load after one still follows its name's load)."""
    if _ARGVALS is None:
        return _dis_instructions(code)
    names, raw = code.co_names, code.co_code
    local = getattr(code, "_varname_from_oparg", None)
    out = []
    extended = 0
    for at in range(0, len(raw), 2):
        op = raw[at]
        if op == _CACHE:
            continue
        arg = raw[at + 1] | extended
        if op == _EXTENDED_ARG:
            extended = arg << 8
            continue
        extended = 0
        how = _ARGVALS.get(op)
        if how is None:
            out.append((_OPNAMES[op], None))
        elif how == "name":
            out.append((_OPNAMES[op], names[arg]))
        elif how == "name>>1":
            out.append((_OPNAMES[op], names[arg >> 1]))
        elif how == "local":
            out.append((_OPNAMES[op], local(arg)))
        else:  # "local pair": two 4-bit local indices (3.13's LOAD_FAST_LOAD_FAST)
            out.append((_OPNAMES[op], (local(arg >> 4), local(arg & 15))))
    return tuple(out)


def _dis_instructions(code: types.CodeType) -> tuple[tuple[str, Any], ...]:
    """_instructions through dis (~5 us an instruction: the slow part of recording a new
    function's guards, hence the decoder above where the bytecode's layout is known)."""
    keep = _READ_OPNAMES
    return tuple(
        (ins.opname, ins.argval if ins.opname in keep else None)
        for ins in dis.get_instructions(code)
        if ins.opname != "EXTENDED_ARG"
    )


def _argvals() -> dict[int, str] | None:
    """{opcode: how its argval is found} for the loads the analyses read, on the bytecode
    layouts of CPython 3.11-3.13 (dis._get_instructions_bytes' rules); None elsewhere."""
    version = sys.version_info[:2]
    if not (3, 11) <= version <= (3, 13) or sys.implementation.name != "cpython":
        return None
    rules = {
        "LOAD_NAME": "name",
        "LOAD_GLOBAL": "name>>1",
        "LOAD_ATTR": "name" if version == (3, 11) else "name>>1",
        "LOAD_METHOD": "name",
        "LOAD_FAST": "local",
        "LOAD_FAST_CHECK": "local",
        "LOAD_DEREF": "local",
        "LOAD_FAST_LOAD_FAST": "local pair",
        "STORE_FAST_LOAD_FAST": "local pair",
    }
    return {dis.opmap[n]: how for n, how in rules.items() if dis.opmap.get(n, 256) < 256}


#: The instructions whose argval the analyses read (the others decode with argval None).
_READ_OPNAMES = frozenset(
    {"LOAD_NAME", "LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "LOAD_FAST", "LOAD_FAST_CHECK"}
    | {"LOAD_FAST_BORROW", "LOAD_DEREF", "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST"}
    | {"LOAD_FAST_BORROW_LOAD_FAST_BORROW"}
)
_ARGVALS = _argvals()
_OPNAMES = tuple(dis.opname)
_CACHE = dis.opmap.get("CACHE", 0)
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]


@functools.lru_cache(maxsize=4096)
def _global_loads(code: types.CodeType) -> tuple[str, ...]:
    """Names a code object (and the code objects nested in it) loads as globals."""
    names = []
    for opname, argval in _instructions(code):
        if opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(argval, str):
            names.append(argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_global_loads(const))
    return tuple(dict.fromkeys(names))


def _attribute_loads_after(code: types.CodeType, first_op: tuple, first_name) -> list:
    """(loaded name, attribute) pairs where an instruction in `first_op` loading a name is
    directly followed by an attribute load (`module.NAME`, `self.NAME`)."""
    pairs = []
    previous = None
    for opname, argval in _instructions(code):
        if opname in ("LOAD_ATTR", "LOAD_METHOD") and previous is not None:
            if isinstance(argval, str):
                pairs.append((previous, argval))
        if opname in _PAIRED_LOADS and isinstance(argval, tuple) and "LOAD_FAST" in first_op:
            opname, argval = "LOAD_FAST", argval[-1]  # (the name it pushes last)
        previous = (
            argval if opname in first_op and (first_name is None or argval == first_name) else None
        )
    return pairs


#: Instructions that load (or store, then load) two local variables at once, from Python 3.13
#: on (`x * self.weight` is LOAD_FAST_LOAD_FAST (x, self), LOAD_ATTR weight): their argval is
#: the pair of names, and the second is the one an attribute load right after reads.
_PAIRED_LOADS = frozenset(
    {"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW", "STORE_FAST_LOAD_FAST"}
)


@functools.lru_cache(maxsize=4096)
def _module_attribute_loads(code: types.CodeType) -> tuple:
    """(global name, attribute) pairs read as `name.attribute` (a module's variable)."""
    pairs = _attribute_loads_after(code, ("LOAD_GLOBAL", "LOAD_NAME"), None)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            pairs.extend(_module_attribute_loads(const))
    return tuple(dict.fromkeys(pairs))


@functools.lru_cache(maxsize=4096)
def _self_attribute_loads(code: types.CodeType) -> tuple[str, ...]:
    """Attributes a method reads from its first parameter (`self.name`)."""
    if code.co_argcount == 0:
        return ()
    this = code.co_varnames[0]
    pairs = _attribute_loads_after(
        code, ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF"), this
    )
    return tuple(dict.fromkeys(attr for _, attr in pairs))


_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _library_dirs() -> tuple[str, ...]:
    """This interpreter's standard library and package directories (its own and the site
    module's, the user's included)."""
    paths = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    try:
        import site

        paths += [*site.getsitepackages(), site.getusersitepackages()]
    except AttributeError:  # (an old virtualenv's site module lacks them)
        pass
    return tuple({os.path.abspath(p) + os.sep for p in paths if p})


_LIBRARY_DIRS = _library_dirs()
#: A file under a directory of one of these names is an installed package's wherever that
#: directory is: one put on sys.path by PYTHONPATH (a layered environment), or a system
#: Python's dist-packages, which its sysconfig paths do not name.
_PACKAGE_DIR_NAMES = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


@functools.lru_cache(maxsize=4096)
def _is_user_file(filename: str) -> bool:
    """Whether a source file is the user's (not kiln's, the standard library's or an installed
    package's): only user code is followed when looking for captured values."""
    if not filename or filename.startswith("<frozen"):
        return False
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    return (
        not path.startswith(_KILN_DIR)
        and not path.startswith(_LIBRARY_DIRS)
        and not any(name in path for name in _PACKAGE_DIR_NAMES)
    )


def _is_user_code(code: types.CodeType) -> bool:
    return _is_user_file(code.co_filename)


def _is_user_module(module: types.ModuleType) -> bool:
    return _is_user_file(getattr(module, "__file__", None) or "")


# --- describing captured values ------------------------------------------------------------------


def describe_value(value: Any) -> str:
    """A short description of a captured value for warnings."""
    aval = getattr(value, "aval", None)
    if aval is not None or isinstance(value, np.ndarray):
        shape = np.shape(value)
        dtype = getattr(value, "dtype", "")
        return f"an array of shape {shape} and dtype {dtype}"
    return repr(value)
