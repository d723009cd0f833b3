"""Fewer, larger kernels around a model's matmuls: what PyTorch's linear layers leave unfused.

``combine_parallel_matmuls``: matmuls that read one input with constant weights (a transformer's
query, key and value projections) become one matmul with their columns side by side. TVM's
``CombineParallelMatmul`` combines them (the weights and biases concatenated, which
``FoldConstant`` computes once after the weights are bound); three rewrites let it apply to a model
exported from PyTorch:

* ``add(bias, matmul)``, PyTorch's order for ``Linear``, becomes ``add(matmul, bias)``, the order
  the pass's pattern reads (it matches neither the matmul nor its bias otherwise);
* ``EliminateCommonSubexpr`` first, so that the projections read one variable, not equal
  reshapes of it;
* each part of the combined matmul's ``split`` becomes a ``strided_slice`` of it, which fuses into
  the kernel that reads it (a split is a kernel of its own that copies every column).

``epilogues_before_reshapes``: an elementwise op on a reshaped matmul output (a residual add, a
GELU, an attention mask) moves before the reshape, so that ``FuseOps`` puts it in the matmul's
kernel: a reshape ends a matmul's fusion group, and PyTorch's ``Linear`` on a 3-D input reshapes
its output back to 3-D right after the bias.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from .relax_calls import is_op, rewrite_bindings, shape_of

# elementwise ops that move before a reshape: one operand, or two with broadcasting
_UNARY = ("nn.gelu", "nn.gelu_tanh", "nn.relu", "nn.silu", "tanh", "sigmoid", "erf")
_BINARY = ("add", "subtract", "multiply", "divide")
_COMMUTATIVE = ("add", "multiply")


def combine_parallel_matmuls(mod: tvm.IRModule, weights: set[str]) -> tvm.IRModule:
    """``mod`` with the matmuls that share an input combined, where every weight and bias is one
    of the parameters named in ``weights`` (bound as constants afterwards), or its transpose."""

    def constant_weights(_lhs: Any, rhs: Any, bias: Any, bindings: Any) -> bool:
        def is_weight(var: Any) -> bool:
            value = bindings.get(var, var)
            value = value.args[0] if is_op(value, "permute_dims") else value
            return isinstance(value, relax.Var) and value.name in weights

        return all(is_weight(var) for var in [*rhs, *bias])

    mod = rewrite_bindings(mod, _bias_after_matmul)
    mod = relax.transform.EliminateCommonSubexpr()(mod)
    mod = relax.transform.CombineParallelMatmul(constant_weights)(mod)
    return rewrite_bindings(mod, _split_part_as_slice)


def epilogues_before_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each elementwise op on a reshaped matmul output (or on its epilogue) applied
    before the reshape, where the result is the same (see ``_before_reshape``); then TVM's
    ``RemoveRedundantReshape`` makes the two reshapes this leaves (there and back) one or none:
    two reshapes fuse into a kernel that copies, one is a view."""
    return relax.transform.RemoveRedundantReshape()(rewrite_bindings(mod, _before_reshape))


def _bias_after_matmul(rewriter: Any, expr: Any) -> Any:
    """``add(x, y)`` with ``y`` a matmul and ``x`` not: ``add(y, x)``; None otherwise."""
    if not is_op(expr, "add"):
        return None
    first, second = (rewriter.lookup(arg) for arg in expr.args)
    if is_op(second, "matmul") and not is_op(first, "matmul"):
        return relax.op.add(expr.args[1], expr.args[0])
    return None


def _split_part_as_slice(rewriter: Any, expr: Any) -> Any:
    """Part ``i`` of ``split(x, indices, axis)`` as ``strided_slice(x)`` of the same columns (static
    indices only); None otherwise."""
    if not isinstance(expr, relax.TupleGetItem):
        return None
    split = rewriter.lookup(expr.tuple_value)
    if not is_op(split, "split") or not isinstance(split.attrs.indices_or_sections, tvm.ir.Array):
        return None
    data, axis = split.args[0], int(split.attrs.axis)
    shape = shape_of(data)
    if shape is None:
        return None
    bounds = [0, *(int(i) for i in split.attrs.indices_or_sections), shape[axis]]
    return relax.op.strided_slice(data, axes=[axis], begin=[bounds[expr.index]], end=[bounds[expr.index + 1]])


def _before_reshape(rewriter: Any, expr: Any) -> Any:
    """``f(reshape(y, S))`` as ``reshape(f(y), S)`` and ``f(reshape(y, S), b)`` as
    ``reshape(f(y, b'), S)``, where ``y`` is a matmul's output or its epilogue's, ``f`` is
    elementwise and ``b'`` is ``b`` read in ``y``'s shape: ``b`` itself for a scalar, ``b``
    reshaped to ``y``'s shape where it has ``S``, or without its leading unit axis where ``S`` is
    ``y``'s shape with a leading unit axis (a broadcast mask). None where none of these holds."""
    op = getattr(expr, "op", None)
    name = op.name[len("relax."):] if isinstance(op, tvm.ir.Op) else None
    if name not in _UNARY + _BINARY:
        return None
    args = list(expr.args)
    swapped = name in _COMMUTATIVE and not is_op(rewriter.lookup(args[0]), "reshape")
    if swapped:
        args.reverse()
    reshape = rewriter.lookup(args[0])
    if not is_op(reshape, "reshape") or not _is_matmul_output(rewriter, reshape.args[0]):
        return None
    y = reshape.args[0]
    y_shape, shape = shape_of(y), shape_of(args[0])
    if y_shape is None or shape is None:
        return None
    emit = rewriter.builder_.emit
    if name in _UNARY:
        return relax.op.reshape(emit(relax.Call(expr.op, [y], expr.attrs)), shape)
    b_shape = shape_of(args[1])
    if b_shape is None:
        return None
    if not b_shape:
        other = args[1]
    elif b_shape == shape:
        other = emit(relax.op.reshape(args[1], y_shape))
    elif (shape == [1, *y_shape] and len(b_shape) == len(shape) and b_shape[0] == 1
          and all(b in (1, s) for b, s in zip(b_shape, shape))):
        other = emit(relax.op.reshape(args[1], b_shape[1:]))
    else:
        return None
    operands = [other, y] if swapped else [y, other]
    return relax.op.reshape(emit(relax.Call(expr.op, operands, expr.attrs)), shape)


def _is_matmul_output(rewriter: Any, var: Any, depth: int = 4) -> bool:
    """Whether ``var`` is a matmul's output, or an elementwise op's on one (up to ``depth`` ops)."""
    value = rewriter.lookup(var)
    if is_op(value, "matmul"):
        return True
    return depth > 0 and any(is_op(value, name) for name in _UNARY + _BINARY) and any(
        _is_matmul_output(rewriter, arg, depth - 1) for arg in value.args)
