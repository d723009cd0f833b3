"""PyTorch's attention softmax (``safe_softmax``'s function) on CPUs, row by row, as a template.

MetaSchedule's CPU rules schedule the softmax's three row reductions (whether the row has a value
other than ``-inf``, its maximum, the sum of its exponentials) as loops of their own over the
whole tensor, and their vectorized configs read the rows through gathers (``vgatherqps``). This
schedule computes each row in one task of the parallel loop, its reductions and exponentials
while the row is in cache: each reduction sums ``lanes`` columns at once in a vector
(``rfactor``) and folds the vector at the end, and the exponentials and the output are vectors of
``lanes``. The knob ``lanes`` is how many columns a vector holds (16 float32 fill an AVX-512
register). The output is written in float32 or bfloat16 (what a bfloat16 matmul reads), the
cast in the same loop.

On a CPU every such softmax of a static shape goes to the template (``softmax_rows``): those of a
bfloat16 model that its batched matmuls read in bfloat16 (``autotvm.task.bfloat16``), the others
in float32.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import tvm
from tvm import relax, te

from ..checks import AutoTVMError
from .relax_calls import call_template, is_op, rewrite_bindings, shape_of
from .safe_softmax import FUNCTION, _softmax_zero_on_masked_rows
from .task import get_config, template

TEMPLATE = "x86/safe_softmax_rows"
# what the template writes (its argument ``out``)
OUT_DTYPES = ("float32", "bfloat16")
# the knob's values, the untuned build's first: 16 float32 fill an AVX-512 register
LANES = (16, 8, 32, 64)


def lanes_of(width: int) -> list[int]:
    """The ``LANES`` a row of ``width`` columns holds two or more whole vectors of."""
    return [lanes for lanes in LANES if width % lanes == 0 and lanes < width]


def fits(width: int) -> bool:
    """Whether a row of ``width`` columns holds two or more vectors of some ``LANES``."""
    return bool(lanes_of(width))


def safe_softmax_rows(rows: int, width: int, out: int = 0) -> Any:
    """The PrimFunc of ``safe_softmax`` over the rows of a (rows, width) float32 matrix, written in
    ``OUT_DTYPES[out]``."""
    scores = te.placeholder((rows, width), "float32", name="scores")
    soft = _softmax_zero_on_masked_rows(scores)
    dtype = OUT_DTYPES[out]
    result = te.compute(soft.shape, lambda *i: soft(*i).astype(dtype), name="out")
    return te.create_prim_func([scores, result])


def schedule(func: Any, lanes: int) -> tvm.s_tir.Schedule:
    """Each row a task of the parallel loop; its reductions and outputs vectors of ``lanes``."""
    sch = tvm.s_tir.Schedule(func)
    block = sch.get_sblock
    sch.compute_inline(block("shifted"))
    sch.compute_inline(block("safe_softmax"))
    partial = {}
    for name in ["scores_red", "T_fast_exp_red", "unmasked"]:  # a vector of partial results, folded at the row's end
        _, inner = sch.split(sch.get_loops(block(name))[-1], [None, lanes])
        partial[name] = sch.rfactor(inner, 0)
    row, column = sch.get_loops(block("out"))
    sch.parallel(row)
    sch.vectorize(sch.split(column, [None, lanes])[1])
    # each step under the row after the steps that read it
    for name in ["T_fast_exp_red", "T_fast_exp", "scores_red", "unmasked"]:
        sch.compute_at(block(name), row)
        if name in partial:
            sch.compute_at(partial[name], row)
    for rf in partial.values():
        lane, step = sch.get_loops(rf)[-2:]  # rfactor leaves the vector's lane outside the steps
        sch.reorder(step, lane)
        sch.vectorize(lane)
    sch.vectorize(sch.split(sch.get_loops(block("T_fast_exp"))[-1], [None, lanes])[1])
    return sch


@template(TEMPLATE)
def safe_softmax_template(rows: int, width: int, out: int = 0) -> tuple[Any, list]:
    """The row softmax as an AutoTVM template (its output type an index of ``OUT_DTYPES``): its
    knob is the vectors' ``lanes`` (``lanes_of`` the row)."""
    if not (isinstance(rows, int) and isinstance(width, int) and rows > 0 and fits(width)
            and out in range(len(OUT_DTYPES))):
        raise AutoTVMError(f"{TEMPLATE} takes rows > 0, a width of two or more vectors of {min(LANES)} "
                           f"and out in 0..{len(OUT_DTYPES) - 1}, got {(rows, width, out)!r}")
    cfg = get_config()
    cfg.define_knob("lanes", lanes_of(width))
    cfg.add_flop(5.0 * rows * width)
    return schedule(safe_softmax_rows(rows, width, out), cfg["lanes"].val), []


def call_rows(builder: Any, scores: Any, width: int, out: int = 0) -> Any:
    """A call of the template's function on ``scores`` (float32 of static shape, or a view of
    them) as rows of ``width`` (``fits``): a (rows, width) tensor of ``OUT_DTYPES[out]``."""
    rows = int(np.prod(shape_of(scores))) // width
    flat = builder.emit(relax.op.reshape(scores, (rows, width)))
    name = f"softmax_rows_{rows}x{width}" + ("_" + OUT_DTYPES[out]) * bool(out)
    return call_template(builder, safe_softmax_rows(rows, width, out), TEMPLATE, [rows, width, out], name, [flat],
                         (rows, width), OUT_DTYPES[out])


def scores_of(call: Any) -> Any:
    """The scores that ``call`` computes the softmax of, where it is a call of ``safe_softmax``'s
    function on float32 scores of static shape whose rows the template ``fits``; else None."""
    if not (is_op(call, "call_tir") and re.fullmatch(FUNCTION + r"\d*", call.args[0].name_hint)
            and len(call.args[1].fields) == 1):
        return None
    scores = call.args[1].fields[0]
    shape = shape_of(scores)
    return scores if shape and str(scores.ty.dtype) == "float32" and fits(shape[-1]) else None


def softmax_rows(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each softmax of ``safe_softmax``'s function that the template fits a call of
    the template, writing float32; a broadcast of its output to its own shape (PyTorch's
    ``expand`` before the product that reads it) is the output itself."""
    made: list = []

    def rewrite(rewriter: Any, call: Any) -> Any:
        if is_op(call, "broadcast_to") and shape_of(call) == shape_of(call.args[0]) \
                and any(rewriter.lookup(call.args[0]).same_as(m) for m in made):
            return call.args[0]
        scores = scores_of(call)
        if scores is None:
            return None
        shape = shape_of(scores)
        while is_op(rewriter.lookup(scores), "reshape"):  # read as rows through one reshape, not two
            scores = rewriter.lookup(scores).args[0]
        made.append(relax.op.reshape(call_rows(rewriter.builder_, scores, shape[-1]), shape))
        return made[-1]

    return rewrite_bindings(mod, rewrite)
