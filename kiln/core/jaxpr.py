"""The jaxpr IR: variables, literals, equations, jaxprs; the typechecker and the printer.

The printed form reproduces JAX's text: `{ lambda ; a:f32[]. let b:f32[] = log a in (b,) }`,
with variables named a, b, ..., z, ba, ... in order of appearance, shared across nested jaxprs.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from kiln.core import pretty as pp
from kiln.core.avals import ShapedArray


class Var:
    """A jaxpr variable: an SSA name with an abstract value."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self) -> str:
        return f"Var(id={id(self):x}):{self.aval.str_short()}"


class DropVar(Var):
    """An equation output that nothing reads; printed as `_`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"_:{self.aval.str_short()}"


class Literal:
    """A scalar constant written directly into an equation, printed as its value."""

    __slots__ = ("val", "aval")

    def __init__(self, val: Any, aval: ShapedArray):
        self.val = val
        self.aval = aval

    def __repr__(self) -> str:
        return format_literal(self.val)


def format_literal(val: Any) -> str:
    value = np.asarray(val)
    if value.dtype == np.bool_:
        return "True" if value else "False"
    return str(value[()]) if value.ndim == 0 else str(value)


Atom = Var | Literal


class JaxprEqn:
    """One equation `outvars = primitive[params] invars`."""

    __slots__ = ("primitive", "invars", "outvars", "params", "effects", "source")

    def __init__(
        self,
        primitive,
        invars: list,
        outvars: list,
        params: dict,
        effects: frozenset = frozenset(),
        source: str | None = None,
    ):
        self.primitive = primitive
        self.invars = list(invars)
        self.outvars = list(outvars)
        self.params = params
        self.effects = effects
        self.source = source

    def replace(self, **kw) -> "JaxprEqn":
        fields = dict(
            primitive=self.primitive,
            invars=self.invars,
            outvars=self.outvars,
            params=self.params,
            effects=self.effects,
            source=self.source,
        )
        fields.update(kw)
        return JaxprEqn(**fields)

    def __repr__(self) -> str:
        return pp_eqn(self, _Names()).format()


class Jaxpr:
    """A closed-over-nothing function: constvars and invars in, equations, outvars out."""

    __slots__ = ("constvars", "invars", "outvars", "eqns", "effects")

    def __init__(
        self,
        constvars: list,
        invars: list,
        outvars: list,
        eqns: list,
        effects: frozenset = frozenset(),
    ):
        self.constvars = list(constvars)
        self.invars = list(invars)
        self.outvars = list(outvars)
        self.eqns = list(eqns)
        self.effects = effects

    @property
    def in_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.invars]

    @property
    def out_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.outvars]

    def pretty_print(self, width: int = 80) -> str:
        return pp_jaxpr(self, _Names()).format(width)

    def __str__(self) -> str:
        return self.pretty_print()

    __repr__ = __str__


class ClosedJaxpr:
    """A jaxpr together with the values of its constvars."""

    __slots__ = ("jaxpr", "consts")

    def __init__(self, jaxpr: Jaxpr, consts: list):
        assert len(jaxpr.constvars) == len(consts)
        self.jaxpr = jaxpr
        self.consts = list(consts)

    @property
    def in_avals(self) -> list[ShapedArray]:
        return self.jaxpr.in_avals

    @property
    def out_avals(self) -> list[ShapedArray]:
        return self.jaxpr.out_avals

    @property
    def eqns(self) -> list[JaxprEqn]:
        return self.jaxpr.eqns

    def pretty_print(self, width: int = 80) -> str:
        return self.jaxpr.pretty_print(width)

    def __str__(self) -> str:
        return self.pretty_print()

    __repr__ = __str__


# --- printing ------------------------------------------------------------------------------


class _Names:
    """Assigns a, b, ..., z, ba, bb, ... to variables in the order they are first printed."""

    def __init__(self):
        self.names: dict[int, str] = {}

    def __call__(self, var: Var) -> str:
        if isinstance(var, DropVar):
            return "_"
        name = self.names.get(id(var))
        if name is None:
            name = _alphabetic(len(self.names))
            self.names[id(var)] = name
        return name


def _alphabetic(n: int) -> str:
    digits = ""
    while not digits or n:
        n, rem = divmod(n, 26)
        digits = chr(ord("a") + rem) + digits
    return digits


def _pp_atom(atom, names: _Names) -> str:
    return format_literal(atom.val) if isinstance(atom, Literal) else names(atom)


def _pp_binders(vars_: Iterable, names: _Names) -> pp.Doc:
    return pp.nest(
        2,
        pp.group(
            pp.join(
                pp.text(" "), [pp.text(f"{_pp_atom(v, names)}:{v.aval.str_short()}") for v in vars_]
            )
        ),
    )


def _pp_param_value(value: Any, names: _Names) -> pp.Doc:
    if isinstance(value, (Jaxpr, ClosedJaxpr)):
        return pp_jaxpr(value.jaxpr if isinstance(value, ClosedJaxpr) else value, names)
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(v, (Jaxpr, ClosedJaxpr)) for v in value)
    ):
        inner = [_pp_param_value(v, names) for v in value]
        return pp.group(
            pp.nest(2, pp.concat([pp.text("("), pp.brk(""), pp.join(pp.brk(), inner)]))
            + pp.brk("")
            + pp.text(")")
        )
    if isinstance(value, np.dtype):
        return pp.text(value.name)
    return pp.text(str(value))


def pp_eqn(eqn: JaxprEqn, names: _Names) -> pp.Doc:
    params = eqn.primitive.params_for_printing(eqn.params)
    parts = [pp.text(eqn.primitive.name)]
    if eqn.outvars:  # an effect-only equation (debug.print) binds nothing and shows no ` = `
        parts[:0] = [_pp_binders(eqn.outvars, names), pp.text(" = ")]
    if params:
        pairs = [pp.text(f"{k}=") + _pp_param_value(v, names) for k, v in sorted(params.items())]
        parts.append(
            pp.group(
                pp.nest(2, pp.concat([pp.text("["), pp.brk(""), pp.join(pp.brk(), pairs)]))
                + pp.brk("")
                + pp.text("]")
            )
        )
    args = pp.join(pp.text(" "), [pp.text(_pp_atom(a, names)) for a in eqn.invars])
    parts.append(pp.text(" ") + pp.nest(2, pp.group(args)))
    return pp.concat(parts)


def pp_jaxpr(jaxpr: Jaxpr, names: _Names) -> pp.Doc:
    constvars = _pp_binders(jaxpr.constvars, names)
    invars = _pp_binders(jaxpr.invars, names)
    eqns = pp.join(pp.brk(), [pp_eqn(e, names) for e in jaxpr.eqns])
    outs = ", ".join(_pp_atom(v, names) for v in jaxpr.outvars)
    outs = f"({outs},)" if len(jaxpr.outvars) == 1 else f"({outs})"
    body = pp.concat(
        [
            pp.text("{ lambda "),
            constvars,
            pp.text("; "),
            invars,
            pp.text(". let"),
            pp.nest(2, pp.brk() + eqns),
            pp.brk(),
            pp.text("in "),
            pp.text(outs),
        ]
    )
    return pp.group(pp.nest(2, body)) + pp.text(" }")


def name_variables(jaxpr: Jaxpr, names: _Names) -> None:
    """Name jaxpr's variables as pp_jaxpr does (in the order it prints them, sub-jaxprs in
    parameters included) without building the document: what the compiler needs to name
    its buffers after the printed jaxpr's variables."""
    for var in jaxpr.constvars:
        names(var)
    for var in jaxpr.invars:
        names(var)
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            names(var)
        if eqn.params:
            params = eqn.primitive.params_for_printing(eqn.params)
            for key in sorted(params):
                value = params[key]
                if isinstance(value, (Jaxpr, ClosedJaxpr)):
                    value = (value,)
                elif not (
                    isinstance(value, tuple)
                    and value
                    and all(isinstance(v, (Jaxpr, ClosedJaxpr)) for v in value)
                ):
                    continue
                for inner in value:
                    name_variables(inner.jaxpr if isinstance(inner, ClosedJaxpr) else inner, names)
        for atom in eqn.invars:
            if not isinstance(atom, Literal):
                names(atom)
    for atom in jaxpr.outvars:
        if not isinstance(atom, Literal):
            names(atom)


# --- typechecking ----------------------------------------------------------------------------


class JaxprTypeError(TypeError):
    pass


def _same_type(a: ShapedArray, b: ShapedArray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def typecheck_jaxpr(jaxpr: Jaxpr) -> None:
    """Check that every variable is bound once before use and every equation's output types
    match its primitive's abstract evaluation. Raises JaxprTypeError."""
    from kiln.core.rules import abstract_eval_rules  # the rules registry imports this module

    env: set[int] = set()

    def bind(v: Var) -> None:
        if isinstance(v, DropVar):
            return
        if id(v) in env:
            raise JaxprTypeError(f"variable {v} is bound twice")
        env.add(id(v))

    def read(a) -> None:
        if isinstance(a, Literal):
            if np.shape(a.val) != a.aval.shape:
                raise JaxprTypeError(f"literal {a} has the wrong shape for {a.aval}")
            return
        if id(a) not in env:
            raise JaxprTypeError(f"variable {a} is used before it is bound")

    for v in jaxpr.constvars + jaxpr.invars:
        bind(v)
    for eqn in jaxpr.eqns:
        for a in eqn.invars:
            read(a)
        rule = abstract_eval_rules.get(eqn.primitive)
        if rule is not None:
            out = rule(*[a.aval for a in eqn.invars], **eqn.params)
            out = out if eqn.primitive.multiple_results else [out]
            if len(out) != len(eqn.outvars):
                raise JaxprTypeError(
                    f"{eqn.primitive} produces {len(out)} values, equation binds {len(eqn.outvars)}"
                )
            for expect, var in zip(out, eqn.outvars):
                if not _same_type(expect, var.aval):
                    raise JaxprTypeError(
                        f"{eqn.primitive}: output typed {var.aval.str_short()} but the "
                        f"primitive produces {expect.str_short()}"
                    )
        for v in eqn.outvars:
            bind(v)
    for a in jaxpr.outvars:
        read(a)
