"""Split-K for a GPU's deep, narrow matmuls: more blocks where the outputs alone are too few.

A GPU kernel of a matmul gives each thread a few outputs and their whole sum over K. Where the
outputs are few and K is deep (a transformer's feed-forward down-projection at batch 1: 128 rows,
384 columns, 1536 deep) there are too few threads to keep the GPU's cores busy, and each walks a
long sum. ``split_k_matmuls`` splits such a sum in ``S`` parts: one kernel computes the ``S``
partial products side by side (a batched matmul that reads the input in place, tuned as a task of
its own), and the kernel after it adds the parts, with the matmul's epilogue (bias, residual add,
activation) fused into it. cuBLAS chooses split-K for such shapes in the same way.

``S`` is the largest power of two that keeps at least ``MIN_DEPTH`` of K in each part and the
partial products within ``MAX_OUTPUTS`` values; matmuls with fewer than ``MIN_ROWS`` rows (a
matrix-vector product, which its default GPU schedule already reduces across threads) and
matmuls whose weight is not a constant stay as they are.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax, te

from .relax_calls import is_op, rewrite_bindings, shape_of

MIN_DEPTH = 256  # the least of K a part sums
MAX_OUTPUTS = 1 << 18  # the most partial products (S x rows x columns) a split may write
MIN_ROWS = 16


def split_factor(rows: int, depth: int, columns: int) -> int:
    """How many parts a ``rows`` x ``depth`` x ``columns`` matmul's sum is split into (1: none)."""
    if rows < MIN_ROWS:
        return 1
    parts = 1
    while depth % (2 * parts) == 0 and depth // (2 * parts) >= MIN_DEPTH \
            and 2 * parts * rows * columns <= MAX_OUTPUTS:
        parts *= 2
    return parts


def split_k_matmuls(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each matmul of an input ``[..., M, K]`` by a constant ``[K, N]`` weight that
    ``split_factor`` splits computed as ``S`` partial products and their sum."""
    return rewrite_bindings(mod, _split)


def _split(rewriter: Any, call: Any) -> Any:
    if not is_op(call, "matmul"):
        return None
    data, weight = call.args
    shape, weight_shape = shape_of(data), shape_of(weight)
    if not isinstance(weight, tvm.ir.expr.Constant) or shape is None or weight_shape is None \
            or len(weight_shape) != 2 or len(shape) < 2:
        return None
    depth, columns = weight_shape
    rows = 1
    for d in shape[:-1]:
        rows *= d
    parts = split_factor(rows, depth, columns)
    if parts == 1:
        return None
    out_dtype = str(call.ty.dtype)
    emit = rewriter.builder_.emit
    # the input read in place as [rows, parts, depth / parts]; the weight as [parts, depth / parts, columns]
    data = emit(relax.op.reshape(data, [rows, parts, depth // parts]))
    weight = relax.const(weight.value.numpy().reshape(parts, depth // parts, columns))
    partial = emit(rewriter.builder_.call_te(_partial_products, data, weight, out_dtype,
                                             primfunc_name_hint="split_k_matmul"))
    total = None
    for i in range(parts):  # slices and adds: elementwise, so they fuse with the epilogue
        part = emit(relax.op.squeeze(emit(relax.op.strided_slice(partial, axes=[0], begin=[i], end=[i + 1])), [0]))
        total = part if total is None else emit(relax.op.add(total, part))
    return relax.op.reshape(total, [*shape[:-1], columns])


def _partial_products(data: te.Tensor, weight: te.Tensor, out_dtype: str) -> te.Tensor:
    """``[parts, rows, columns]``: part ``s`` of the sum, ``data[:, s, :] @ weight[s]``, summed in
    ``out_dtype`` (a float16 input's products summed in float32, as on the tensor cores)."""
    rows, parts, depth = data.shape
    columns = weight.shape[2]
    k = te.reduce_axis((0, depth), name="k")
    return te.compute((parts, rows, columns),
                      lambda s, m, n: te.sum(data[m, s, k].astype(out_dtype) * weight[s, k, n].astype(out_dtype),
                                             axis=k),
                      name="split_k_matmul")
