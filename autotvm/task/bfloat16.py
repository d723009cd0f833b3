"""A Relax program in bfloat16 on CPUs with AVX512-BF16: its matmuls and convolutions become calls
of the templates of ``autotvm.task.x86_bf16``.

Every ``matmul(x, W)`` and NHWC ``conv2d(x, W)`` (batch 1, one group, no dilation) with a constant
float32 weight that the micro-kernel tiles becomes a ``call_tir`` of its template's function,
marked so that fusion leaves it alone and tasks find it, on the weight packed in bfloat16 pairs
once, here; float32 in (a matmul's input cast to bfloat16 first, a convolution's inside its
kernel) and out. A convolution takes what follows it into its kernel: the bias that batch norm
folded into (``add`` of a constant), then a ReLU, or the residual added before the ReLU
(``x86_bf16.EPILOGUES``), where nothing else reads the values in between.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax

from . import x86_bf16


def _static_shape(expr: Any) -> list[int] | None:
    """A float32 tensor's shape when every dimension is known."""
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if getattr(ty, "dtype", None) != "float32" or shape is None or not all(
            isinstance(getattr(d, "value", None), int) for d in shape.values):
        return None
    return [int(d) for d in shape.values]


def _constant(expr: Any) -> np.ndarray | None:
    """A float32 constant's value."""
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) and expr.ty.dtype == "float32" else None


def _op(expr: Any, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax." + name


def _conv_layer(call: Any) -> x86_bf16.Conv2D | None:
    """The micro-kernel's form of a ``conv2d`` call it can compute, without its epilogue."""
    if not _op(call, "nn.conv2d"):
        return None
    shape, w, attrs = _static_shape(call.args[0]), _constant(call.args[1]), call.attrs
    if shape is None or w is None:
        return None
    strides, dilation = [int(v) for v in attrs.strides], [int(v) for v in attrs.dilation]
    if (str(attrs.data_layout) != "NHWC" or str(attrs.kernel_layout) != "OHWI" or str(attrs.out_layout) != "NHWC"
            or int(attrs.groups) != 1 or dilation != [1, 1] or strides[0] != strides[1] or shape[0] != 1
            or w.shape[3] != shape[3]):
        return None
    layer = x86_bf16.Conv2D(shape[1], shape[2], shape[3], w.shape[0], w.shape[1], w.shape[2], strides[0],
                            *[int(v) for v in attrs.padding])
    return layer if x86_bf16.conv2d_fits(layer) else None


class _Layers:
    """The convolutions of a function with the epilogue each takes in: for the call that ends
    each chain, (the layer, the conv2d call, its bias, the residual expression or None)."""

    def __init__(self, func: relax.Function) -> None:
        self.value: dict[Any, Any] = {}
        self.users: dict[Any, list] = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                self.value[binding.var] = binding.value
                for var in _vars_in(binding.value):
                    self.users.setdefault(var, []).append(binding.var)
        for var in _vars_in(func.body.body):
            self.users.setdefault(var, []).append(None)
        self.ends: dict[Any, tuple] = {}
        for var, value in self.value.items():
            layer = _conv_layer(value)
            if layer is not None:
                self._chain(var, value, layer)

    def _only_user(self, var: Any) -> tuple[Any, Any]:
        users = self.users.get(var, [])
        return (users[0], self.value.get(users[0])) if len(users) == 1 and users[0] is not None else (None, None)

    def _chain(self, var: Any, conv: Any, layer: x86_bf16.Conv2D) -> None:
        self.ends[conv] = (layer, conv, None, None)  # the convolution alone, unless a bias follows
        biased, add = self._only_user(var)
        if not _op(add, "add") or len(add.args) != 2 or not any(a.same_as(var) for a in add.args):
            return
        bias = next(_constant(a) for a in add.args if not a.same_as(var))
        if bias is None or bias.size != layer.co:
            return
        del self.ends[conv]
        bias = bias.reshape(layer.co)
        end, kind, residual = add, "bias", None
        follower_var, follower = self._only_user(biased)
        if _op(follower, "nn.relu"):
            end, kind = follower, "bias_relu"
        elif _op(follower, "add") and len(follower.args) == 2:
            other = next(a for a in follower.args if not a.same_as(biased)) if any(
                a.same_as(biased) for a in follower.args) else None
            _, relu = self._only_user(follower_var)
            claimed = any(k.same_as(relu) for k in self.ends)  # the other addend's layer took it in
            if other is not None and _constant(other) is None and _static_shape(other) == _static_shape(follower) \
                    and _op(relu, "nn.relu") and not claimed:
                end, kind, residual = relu, "bias_add_relu", other
        self.ends[end] = (layer._replace(epilogue=x86_bf16.EPILOGUES.index(kind)), conv, bias, residual)


def _vars_in(expr: Any) -> list:
    found: list = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e) if isinstance(e, relax.Var) else None)
    return found


@tvm.transform.module_pass(opt_level=0, name="ToBFloat16")
def to_bfloat16(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """The module with its matmuls and convolutions on the bfloat16 templates (module docstring)."""

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        layers: _Layers

        def visit_call_(self, call: Any) -> Any:
            end = next((v for k, v in self.layers.ends.items() if k.same_as(call)), None)
            if end is not None:
                return self.conv2d(*end)
            call = super().visit_call_(call)
            if _op(call, "matmul") and _constant(call.args[1]) is not None:
                new = self.matmul(call, _static_shape(call.args[0]), _constant(call.args[1]))
                return call if new is None else new
            return call

        def call_template(self, func: Any, template: str, args: list[int], name: str, inputs: list,
                          out_shape: tuple) -> Any:
            func = func.without_attr("global_symbol").with_attrs(
                {"autotvm.template": template, "autotvm.args": args, "op_pattern": 8})
            gvar = self.builder_.add_func(func, name)
            return self.builder_.emit(relax.call_tir(gvar, inputs, relax.TensorType(out_shape, "float32")))

        def matmul(self, call: Any, shape: list[int] | None, w: np.ndarray) -> Any:
            if shape is None or w.ndim != 2:
                return None
            (k, n), m = w.shape, int(np.prod(shape[:-1]))
            if shape[-1] != k or not x86_bf16.fits(m, k, n):
                return None
            rows = self.builder_.emit(relax.op.astype(relax.op.reshape(call.args[0], (m, k)), "bfloat16"))
            packed = relax.const(tvm.runtime.tensor(x86_bf16.pack_matmul_weight(w)))
            out = self.call_template(x86_bf16.matmul(m, k, n), x86_bf16.TEMPLATE, [m, k, n],
                                     f"matmul_bf16_{m}x{k}x{n}", [rows, packed], (m, n))
            return relax.op.reshape(out, (*shape[:-1], n))

        def conv2d(self, layer: x86_bf16.Conv2D, conv: Any, bias: np.ndarray | None, residual: Any) -> Any:
            inputs = [self.visit_expr(conv.args[0]),
                      relax.const(tvm.runtime.tensor(x86_bf16.pack_conv2d_weight(_constant(conv.args[1]))))]
            inputs += [] if bias is None else [relax.const(tvm.runtime.tensor(bias.astype(np.float32)))]
            inputs += [] if residual is None else [self.visit_expr(residual)]
            name = "conv2d_bf16_" + "_".join(map(str, layer[:-1])) + "_" + x86_bf16.EPILOGUES[layer.epilogue]
            return self.call_template(x86_bf16.conv2d(layer), x86_bf16.CONV_TEMPLATE, list(layer), name, inputs,
                                      (1, *layer.out, layer.co))

    rewrite = Rewrite(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewrite.layers = _Layers(func)
            rewrite.builder_.update_func(gvar, rewrite.visit_expr(func))
    # the convolutions and adds a kernel took in are left unused
    return relax.transform.DeadCodeElimination()(rewrite.builder_.get())
