"""A float16 model's casts in the kernels around them, not kernels of their own.

``ToMixedPrecision`` leaves a layer norm in float32 and casts its output to float16 for the matmul
after it, while the residual add further on reads the float32 output. With two readers, the cast
cannot fuse into the norm's kernel, and with a reshape between them it could not anyway: each
such cast is a kernel that copies (13 in MiniLM). ``casts_where_computed`` casts the value once,
right where it is computed (the cast then fuses into that kernel), reshapes the float16 value
(a view), and has every float32 reader read the float16 value cast back (a cast that fuses into
the reader's kernel): the value is rounded to float16 once for all its readers, as in a PyTorch
model run in half precision.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_calls import RESHAPES, bindings_of, is_op, rewrite_planned, shape_of


@tvm.transform.module_pass(opt_level=0, name="CastsWhereComputed")
def casts_where_computed(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """``mod`` with each float32 value that is cast to float16, directly or after reshapes, cast
    where it is computed (see the module's doc), where nothing else reads it or the reshapes."""
    return rewrite_planned(mod, _plans, _Rewriter)


def _plans(func: Any) -> dict[Any, Any]:
    """For each float32 value ``v`` (a dataflow variable) cast to float16 by some of its readers,
    the value it reshapes (``v`` itself where none), read by nothing else on the way."""
    values, users = bindings_of(func)
    plans = {}
    for value in values.values():
        if not (is_op(value, "astype") and str(value.ty.dtype) == "float16"):
            continue
        read = value.args[0]
        if not isinstance(read, relax.DataflowVar) or str(read.ty.dtype) != "float32" or shape_of(read) is None:
            continue
        source = read  # back through reshapes that nothing else reads
        while any(is_op(values.get(source), name) for name in RESHAPES):
            inner = values[source].args[0]
            if not isinstance(inner, relax.DataflowVar) or users.get(inner, 0) != 1:
                break
            source = inner
        if source is read and users.get(read, 0) == 1:
            continue  # the cast alone reads it where it is computed: it fuses as it is
        plans[read] = source
    return plans


@mutator
class _Rewriter(PyExprMutator):
    """Casts each planned value where its source is computed; its casts become the float16 value,
    its other readers read that value cast back."""

    def __init__(self, mod: tvm.IRModule, plans: dict) -> None:
        super().__init__(mod)
        self.plans = plans
        self.half = {}  # planned value -> its float16 version

    def visit_var_binding_(self, binding: Any) -> None:
        value = binding.value
        if is_op(value, "astype") and value.args[0] in self.half and str(value.ty.dtype) == "float16":
            self.builder_.emit_normalized(relax.VarBinding(binding.var, self.half[value.args[0]]))
            return
        super().visit_var_binding_(binding)
        if binding.var in self.plans:
            emit = self.builder_.emit
            half = emit(relax.op.astype(self.visit_expr(self.plans[binding.var]), "float16"))
            if shape_of(half) != shape_of(binding.var):
                half = emit(relax.op.reshape(half, shape_of(binding.var)))
            self.half[binding.var] = half

    def visit_dataflow_var_(self, var: Any) -> Any:
        if var in self.half:  # a float32 reader: the float16 value cast back
            return self.builder_.emit(relax.op.astype(self.half[var], "float32"))
        return super().visit_dataflow_var_(var)
