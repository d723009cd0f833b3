"""Readers of Relax calls that the program rewrites share (``bfloat16``, ``winograd``,
``matmul_fusion``, ``safe_softmax``, ``matmul_views``, ``float16_casts``, ``norm_prologues``), the
bindings of a function, the rewriter of a module's bindings and the blocks of a schedule."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator


def is_op(expr: Any, name: str) -> bool:
    """Whether ``expr`` calls the Relax operator ``relax.<name>``."""
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax." + name


def shape_of(expr: Any) -> list[int] | None:
    """A tensor's shape when every dimension is known."""
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    values = getattr(shape, "values", None)
    if values is None or not all(isinstance(getattr(d, "value", None), int) for d in values):
        return None
    return [int(d) for d in values]


def static_shape(expr: Any) -> list[int] | None:
    """A float32 tensor's shape when every dimension is known."""
    return shape_of(expr) if getattr(getattr(expr, "ty", None), "dtype", None) == "float32" else None


def clip_bounds(call: Any) -> list:
    """The bounds of ``clip(x, low, high)`` as Python numbers where they are scalars (an empty
    list for any other call)."""
    return [getattr(bound, "value", None) for bound in call.args[1:]] if is_op(call, "clip") else []


def constant(expr: Any) -> np.ndarray | None:
    """A float32 constant's value (None for anything else, None included)."""
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) and expr.ty.dtype == "float32" else None


class NHWCConv2D(NamedTuple):
    """An NHWC/OHWI convolution of static shape, one group, no dilation, one stride for both axes,
    with a constant weight, its input and weight of one dtype (summed in it, or in float32)."""

    shape: list[int]  # the input's, NHWC
    weight: Any  # the constant, OHWI (its ``.value`` a tensor)
    stride: int
    padding: tuple[int, int, int, int]  # top, left, bottom, right


def nhwc_conv2d(call: Any, dtype: str = "float32") -> NHWCConv2D | None:
    """``call`` as an ``NHWCConv2D`` reading ``dtype``, or None where it is not one."""
    if not is_op(call, "nn.conv2d"):
        return None
    attrs, (data, weight) = call.attrs, call.args
    shape = shape_of(data) if getattr(getattr(data, "ty", None), "dtype", None) == dtype else None
    if (shape is None or not isinstance(weight, tvm.ir.expr.Constant) or weight.ty.dtype != dtype
            or int(attrs.groups) != 1 or [int(d) for d in attrs.dilation] != [1, 1]
            or (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NHWC", "OHWI", "NHWC")
            or str(attrs.out_dtype) not in ("None", "", "float32", "void", dtype)):
        return None
    strides = [int(s) for s in attrs.strides]
    if strides[0] != strides[1]:
        return None
    return NHWCConv2D(shape, weight, strides[0], tuple(int(p) for p in attrs.padding))


RESHAPES = ("reshape", "squeeze", "expand_dims")  # views that keep the elements' order


def bindings_of(func: Any) -> tuple[dict, dict]:
    """A Relax function's bindings (variable -> the value bound to it) and how many times each
    variable is read (by the bindings and the function's result)."""
    values: dict = {}
    reads: dict = {}

    def count(expr: Any) -> None:
        if isinstance(expr, relax.Var):
            reads[expr] = reads.get(expr, 0) + 1

    for block in func.body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding):
                values[binding.var] = binding.value
                relax.analysis.post_order_visit(binding.value, count)
    relax.analysis.post_order_visit(func.body.body, count)
    return values, reads


def sblocks(sch: Any, parent: Any = None) -> list:
    """Every block of a TensorIR schedule's function under ``parent`` (default: its root), depth first."""
    found = []
    for child in sch.get_child_blocks(sch.get_sblock("root") if parent is None else parent):
        found += [child, *sblocks(sch, child)]
    return found


def rewrite_bindings(mod: tvm.IRModule, rewrite: Any) -> tvm.IRModule:
    """``mod`` with each call and tuple item of its Relax functions that ``rewrite(rewriter, expr)``
    replaces (``rewriter.lookup(var)``: the value bound to a variable, or the expression itself;
    ``rewriter.builder_.emit`` binds a new one); the bindings nothing uses any longer removed."""

    @mutator
    class Rewrite(PyExprMutator):
        def lookup(self, expr: Any) -> Any:
            value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
            return expr if value is None else value

        def visit_call_(self, call: Any) -> Any:
            call = self.visit_expr_post_order(call)
            new = rewrite(self, call)
            return call if new is None else new

        def visit_tuple_getitem_(self, item: Any) -> Any:
            item = self.visit_expr_post_order(item)
            new = rewrite(self, item)
            return item if new is None else new

    rewriter = Rewrite(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, relax.analysis.remove_all_unused(rewriter.visit_expr(func)))
    return rewriter.builder_.get()


def call_template(builder: Any, func: Any, template: str, args: list[int], name: str, inputs: list,
                  out_shape: tuple, dtype: str = "float32") -> Any:
    """A ``call_tir`` of ``func``, a template's function of ``args``, marked so that fusion leaves
    it alone (``op_pattern`` opaque) and tasks find its template (``autotvm.template``,
    ``autotvm.args``)."""
    func = func.without_attr("global_symbol").with_attrs(
        {"autotvm.template": template, "autotvm.args": args, "op_pattern": 8})
    gvar = builder.add_func(func, name)
    return builder.emit(relax.call_tir(gvar, inputs, relax.TensorType(out_shape, dtype)))


def rewrite_planned(mod: tvm.IRModule, plan: Any, rewriter: Any) -> tvm.IRModule:
    """``mod`` with each Relax function in which ``plan(func)`` finds something to do (a non-empty
    dict) rewritten by ``rewriter(mod, plans)``, an expression mutator; the bindings nothing uses
    any longer removed."""
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            plans = plan(func)
            if plans:
                mutator_ = rewriter(mod, plans)
                mutator_.builder_.update_func(gvar, relax.analysis.remove_all_unused(mutator_.visit_expr(func)))
                mod = mutator_.builder_.get()
    return mod
