"""A GPU's layer norm computes its input in its own kernel: what a transformer adds before each
of its norms (the residual, the bias, a split-K matmul's parts; the embeddings' lookups and sums)
is read where the norm reads it, not written by a kernel of its own.

``FuseOps`` puts an op that reads nothing but elementwise results into the kernel of the op that
reads it only where that op is elementwise, injective or a plain reduction. TVM marks
``layer_norm`` (its sums and its normalisation in one function) as one that takes an epilogue (a
cast after it) and no prologue, so each norm of a transformer follows a kernel that only adds:
two launches and a round trip through memory where one kernel does. ``norms_compute_their_inputs``
runs between ``FuseOps`` and ``FuseTIR``: a fused function (or a single call) without a reduction
whose value only a layer norm's function reads becomes part of that function, repeatedly (the
embeddings' cast, lookup, sum and norm become one), and ``FuseTIR`` makes each one PrimFunc, whose
elementwise blocks MetaSchedule inlines into the norm's reads.
"""

from __future__ import annotations

import re
from typing import Any

import tvm
from tvm import relax

from .relax_calls import bindings_of, is_op, rewrite_bindings, sblocks

_NORM = re.compile(r"layer_norm\d*")  # the PrimFuncs LegalizeOps makes of relax.nn.layer_norm
ENABLED = True  # False: FuseOps's functions stay as they are (to time a build without the merge)


@tvm.transform.module_pass(opt_level=0, name="NormsComputeTheirInputs")
def norms_compute_their_inputs(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """``mod`` (fused by ``FuseOps``) with each reduction-free function whose only reader is a
    layer norm's function merged into it, until none is left."""
    merged = ENABLED
    while merged:
        mod, merged = _merge_into_norms(mod)
    return mod


def _merge_into_norms(mod: tvm.IRModule) -> tuple[tvm.IRModule, bool]:
    """``mod`` with the producers that each norm's call reads merged into it, one step back
    (whether any was)."""
    values: dict = {}
    reads: dict = {}
    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not _primitive(func):
            func_values, func_reads = bindings_of(func)
            values.update(func_values)
            reads.update(func_reads)
    merged: list[str] = []

    def merge(rewriter: Any, call: Any) -> Any:
        norm = _part(mod, call)
        if norm is None or not any(_NORM.fullmatch(prim.name_hint) for prim in norm[0]):
            return None
        for k, operand in enumerate(norm[1]):
            producer = values.get(operand) if reads.get(operand) == 1 else None
            part = _part(mod, producer)
            if part is None or not isinstance(producer.ty, relax.TensorType) \
                    or any(_reduces(mod[prim]) for prim in part[0]):
                continue
            # the merged function's parameters: the producer's operands and the norm's others, no repeats
            operands = list(dict.fromkeys([*part[1], *norm[1][:k], *norm[1][k + 1:]]))
            params = {x: relax.Var(f"p{i}", x.ty) for i, x in enumerate(operands)}
            first, value = _bindings(mod, producer, [params[x] for x in part[1]])
            second, out = _bindings(mod, call, [value if i == k else params[x] for i, x in enumerate(norm[1])])
            func = relax.Function(list(params.values()), relax.SeqExpr([relax.DataflowBlock(first + second)], out),
                                  call.ty, True, tvm.ir.make_node("ir.DictAttrs", Primitive=True))
            name = "fused_" + "_".join(prim.name_hint.removeprefix("fused_") for prim in part[0] + norm[0])
            merged.append(name)
            return relax.Call(rewriter.builder_.add_func(func, name), operands)
        return None

    mod = rewrite_bindings(mod, merge)
    return mod, bool(merged)


def _primitive(func: Any) -> bool:
    return bool(func.attrs) and "Primitive" in func.attrs


def _part(mod: tvm.IRModule, call: Any) -> tuple[list, list] | None:
    """The PrimFuncs (their GlobalVars) that ``call`` runs and its operands, where it is a call of a
    fused function or a single ``call_tir``; else None."""
    if is_op(call, "call_tir"):
        return [call.args[0]], list(call.args[1].fields)
    func = mod[call.op] if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.GlobalVar) else None
    if not isinstance(func, relax.Function) or not _primitive(func):
        return None
    prims: list = []
    relax.analysis.post_order_visit(func.body, lambda e: prims.append(e.args[0]) if is_op(e, "call_tir") else None)
    return prims, list(call.args)


def _bindings(mod: tvm.IRModule, call: Any, operands: list) -> tuple[list, Any]:
    """The bindings that compute ``call`` from ``operands`` (new variables), and its value."""
    if is_op(call, "call_tir"):
        var = relax.Var("lv", call.ty)
        return [relax.VarBinding(var, relax.call_tir(call.args[0], operands, call.ty))], var
    func = relax.utils.copy_with_new_vars(mod[call.op])
    func = func.bind_params(dict(zip(func.params, operands)))
    return list(func.body.blocks[0].bindings), func.body.body


def _reduces(prim: Any) -> bool:
    """Whether a PrimFunc has a block with a reduction (or other non-spatial) axis."""
    from tvm.s_tir import Schedule

    sch = Schedule(prim)
    return any(int(var.iter_type) != 0 for block in sblocks(sch) for var in sch.get(block).iter_vars)
