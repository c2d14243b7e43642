"""Control flow: `lax.cond`, `lax.switch`, `lax.while_loop`, `lax.fori_loop`, `lax.scan` and
`lax.map`, built on three primitives with sub-jaxprs (cond, while, scan).

The primitives live in control_flow_cond.py, control_flow_loops.py and control_flow_scan.py,
the shared tracing, type-checking, evaluation and dead-code machinery in control_flow_common.py;
this module is the family's public face (kiln.lax star-imports it).
"""

from kiln.primitives.control_flow_cond import cond, cond_p, switch
from kiln.primitives.control_flow_loops import fori_loop, while_loop, while_p
from kiln.primitives.control_flow_scan import map, scan, scan_p

__all__ = [
    "cond",
    "switch",
    "while_loop",
    "fori_loop",
    "scan",
    "map",
    "cond_p",
    "while_p",
    "scan_p",
    "CONTROL_FLOW_PRIMITIVES",
]

#: The primitives whose equations hold sub-programs run per iteration or branch.
CONTROL_FLOW_PRIMITIVES = (while_p, scan_p, cond_p)
