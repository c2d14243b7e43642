"""The rule registries, keyed by primitive object. A primitive adds its rules through its
`def_<kind>` methods (core/primitive.py); the compiler keeps its own tables of the same type for
lowering and simplification. Interpreters (eager evaluation, tracing, jvp, transpose, batching,
lowering) only read them."""

from __future__ import annotations

from typing import Callable


class RuleTable(dict):
    """The rules of one kind, keyed by primitive. `register` is the one way to add a rule;
    reading is a plain dict lookup (`table.get(prim)`, `prim in table`)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, *prims) -> Callable[[Callable], Callable]:
        """Decorator: `@table.register(a_p, b_p)` stores the function as the rule of each."""

        def decorate(rule: Callable) -> Callable:
            for prim in prims:
                self[prim] = rule
            return rule

        return decorate

    def __repr__(self) -> str:
        return f"RuleTable({self.kind!r}, {len(self)} rules)"


impl_rules = RuleTable("impl")  # f(*numpy_values, **params) -> value | list
abstract_eval_rules = RuleTable("abstract_eval")  # f(*avals, **params) -> aval | list[aval]
jvp_rules = RuleTable("jvp")  # f(primals, tangents, **params) -> (out, out_tangent);
#                                       a tangent of None is a symbolic zero
transpose_rules = RuleTable("transpose")  # f(cotangent, *args, **params) -> list (one per arg;
#                                           None for an argument that is not linear)
batching_rules = RuleTable("batching")
# f(trace, args, batch_dims, **params) -> (outs, out_dims): vmap of a primitive that names an
# axis (psum, axis_index, ...); it sees the batch trace, to compare its axis name and size
collective_batching_rules = RuleTable(
    "collective_batching"
)  # f(args, batch_dims, **params) -> (outs, out_dims)
effects_rules = RuleTable("effects")  # f(**params) -> frozenset of effect names; an equation
#                                         with effects is never removed, merged, folded or
#                                         reordered
partial_eval_rules = RuleTable("partial_eval")  # f(trace, args, **params) -> out | list:
#   how a primitive with sub-jaxprs splits into a known part (run now) and an unknown part
#   (staged), when some of `args` are the partial-evaluation trace's unknown tracers
dce_rules = RuleTable("dce")  # f(used_outputs, eqn) -> (used_inputs, new_eqn | None): dead code
#                               of primitives with sub-jaxprs

#: Every kind a primitive registers through `Primitive.def_<kind>`.
PRIMITIVE_RULE_TABLES = {
    table.kind: table
    for table in (
        impl_rules,
        abstract_eval_rules,
        jvp_rules,
        transpose_rules,
        batching_rules,
        collective_batching_rules,
        effects_rules,
        dce_rules,
        partial_eval_rules,
    )
}
