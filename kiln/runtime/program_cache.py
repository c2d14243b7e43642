"""Warm starts: what the native backend derived from an optimized jaxpr, kept on disk.

With a disk cache ($KILN_CACHE_DIR), compiling a program records the results of its build's
expensive, deterministic steps -- the partition into stages (fusion.partition, with its trial
lowerings) and each native segment's plan (fusion.plan_segment: kernels, buffers, kernel IR)
-- and stores them under a key computed from the jaxpr itself. A later process that builds the
same program replays them instead of computing them; the kernel IR it replays is then found in
the engine's object cache by its fingerprint, so a warm build runs no fusion, no lowering, no
LLVM IR emission and no LLVM.

The key covers the jaxpr's structure (primitives, params, avals, literals, constants' bytes),
the program's name, kiln's source digest, the target and the versions: whatever could change
what the steps return. A program whose params hold something the key cannot describe (a
Python callable, say) is simply not cached. A replayed step must be asked the very question
it was recorded for (same equations, same outputs, same name and inlined scalars), else the
build computes that step and the ones after it afresh and rewrites the entry. Entries are
DiskCache entries (verified header, versions, CPU, length and checksum); their payload is read
with an unpickler that builds only kiln's, NumPy's and a few builtin types, and kiln's
primitives are written by name (an equation that fusion made itself is written whole).
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import importlib
import io
import logging
import pickle
import sys
import threading
from typing import Callable, Sequence

import numpy as np

from kiln.core import digest
from kiln.compiler import fusion
from kiln.config import config
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal
from kiln.core.primitive import Primitive
from kiln.runtime import disk_cache, kir_codec

__all__ = ["partition", "plan_segment", "program_key", "session", "stats"]

logger = logging.getLogger("kiln")

#: Bumped whenever the records' layout changes.
RECORD_VERSION = 1
#: Constants beyond this many bytes in all are not hashed: such a program is not cached.
MAX_CONST_BYTES = 64 << 20

#: What this process did: programs replayed, recorded (stored), not cacheable, diverged.
stats = {"replayed": 0, "stored": 0, "uncacheable": 0, "diverged": 0}


class _Uncacheable(Exception):
    """The program holds something its key cannot describe."""


# --- the key ---------------------------------------------------------------------------------


def _callable_name(fn) -> str:
    if fn is None:
        return "-"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


#: id(primitive) -> (primitive, its description)
_PRIMITIVES: dict = {}


def _primitive(prim: Primitive) -> tuple:
    found = _PRIMITIVES.get(id(prim))
    if found is None:
        # The name alone could be shared by a user's primitive: its rules tell them apart.
        from kiln.compiler import lower

        rules = (_callable_name(prim.rule("impl")), _callable_name(lower.lowering_rules.get(prim)))
        found = _PRIMITIVES[id(prim)] = (prim, ("prim", prim.name) + rules)
    return found[1]


def _aval(aval) -> tuple:
    if type(aval) is not ShapedArray:
        raise _Uncacheable(f"abstract value {type(aval).__name__}")
    return ("aval", aval.shape, kir_codec.dtype_text(aval.dtype), aval.weak_type)


def _array(value, budget: list) -> tuple:
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise _Uncacheable("object array")
    budget[0] -= array.nbytes
    if budget[0] < 0:
        raise _Uncacheable("constants too large to hash")
    data = np.ascontiguousarray(array).tobytes()
    return ("array", str(array.dtype), array.shape, digest.hexdigest(data))


def _param(value, budget: list):
    """A description of a param value that is equal exactly when the values are."""
    kind = type(value)
    if value is None or kind in (bool, int, float, complex, str, bytes):
        return (kind.__name__, repr(value))
    if isinstance(value, np.dtype):
        return ("dtype", str(value))
    if isinstance(value, (np.ndarray, np.generic)):
        return _array(value, budget)
    if isinstance(value, enum.Enum):
        return ("enum", _callable_name(kind), value.name)
    if isinstance(value, (tuple, list)):
        return (_callable_name(kind), tuple(_param(v, budget) for v in value))
    if isinstance(value, dict) and kind is dict:
        items = sorted((str(k), repr(k), _param(v, budget)) for k, v in value.items())
        return ("dict", tuple(items))
    if isinstance(value, (frozenset, set)):
        return ("set", tuple(sorted(repr(_param(v, budget)) for v in value)))
    if kind is slice:
        return ("slice", _param(value.start, budget), _param(value.stop, budget), value.step)
    if kind is ClosedJaxpr:
        return ("closed", _jaxpr(value.jaxpr, budget), _consts(value.consts, budget))
    if kind is Jaxpr:
        return ("jaxpr", _jaxpr(value, budget))
    if kind is ShapedArray:
        return _aval(value)
    if isinstance(value, Primitive):
        return _primitive(value)
    if isinstance(value, type) and issubclass(value, np.generic):
        return ("scalar type", str(np.dtype(value)))
    raise _Uncacheable(f"param of type {kind.__name__}")


def _consts(consts, budget: list) -> tuple:
    return tuple(_array(getattr(c, "_value", c), budget) for c in consts)


def _jaxpr(jaxpr: Jaxpr, budget: list) -> tuple:
    """The jaxpr's structure: variables numbered in order of definition."""
    numbers: dict = {}

    def define(var) -> tuple:
        if isinstance(var, DropVar):
            return ("drop", _aval(var.aval))
        numbers[id(var)] = len(numbers)
        return _aval(var.aval)

    def use(atom):
        if type(atom) is Literal:
            return ("literal", _aval(atom.aval), _array(atom.val, budget))
        number = numbers.get(id(atom))
        if number is None:
            raise _Uncacheable("a variable used before it is defined")
        return number

    parts: list = [
        ("constvars", tuple(define(v) for v in jaxpr.constvars)),
        ("invars", tuple(define(v) for v in jaxpr.invars)),
    ]
    for eqn in jaxpr.eqns:
        ins = tuple(use(a) for a in eqn.invars)
        params = tuple(
            sorted((name, repr(_param(value, budget))) for name, value in eqn.params.items())
        )
        effects = tuple(sorted(map(repr, eqn.effects)))
        outs = tuple(define(v) for v in eqn.outvars)
        parts.append((_primitive(eqn.primitive), ins, params, effects, outs))
    parts.append(("outvars", tuple(use(a) for a in jaxpr.outvars)))
    parts.append(("effects", tuple(sorted(map(repr, jaxpr.effects)))))
    return tuple(parts)


def program_key(program: ClosedJaxpr, hidden: Sequence, name: str, tag: str) -> str | None:
    """The key of a program's records (None when the program cannot be described): its
    structure, constants and hidden arguments, name, `tag` (the target), kiln's source
    digest and the record layout."""
    budget = [MAX_CONST_BYTES]
    try:
        description = (
            RECORD_VERSION,
            name,
            tag,
            _jaxpr(program.jaxpr, budget),
            _consts(program.consts, budget),
            _consts(hidden, budget),
        )
    except Exception as err:  # noqa: BLE001 - whatever it cannot describe is not cached
        logger.debug("kiln: %s is not cached on disk (%s)", name, err)
        return None
    text = f"{disk_cache.source_digest()} {description!r}"
    return "program-" + digest.hexdigest(text)


# --- records: plans with the jaxpr's objects as references -----------------------------------


def _references(jaxpr: Jaxpr) -> dict:
    """id(object) -> a name for every variable, equation and literal of a jaxpr (not of the
    jaxprs in its params)."""
    table: dict = {}
    for k, var in enumerate(jaxpr.constvars):
        table[id(var)] = ("c", k)
    for k, var in enumerate(jaxpr.invars):
        table[id(var)] = ("a", k)
    for n, eqn in enumerate(jaxpr.eqns):
        table[id(eqn)] = ("e", n)
        for k, atom in enumerate(eqn.invars):
            table.setdefault(id(atom), ("i", n, k))
        for k, var in enumerate(eqn.outvars):
            table[id(var)] = ("o", n, k)
    for k, atom in enumerate(jaxpr.outvars):
        table.setdefault(id(atom), ("r", k))
    return table


def _resolve(jaxpr: Jaxpr, reference: tuple):
    kind, n = reference[0], reference[1]
    if kind == "c":
        return jaxpr.constvars[n]
    if kind == "a":
        return jaxpr.invars[n]
    if kind == "r":
        return jaxpr.outvars[n]
    eqn = jaxpr.eqns[n]
    if kind == "e":
        return eqn
    return (eqn.invars if kind == "i" else eqn.outvars)[reference[2]]


_primitive_names: dict | None = None


def _primitive_reference(prim: Primitive) -> tuple[str, str]:
    """(module, attribute) of a primitive defined at the top of one of kiln's modules."""
    global _primitive_names
    if _primitive_names is None or id(prim) not in _primitive_names:
        found = {}
        for module_name, module in list(sys.modules.items()):
            if module is None or not (module_name == "kiln" or module_name.startswith("kiln.")):
                continue
            for attribute, value in list(vars(module).items()):
                if isinstance(value, Primitive):
                    found.setdefault(id(value), (value, module_name, attribute))
        _primitive_names = found
    entry = _primitive_names.get(id(prim))
    if entry is None or entry[0] is not prim:
        raise pickle.PicklingError(f"primitive {prim.name} is not one of kiln's own")
    return entry[1], entry[2]


def _primitive_named(module: str, attribute: str) -> Primitive:
    value = None
    if module == "kiln" or module.startswith("kiln."):
        value = getattr(importlib.import_module(module), attribute, None)
    if not isinstance(value, Primitive):
        raise pickle.UnpicklingError(f"kiln: {module}.{attribute} is not one of kiln's primitives")
    return value


class _PlanPickler(kir_codec.KirPickler):
    """Writes a plan: the jaxpr's variables, equations and literals become references;
    objects fusion made itself (equations and variables of rewritten products) are written
    whole, their primitives by name."""

    def __init__(self, file, references: dict):
        super().__init__(file)
        self._references = references

    def persistent_id(self, obj):
        found = self._references.get(id(obj))
        if found is not None:
            return found
        return super().persistent_id(obj)

    def reducer_override(self, obj):
        if isinstance(obj, Primitive):
            return (_primitive_named, _primitive_reference(obj))
        return super().reducer_override(obj)


#: What a record may be built from: kiln's own classes, NumPy's and ml_dtypes' (dtypes,
#: arrays), and these builtins.
_SAFE_BUILTINS = frozenset(
    {"set", "frozenset", "slice", "complex", "range", "getattr", "tuple", "list", "dict"}
)
_SAFE_MODULES = ("kiln.", "numpy", "ml_dtypes")


def _find_safe_class(find_class, module: str, name: str):
    if module == "builtins" and name in _SAFE_BUILTINS:
        return getattr(builtins, name)
    if (module == "copyreg" and name == "_reconstructor") or module.startswith(_SAFE_MODULES):
        return find_class(module, name)
    raise pickle.UnpicklingError(f"kiln: a cache record names {module}.{name}")


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return _find_safe_class(super().find_class, module, name)


def _safe_loads(data: bytes):
    """pickle.loads that builds only the classes a record may hold."""
    return _SafeUnpickler(io.BytesIO(data)).load()


class _PlanUnpickler(kir_codec.KirUnpickler):
    def __init__(self, file, dtypes, buffers, jaxpr):
        super().__init__(file, dtypes, buffers)
        self._jaxpr = jaxpr

    def persistent_load(self, pid):
        if pid[0] in ("b", "d"):
            return super().persistent_load(pid)
        return _resolve(self._jaxpr, pid)

    def find_class(self, module, name):
        return _find_safe_class(super().find_class, module, name)


def _dump_plan(plan, references: dict) -> bytes:
    out = io.BytesIO()
    pickler = _PlanPickler(out, references)
    pickler.dump(plan)
    return pickle.dumps((pickler.tables(), out.getvalue()), protocol=pickle.HIGHEST_PROTOCOL)


def _load_plan(data: bytes, jaxpr: Jaxpr):
    (dtypes, buffers), payload = _safe_loads(data)
    return _PlanUnpickler(io.BytesIO(payload), dtypes, buffers, jaxpr).load()


# --- sessions --------------------------------------------------------------------------------


class _Session:
    """One build of one program: the records it replays, and the ones it keeps (the replayed
    ones and, from a divergence on, the computed ones, which then replace the entry)."""

    def __init__(self, jaxpr: Jaxpr, key: str, cache: disk_cache.DiskCache, records):
        self.jaxpr = jaxpr
        self.key = key
        self.cache = cache
        self.replay = records  # list of (question, answer), or None
        self.recorded: list | None = []
        self.position = 0
        self.diverged = False
        self._references: dict | None = None

    @property
    def replaying(self) -> bool:
        """Whether this build replays records (some, at least)."""
        return self.replay is not None

    def references(self) -> dict:
        if self._references is None:
            self._references = _references(self.jaxpr)
        return self._references

    def question(self, what: str, *atoms_lists, extra=()) -> tuple | None:
        """A step's question in references (None if an atom has none)."""
        table = self.references()
        parts: list = [what]
        for atoms in atoms_lists:
            names = []
            for atom in atoms:
                found = table.get(id(atom))
                if found is None:
                    return None
                names.append(found)
            parts.append(tuple(names))
        parts.append(extra)
        return tuple(parts)

    def _diverge(self) -> None:
        if self.replay is not None and not self.diverged:
            self.diverged = True
            stats["diverged"] += 1

    def answer(self, question, compute: Callable, encode: Callable, decode: Callable):
        """Replay the next record if it answers `question`; else compute (and record)."""
        if self.replay is not None and not self.diverged:
            if self.position < len(self.replay) and self.replay[self.position][0] == question:
                record = self.replay[self.position]
                self.position += 1
                try:
                    result = decode(record[1])
                except Exception as err:  # noqa: BLE001 - a record that does not load is ignored
                    logger.warning("kiln: a cached plan did not load (%s); recomputing", err)
                else:
                    if self.recorded is not None:
                        self.recorded.append(record)
                    return result
            self._diverge()
        result = compute()
        if self.recorded is not None:
            if question is None:
                self.recorded = None
            else:
                try:
                    self.recorded.append((question, encode(result)))
                except Exception as err:  # noqa: BLE001 - an unrecordable step: nothing stored
                    logger.debug("kiln: a plan of %s is not cached (%s)", self.key, err)
                    self.recorded = None
        return result

    def finish(self) -> None:
        """After a successful build: store what was recorded, unless every step was replayed
        (the entry is right as it is)."""
        if self.replay is not None and self.position < len(self.replay):
            self._diverge()  # records the build never asked for
        if self.replay is not None and not self.diverged:
            stats["replayed"] += 1
            return
        if self.recorded is None:
            return
        payload = pickle.dumps(self.recorded, protocol=pickle.HIGHEST_PROTOCOL)
        self.cache.store(self.key, payload, None)
        stats["stored"] += 1


_local = threading.local()


def _active(jaxpr: Jaxpr) -> _Session | None:
    sessions = getattr(_local, "sessions", None)
    return sessions.get(id(jaxpr)) if sessions else None


def _decode_records(entry) -> list | None:
    payload, _ = entry
    try:
        records = _safe_loads(payload)
    except Exception:  # noqa: BLE001 - a verified entry of another layout: ignored
        return None
    if not isinstance(records, list) or not all(
        isinstance(r, tuple) and len(r) == 2 and isinstance(r[1], bytes) for r in records
    ):
        return None
    return records


@contextlib.contextmanager
def session(program: ClosedJaxpr, hidden: Sequence, name: str, replay: bool = True):
    """Record or replay the build of `program` (the jaxpr a backend is given) while the block
    runs, when a disk cache is configured; the records are stored if the block succeeds.
    Yields the session (None when nothing is cached); replay=False only records."""
    from kiln.runtime import engine

    if not config.cache_dir:
        yield None
        return
    cache = engine.engine().disk_cache
    target = engine.engine().target
    key = program_key(program, hidden, name, target.cache_tag) if cache is not None else None
    if key is None:
        if cache is not None:
            stats["uncacheable"] += 1
        yield None
        return
    entry = cache.load(key) if replay else None
    records = _decode_records(entry) if entry is not None else None
    current = _Session(program.jaxpr, key, cache, records)
    sessions = getattr(_local, "sessions", None)
    if sessions is None:
        sessions = _local.sessions = {}
    sessions[id(program.jaxpr)] = current
    try:
        yield current
        try:
            current.finish()
        except Exception as err:  # noqa: BLE001 - the cache must never fail a compile
            logger.warning("kiln: could not store the build of %s (%s)", name, err)
    finally:
        sessions.pop(id(program.jaxpr), None)


# --- the steps -------------------------------------------------------------------------------


def partition(jaxpr: Jaxpr, is_native: Callable) -> list[fusion.Stage]:
    """fusion.partition of a jaxpr's equations, replayed when its session has it."""
    current = _active(jaxpr)
    if current is None:
        return fusion.partition(jaxpr.eqns, jaxpr.outvars, is_native)
    eqns = jaxpr.eqns
    positions = {id(e): n for n, e in enumerate(eqns)}
    question = ("partition", len(eqns))

    def encode(stages):
        return pickle.dumps([(s.native, [positions[id(e)] for e in s.eqns]) for s in stages])

    def decode(data):
        return [
            fusion.Stage(native, [eqns[n] for n in numbers])
            for native, numbers in _safe_loads(data)
        ]

    return current.answer(
        question, lambda: fusion.partition(eqns, jaxpr.outvars, is_native), encode, decode
    )


def plan_segment(
    jaxpr: Jaxpr,
    eqns: Sequence[JaxprEqn],
    outputs: Sequence,
    name: str,
    scalars: dict,
    names: Callable | None = None,
) -> fusion.SegmentPlan:
    """fusion.plan_segment of one native stage of a jaxpr, replayed when its session has it."""
    current = _active(jaxpr)
    if current is None:
        return fusion.plan_segment(eqns, outputs, name, scalars, names)
    scalar_items = list(scalars.items())
    question = current.question(
        "plan",
        eqns,
        outputs,
        [var for var, _ in scalar_items],
        extra=(name, tuple(repr(value) for _, value in scalar_items)),
    )
    return current.answer(
        question,
        lambda: fusion.plan_segment(eqns, outputs, name, scalars, names),
        lambda plan: _dump_plan(plan, current.references()),
        lambda data: _load_plan(data, jaxpr),
    )
