"""A Relax program in bfloat16 on CPUs with AVX512-BF16: its matmuls and convolutions become calls
of the templates of ``autotvm.task.x86_bf16``.

Every ``matmul(x, W)`` and NHWC ``conv2d(x, W)`` (batch 1, one group, no dilation) with a constant
float32 weight that the micro-kernel tiles becomes a ``call_tir`` of its template's function,
marked so that fusion leaves it alone and tasks find it, on the weight packed in bfloat16 pairs
once, here; float32 in (a matmul's input cast to bfloat16 first, a convolution's inside its
kernel) and out. Each takes what follows it into its kernel (``x86_bf16.EPILOGUES``): the bias
(``add`` of a constant; a convolution's is where batch norm folded in), then a ReLU, GELU or
ReLU6, or a residual added, then a ReLU or not; where nothing else reads the values in between.
A matmul whose output only the next matmul reads (a feed-forward's first) writes it in bfloat16,
and so does a convolution whose output only other convolutions' kernels read, as their input or
their residual (``x86_bf16.Conv2D.io``): a ResNet's activations between its convolutions. A
depthwise convolution (MobileNetV2's; MetaSchedule's schedules) reads such an input as it is,
its weight in bfloat16, sums in float32, and writes its output in bfloat16 where only the
convolutions' kernels read it.

A matmul of two activations (attention's products: its query by its keys, its weights by its
values) becomes a call of the batched template, each operand cast to bfloat16 in the kernel that
computes it (the heads' copies) and the right one packed in pairs there too; an addend after it
(a mask) joins it. The softmax that computes its weights becomes a call of ``x86_softmax``'s
template (row by row, in float32), which writes them in bfloat16.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tvm
from tvm import relax

from . import x86_bf16, x86_softmax
from .relax_calls import call_template, clip_bounds, constant, is_op, nhwc_conv2d, sblocks, shape_of, static_shape

# False keeps the matmuls of two activations in float32 (to time a build without them)
BATCHED = True


def _conv_layer(call: Any) -> x86_bf16.Conv2D | None:
    """The micro-kernel's form of a ``conv2d`` call it can compute, without its epilogue."""
    conv = nhwc_conv2d(call)
    if conv is None or conv.shape[0] != 1:
        return None
    (_, h, w, c), (co, kh, kw, _) = conv.shape, conv.weight.value.shape
    layer = x86_bf16.Conv2D(h, w, c, int(co), int(kh), int(kw), conv.stride, *conv.padding)
    return layer if x86_bf16.conv2d_fits(layer) else None


def _depthwise(call: Any) -> bool:
    """Whether ``call`` is a depthwise NHWC convolution (a group a channel, batch 1, no dilation) of
    a float32 input with a constant float32 weight, which stays with MetaSchedule's schedules."""
    if not is_op(call, "nn.conv2d"):
        return False
    attrs, shape, weight = call.attrs, static_shape(call.args[0]), constant(call.args[1])
    return (shape is not None and weight is not None and shape[0] == 1 and int(attrs.groups) == shape[-1]
            == weight.shape[0] and weight.shape[-1] == 1 and [int(d) for d in attrs.dilation] == [1, 1]
            and (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) == ("NHWC", "OHWI", "NHWC")
            and str(attrs.out_dtype) in ("None", "", "float32", "void"))


class _Batched(NamedTuple):
    """A batched matmul of two activations (attention's): b products of m x k by k x n."""

    b: int
    m: int
    k: int
    n: int


def _batch_matmul_shape(call: Any) -> _Batched | None:
    """The ``_Batched`` form of a ``matmul(x, y)`` of two activations of static shapes
    (..., m, k) and (..., k, n), their leading axes the same, that the micro-kernel can compute."""
    x, y = static_shape(call.args[0]), static_shape(call.args[1])
    if x is None or y is None or constant(call.args[1]) is not None or len(x) < 2 or len(x) != len(y) \
            or x[:-2] != y[:-2] or x[-1] != y[-2]:
        return None
    (m, k), n = x[-2:], y[-1]
    return _Batched(int(np.prod(x[:-2])), m, k, n) if x86_bf16.fits(m, k, n) else None


def _matmul_shape(call: Any) -> tuple[int, int, int] | None:
    """(m, k, n) of a ``matmul(x, W)`` the micro-kernel can compute (x's leading axes as rows)."""
    shape, w = static_shape(call.args[0]), constant(call.args[1])
    if shape is None or w is None or w.ndim != 2 or shape[-1] != w.shape[0]:
        return None
    m, (k, n) = int(np.prod(shape[:-1])), w.shape
    return (m, k, n) if x86_bf16.fits(m, k, n) else None


class _Kernels:
    """The matmuls and convolutions of a function that go to the templates, each with the
    epilogue it takes in: keyed by the call that ends each chain, (the matmul's (m, k, n) or the
    convolution's ``Conv2D``, its call, its bias, the residual expression or None, the epilogue).
    An operation is taken in only where nothing else reads the value before it."""

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
        self.taken: list = []  # the calls a kernel takes in: no other kernel takes them in too
        for var, value in self.value.items():
            if is_op(value, "nn.conv2d"):
                layer = _conv_layer(value)
                channels = None if layer is None else layer.co
            elif BATCHED and is_op(value, "matmul") and (batched := _batch_matmul_shape(value)) is not None:
                self._batch_chain(var, value, batched)
                continue
            else:
                layer = _matmul_shape(value) if is_op(value, "matmul") else None
                channels = None if layer is None else layer[2]
            if layer is not None:
                self._chain(var, value, layer, channels)
        # a weight matmul's output that only the next weight matmul reads (the feed-forward's GELU,
        # read by its second matmul) is written in bfloat16 by its kernel, and read as it is; the
        # weight matmuls are the chains whose layer is a plain (m, k, n)
        matmuls = [op for layer, op, *_ in self.ends.values() if type(layer) is tuple]
        self.narrow = [value for var, value in self.value.items() if type(self.ends.get(value, (None,))[0]) is tuple
                       and any(op.same_as(self._past_reshapes(var)[2]) for op in matmuls)]
        # so is a convolution's output that only other convolutions' kernels read, as their input
        # or their residual (a ResNet's blocks but its last, the output of MobileNetV2's blocks)
        convs = [op for layer, op, *_ in self.ends.values() if isinstance(layer, x86_bf16.Conv2D)]
        residuals = [residual for layer, _, _, residual, _ in self.ends.values()
                     if isinstance(layer, x86_bf16.Conv2D) and residual is not None]

        # or as the input of a depthwise convolution (MobileNetV2's), which then reads it so
        self.depthwise = [value for value in self.value.values() if _depthwise(value)]

        def read_by_a_kernel(var: Any, user: Any, ops: list) -> bool:
            value = self.value.get(user)
            return any(op.same_as(value) for op in ops) and value.args[0].same_as(var)

        def only_kernels_read(var: Any, ops: list, or_residual: bool = False) -> bool:
            return bool(self.users.get(var)) and all(user is not None and (read_by_a_kernel(var, user, ops) or (
                or_residual and self._claimed(self.value.get(user)) and any(r.same_as(var) for r in residuals)))
                for user in self.users[var])

        self.narrow += [value for var, value in self.value.items()
                        if isinstance(self.ends.get(value, (None,))[0], x86_bf16.Conv2D)
                        and only_kernels_read(var, convs + self.depthwise, or_residual=True)]
        # and a depthwise convolution's output (after its bias and ReLU6) that only convolutions'
        # kernels read as their input is cast to bfloat16 in the depthwise kernel, which writes it so
        self.cast_inputs = [var for var in self.value if self._after_depthwise(var) and only_kernels_read(var, convs)]

    def _after_depthwise(self, var: Any) -> bool:
        """Whether ``var`` is a depthwise convolution's output, or that of a bias (an ``add`` of a
        constant), clip or ReLU after it, each the only reader of the value before it: what fusion
        joins in the depthwise convolution's kernel."""
        value = self.value.get(var)
        while is_op(value, "add") or is_op(value, "clip") or is_op(value, "nn.relu"):
            operands = [a for a in value.args if constant(a) is None] if is_op(value, "add") else value.args[:1]
            if len(operands) != 1 or len(self.users.get(operands[0], [])) != 1:
                return False
            value = self.value.get(operands[0])
        return any(op.same_as(value) for op in self.depthwise)

    def _only_user(self, var: Any) -> tuple[Any, Any]:
        users = self.users.get(var, [])
        return (users[0], self.value.get(users[0])) if len(users) == 1 and users[0] is not None else (None, None)

    def _past_reshapes(self, var: Any) -> tuple[Any, Any, Any]:
        """(the last of the reshapes that alone read ``var`` in a row, or ``var``; its only user's
        variable and value)."""
        user_var, user = self._only_user(var)
        while is_op(user, "reshape"):
            var = user_var
            user_var, user = self._only_user(var)
        return var, user_var, user

    def unreshaped(self, expr: Any) -> Any:
        """The value that ``expr`` reshapes (through reshapes in a row), or ``expr``."""
        while is_op(self.value.get(expr), "reshape"):
            expr = self.value[expr].args[0]
        return expr

    def _batch_chain(self, var: Any, op: Any, layer: _Batched) -> None:
        """The epilogue after a batched matmul: an addend of its rows and columns (an attention
        mask), the same for every product or one each."""
        _, add = self._only_user(var)
        other = _addend(add, var)
        shape = static_shape(other) if other is not None else None
        kind = "none"
        if shape is not None and static_shape(add) == static_shape(op) and not self._claimed(add):
            size = int(np.prod(shape))
            kind = ("none" if shape[-2:] != [layer.m, layer.n] else "add_broadcast" if size == layer.m * layer.n
                    else "add" if size == layer.b * layer.m * layer.n else "none")
        if kind == "none":
            self.ends[op] = (layer, op, None, None, kind)
            return
        self.taken.append(add)
        self.ends[add] = (layer, op, None, other, kind)

    def softmax_scores(self, expr: Any) -> Any:
        """The scores of the attention softmax (``safe_softmax``'s function) whose output ``expr``
        is, through reshapes and broadcasts to its own shape that alone read it; else None."""
        expr = self.unreshaped(expr)
        value = self.value.get(expr)
        while is_op(value, "broadcast_to") and shape_of(value.args[0]) == shape_of(value) \
                and self._only_user(value.args[0])[0] is not None:
            expr = value.args[0]
            value = self.value.get(expr)
        return x86_softmax.scores_of(value) if self._only_user(expr)[0] is not None else None

    def _claimed(self, call: Any) -> bool:
        return any(k.same_as(call) for k in self.taken)

    def took(self, call: Any) -> bool:
        """Whether a kernel takes ``call`` in (not the call that ends its chain)."""
        return self._claimed(call) or any(op.same_as(call) for _, op, *_ in self.ends.values())

    def _chain(self, var: Any, op: Any, layer: Any, channels: int) -> None:
        """The epilogue after ``op``: a bias (``add`` of a constant), then a ReLU, a GELU or a ReLU6,
        or a residual added (then a ReLU, or not)."""
        biased, add = self._only_user(var)
        bias = constant(_addend(add, var))  # one per output channel, broadcast over the rest
        if bias is None or bias.size != channels or bias.shape[-1] != channels or self._claimed(add):
            self.ends[op] = (layer, op, None, None, "none")
            return
        bias = bias.reshape(channels)
        end, kind, residual = add, "bias", None
        shaped, after_var, after = self._past_reshapes(biased)  # (m, n) back to the model's shape
        shape = static_shape(after)
        if shape is not None and (is_op(after, "nn.relu") or is_op(after, "nn.gelu")):
            end, kind = after, "bias_relu" if is_op(after, "nn.relu") else "bias_gelu"
        elif shape is not None and _relu6(after):
            end, kind = after, "bias_relu6"
        elif shape is not None and (other := _addend(after, shaped)) is not None and constant(other) is None \
                and static_shape(other) == shape and not self._claimed(after):  # the other addend's kernel took it
            end, kind, residual = after, "bias_add", other
            _, relu = self._only_user(after_var)
            if is_op(relu, "nn.relu"):
                end, kind = relu, "bias_add_relu"
        self.taken += [add] + ([after] if end is not add else []) + ([end] if end is not after else [])
        self.ends[end] = (layer, op, bias, residual, kind)


def _addend(call: Any, var: Any) -> Any:
    """The other operand of ``add(var, other)`` or ``add(other, var)``."""
    if not is_op(call, "add") or len(call.args) != 2 or not any(a.same_as(var) for a in call.args):
        return None
    return next(a for a in call.args if not a.same_as(var))


def _relu6(call: Any) -> bool:
    """Whether ``call`` is ``clip(x, 0, 6)`` (PyTorch's ReLU6, in MobileNetV2)."""
    return clip_bounds(call) == [0, 6]


def _vars_in(expr: Any) -> list:
    found: list = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e) if isinstance(e, relax.Var) else None)
    return found


@tvm.transform.module_pass(opt_level=0, name="ToBFloat16")
def to_bfloat16(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """The module with its matmuls and convolutions on the bfloat16 templates (module docstring)."""

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        kernels: _Kernels

        def visit_call_(self, call: Any) -> Any:
            end = next((v for k, v in self.kernels.ends.items() if k.same_as(call)), None)
            if end is None and any(op.same_as(call) for op in self.kernels.depthwise):
                return self.depthwise(call)
            if end is None:
                # a call a kernel took in is left as it was, unused: its operands may now be bfloat16
                return call if self.kernels.took(call) else super().visit_call_(call)
            layer, op, bias, residual, epilogue = end
            inputs = [] if bias is None else [relax.const(tvm.runtime.tensor(bias.astype(np.float32)))]
            narrow = any(k.same_as(call) for k in self.kernels.narrow)
            if isinstance(layer, _Batched):
                out = self.batch_matmul(layer, op, residual, x86_bf16.BATCH_EPILOGUES.index(epilogue))
            elif is_op(op, "nn.conv2d"):
                out = self.conv2d(layer, op, inputs, residual, x86_bf16.EPILOGUES.index(epilogue), narrow)
            else:
                out = self.matmul(layer, op, inputs, residual, x86_bf16.EPILOGUES.index(epilogue), int(narrow))
            shape = shape_of(call)  # the shape the chain ended in
            return out if shape_of(out) == shape else relax.op.reshape(out, shape)

        def matmul(self, layer: tuple[int, int, int], op: Any, epilogue_inputs: list, residual: Any,
                   epilogue: int, out: int = 0) -> Any:
            """Its input read in bfloat16 (cast first, unless a matmul wrote it so), its output written
            in ``x86_bf16.OUT_DTYPES[out]``."""
            (m, k, n), x = layer, self.visit_expr(op.args[0])
            rows = relax.op.reshape(x, (m, k))
            rows = self.builder_.emit(rows if str(x.ty.dtype) == "bfloat16" else relax.op.astype(rows, "bfloat16"))
            packed = relax.const(tvm.runtime.tensor(x86_bf16.pack_matmul_weight(constant(op.args[1]))))
            if residual is not None:
                epilogue_inputs.append(self.builder_.emit(relax.op.reshape(self.visit_expr(residual), (m, n))))
            name = f"matmul_bf16_{m}x{k}x{n}_{x86_bf16.EPILOGUES[epilogue]}" + ("_bf16" if out else "")
            return call_template(self.builder_, x86_bf16.matmul(m, k, n, epilogue, out), x86_bf16.TEMPLATE,
                                 [m, k, n, epilogue] + [out] * bool(out), name, [rows, packed, *epilogue_inputs],
                                 (m, n), x86_bf16.OUT_DTYPES[out])

        def batch_matmul(self, layer: _Batched, op: Any, addend: Any, epilogue: int) -> Any:
            """Both operands cast to bfloat16 where they are computed (the casts before their
            reshapes, so that they join the kernels that compute them: the heads' copies), the
            right one packed there too (``x86_bf16.batch_matmul``'s panels); a softmax's output
            written so by its template."""
            (b, m, k, n), kind = layer, x86_bf16.BATCH_EPILOGUES[epilogue]
            x, y = (relax.op.astype(self.visit_expr(self.kernels.unreshaped(arg)), "bfloat16") for arg in op.args)
            scores = self.kernels.softmax_scores(op.args[0])
            if scores is not None:  # the softmax on its template, row by row, written in bfloat16
                x = x86_softmax.call_rows(self.builder_, self.visit_expr(scores), shape_of(scores)[-1],
                                          x86_softmax.OUT_DTYPES.index("bfloat16"))
            rows = self.builder_.emit(relax.op.reshape(x, (b, m, k)))
            packed = self.builder_.emit(relax.op.permute_dims(relax.op.reshape(y, (b, k // 2, 2, n // 16, 16)),
                                                              [0, 3, 1, 4, 2]))
            inputs = [rows, packed]
            if kind != "none":
                inputs.append(self.builder_.emit(relax.op.reshape(
                    self.visit_expr(addend), (1 if kind == "add_broadcast" else b, m, n))))
            name = f"batch_matmul_bf16_{b}x{m}x{k}x{n}_{kind}"
            return call_template(self.builder_, x86_bf16.batch_matmul(b, m, k, n, epilogue), x86_bf16.BATCH_TEMPLATE,
                                 [b, m, k, n, epilogue], name, inputs, (b, m, n))

        def depthwise(self, call: Any) -> Any:
            """A depthwise convolution of an input a kernel wrote in bfloat16 reads it so, its weight
            bfloat16 too, and sums in float32."""
            import ml_dtypes

            x = self.visit_expr(call.args[0])
            if str(x.ty.dtype) != "bfloat16":
                return super().visit_call_(call)
            weight = relax.const(tvm.runtime.tensor(constant(call.args[1]).astype(ml_dtypes.bfloat16)))
            attrs = call.attrs
            return relax.op.nn.conv2d(x, weight, attrs.strides, attrs.padding, attrs.dilation, attrs.groups,
                                      "NHWC", "OHWI", "NHWC", "float32")

        def conv2d(self, layer: x86_bf16.Conv2D, op: Any, epilogue_inputs: list, residual: Any,
                   epilogue: int, narrow: bool) -> Any:
            """Its input and residual read as their kernels wrote them (``x86_bf16.Conv2D.io``), or
            a depthwise convolution's output cast where it is computed; its output written in
            bfloat16 where ``narrow``."""
            x = self.visit_expr(op.args[0])
            if str(x.ty.dtype) == "float32" and any(v.same_as(op.args[0]) for v in self.kernels.cast_inputs):
                x = self.builder_.emit(relax.op.astype(x, "bfloat16"))
            residual = None if residual is None else self.visit_expr(residual)
            bf16 = {"input": str(x.ty.dtype) == "bfloat16", "output": narrow,
                    "residual": residual is not None and str(residual.ty.dtype) == "bfloat16"}
            io = sum(1 << i for i, name in enumerate(x86_bf16.CONV_IO) if bf16[name])
            layer = layer._replace(epilogue=epilogue, io=io)
            packed = relax.const(tvm.runtime.tensor(x86_bf16.pack_conv2d_weight(constant(op.args[1]), layer)))
            inputs = [x, packed, *epilogue_inputs] + ([] if residual is None else [residual])
            name = "conv2d_bf16_" + "_".join(map(str, layer[:11])) + "_" + x86_bf16.EPILOGUES[epilogue] + \
                (f"_io{io}" if io else "")
            return call_template(self.builder_, x86_bf16.conv2d(layer), x86_bf16.CONV_TEMPLATE, layer.args, name,
                                 inputs, (1, *layer.out, layer.co), layer.dtype("output"))

    rewrite = Rewrite(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewrite.kernels = _Kernels(func)
            rewrite.builder_.update_func(gvar, rewrite.visit_expr(func))
    # the convolutions and adds a kernel took in are left unused
    return relax.transform.DeadCodeElimination()(rewrite.builder_.get())


@tvm.transform.module_pass(opt_level=0, name="BFloat16CastsInTheirProducers")
def casts_in_their_producers(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """A fused function's step that only casts a value it computed to bfloat16 (a softmax's output
    for the batched template) is done in the step that computes the value, which then writes
    bfloat16: on a CPU MetaSchedule inlines a step into its reader only, so the cast would stay a
    loop of its own, vectorized or not by each config apart from the rest. Other functions are
    left as they are."""
    from tvm.s_tir import Schedule

    for gvar, func in list(mod.functions_items()):
        if not isinstance(func, tvm.tirx.PrimFunc) or not any(str(p.dtype) == "bfloat16" for p in func.params):
            continue
        sch, changed = Schedule(func), False
        for block in sblocks(sch):
            store = sch.get(block).body
            value = getattr(store, "value", None)
            read = getattr(value, "value", None)
            if not (isinstance(store, tvm.tirx.BufferStore) and isinstance(value, tvm.tirx.Cast)
                    and str(value.ty) == "bfloat16" and hasattr(read, "source")
                    and not any(read.source.same_as(param) for param in func.params)):
                continue
            try:
                sch.reverse_compute_inline(block)
                changed = True
            except tvm.error.TVMError:  # its producer is not a step it can be computed in
                pass
        if changed:
            mod[gvar] = sch.mod["main"].with_attrs(func.attrs) if func.attrs else sch.mod["main"]
    return mod
