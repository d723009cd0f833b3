"""PyTorch's attention softmax as one function.

``scaled_dot_product_attention`` exports its softmax as ``_safe_softmax``: a row whose scores are
all ``-inf`` (every key masked) gives zeros, not NaN. In Relax that is a softmax, a second pass
over the scores that asks whether each row is all ``-inf`` (``equal``, ``logical_not``, ``max``
over int8), and a ``where`` with a constant of zeros the size of the scores: two functions that
each read the scores, and a constant read beside them. The rewrite computes them as one function
(three row reductions, one output): whether the row has a value other than ``-inf``, its maximum,
the sum of the exponentials (TVM's fast exp, as ``FastMathTransform`` gives a softmax), then the
softmax, or zero on a row without such a value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import te, tirx, topi

from .relax_calls import is_op, rewrite_bindings


# the name of the function the rewrite makes (a module's copies for other shapes get a number after it)
FUNCTION = "safe_softmax"


def one_function_safe_softmax(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each ``_safe_softmax`` over the last axis as one function."""
    return rewrite_bindings(mod, _safe_softmax)


def _safe_softmax(rewriter: Any, expr: Any) -> Any:
    """``where(all(x == -inf, -1), 0, softmax(x, -1))``, as PyTorch exports it, as one call of
    ``_softmax_zero_on_masked_rows``; None for anything else."""
    if not is_op(expr, "where"):
        return None
    masked, zeros, soft = (rewriter.lookup(arg) for arg in expr.args)
    if not is_op(soft, "nn.softmax") or int(soft.attrs.axis) not in (-1, soft.args[0].ty.ndim - 1):
        return None
    scores = soft.args[0]
    value = masked  # not(bool(max(int8(not(scores == -inf)), -1))): PyTorch's all() over the row
    for name in ("logical_not", "astype", "max", "astype", "logical_not", "equal"):
        if not is_op(value, name):
            return None
        if name == "max" and ([int(a) for a in value.attrs.axis] not in ([-1], [scores.ty.ndim - 1])
                              or not value.attrs.keepdims):
            return None
        if name != "equal":
            value = rewriter.lookup(value.args[0])
    minus_inf = rewriter.lookup(value.args[1])
    if (not value.args[0].same_as(scores) or not isinstance(minus_inf, tvm.ir.expr.Constant)
            or not np.all(np.isneginf(minus_inf.value.numpy()))):
        return None
    if is_op(zeros, "full_like") or is_op(zeros, "full"):
        zeros = rewriter.lookup(zeros.args[1])
    if not isinstance(zeros, tvm.ir.expr.Constant) or np.any(zeros.value.numpy()):
        return None
    return rewriter.builder_.call_te(_softmax_zero_on_masked_rows, scores, primfunc_name_hint=FUNCTION)


def _softmax_zero_on_masked_rows(x: te.Tensor) -> te.Tensor:
    """Softmax over the last axis, zero on a row whose values are all ``-inf``."""
    minus_inf = tirx.const(float("-inf"), x.dtype)
    *rows, width = x.shape
    k = te.reduce_axis((0, width), "k")
    unmasked = te.compute(rows, lambda *row: te.max(tirx.Select(x(*row, k) == minus_inf, tirx.const(0, "int8"),
                                                                  tirx.const(1, "int8")), axis=k), name="unmasked")
    row_max = topi.max(x, axis=-1)
    exp = topi.fast_exp(te.compute(x.shape, lambda *i: x(*i) - row_max(*i[:-1]), name="shifted"))
    total = topi.sum(exp, axis=-1)

    def value(*index: Any) -> Any:
        row = index[:-1]
        return tirx.Select(unmasked(*row) == tirx.const(0, "int8"), tirx.const(0, x.dtype), exp(*index) / total(*row))

    return te.compute(x.shape, value, name="safe_softmax")
