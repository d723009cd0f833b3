"""Split-K for a GPU's deep, narrow matmuls and convolutions: more blocks where the outputs alone
are too few.

A GPU kernel of a matmul gives each thread a few outputs and their whole sum over K. Where the
outputs are few and K is deep (a transformer's feed-forward down-projection at batch 1: 128 rows,
384 columns, 1536 deep; a ResNet's 3x3 convolution at 7x7 with 512 channels: 49 pixels, 512
channels, 3 x 3 x 512 deep) there are too few threads to keep the GPU's cores busy, and each walks
a long sum. ``split_k_matmuls`` splits such a sum in ``S`` parts (a convolution's along its input
channels): one kernel computes the ``S`` partial products side by side (reading the input in
place, tuned as a task of its own), and the kernel after it adds the parts, with the epilogue
(bias, residual add, activation) fused into it, as cuBLAS's split-K algorithms do.

``S`` is the largest power of two that keeps at least ``MIN_DEPTH`` of K in each part and the
partial products within ``MAX_OUTPUTS`` values; matmuls with fewer than ``MIN_ROWS`` rows (a
matrix-vector product, which its default GPU schedule already reduces across threads) and
those whose weight is not a constant stay as they are.
"""

from __future__ import annotations

import math
from typing import Any

import tvm
from tvm import relax, te

from .relax_calls import is_op, nhwc_conv2d, rewrite_bindings, shape_of

MIN_DEPTH = 192  # the least of K a part sums (a 384-deep matmul, a transformer's output projection, splits in two)
# the most partial products (S x rows x columns) a split writes: about one a thread of what an
# H100/H200 holds at once (132 multiprocessors x 2048 threads)
MAX_OUTPUTS = 1 << 18
MIN_ROWS = 16


def split_factor(rows: int, depth: int, columns: int, divides: int | None = None) -> int:
    """How many parts a ``rows`` x ``depth`` x ``columns`` matmul's sum is split into (1: none); the
    parts divide ``divides`` (a convolution's input channels; default ``depth``)."""
    divides = depth if divides is None else divides
    if rows < MIN_ROWS:
        return 1
    parts = 1
    while divides % (2 * parts) == 0 and depth // (2 * parts) >= MIN_DEPTH \
            and 2 * parts * rows * columns <= MAX_OUTPUTS:
        parts *= 2
    return parts


def split_k_matmuls(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each matmul of an input ``[..., M, K]`` by a constant ``[K, N]`` weight, and each
    NHWC convolution with a constant float16 OHWI weight (one group, no dilation), that
    ``split_factor`` splits computed as ``S`` partial products and their sum (a convolution's K:
    its window times its input channels, split along the channels). A float32 convolution stays
    as it is: split, nearly all of its design space on CUDA cores breaks the GPU's limits on
    threads and shared memory (0 to 2 of 150 random configs pass the check, against 3 to 5
    unsplit), which would leave a tune without configs to measure; on the tensor cores a third
    pass, as unsplit."""
    def split(rewriter: Any, call: Any) -> Any:
        new = _split_matmul(rewriter, call)
        return _split_conv2d(rewriter, call) if new is None else new

    return rewrite_bindings(mod, split)


def _split_matmul(rewriter: Any, call: Any) -> Any:
    if not is_op(call, "matmul"):
        return None
    data, weight = call.args
    shape, weight_shape = shape_of(data), shape_of(weight)
    if not isinstance(weight, tvm.ir.expr.Constant) or shape is None or weight_shape is None \
            or len(weight_shape) != 2 or len(shape) < 2:
        return None
    depth, columns = weight_shape
    rows = math.prod(shape[:-1])
    parts = split_factor(rows, depth, columns)
    if parts == 1:
        return None
    emit = rewriter.builder_.emit
    # the input read in place as [rows, parts, depth / parts]; the weight as [parts, depth / parts, columns]
    data = emit(relax.op.reshape(data, [rows, parts, depth // parts]))
    weight = relax.const(weight.value.numpy().reshape(parts, depth // parts, columns))
    partial = emit(rewriter.builder_.call_te(_partial_products, data, weight, str(call.ty.dtype),
                                             primfunc_name_hint="split_k_matmul"))
    return _sum_of_parts(emit, partial, parts, [*shape[:-1], columns])


def _split_conv2d(rewriter: Any, call: Any) -> Any:
    conv, out_shape = nhwc_conv2d(call, "float16"), shape_of(call)
    if conv is None or out_shape is None:
        return None
    data, weight = call.args
    channels_out, window_h, window_w, channels = (int(d) for d in weight.ty.shape)
    batch, height, width, _ = out_shape
    parts = split_factor(batch * height * width, window_h * window_w * channels, channels_out, divides=channels)
    if parts == 1:
        return None
    emit = rewriter.builder_.emit
    # the weight as [parts, O, KH, KW, C / parts]: each part's channels innermost, as in OHWI
    value = weight.value.numpy().reshape(channels_out, window_h, window_w, parts, channels // parts)
    weight = relax.const(value.transpose(3, 0, 1, 2, 4).copy())
    partial = emit(rewriter.builder_.call_te(_partial_convolutions, data, weight, conv.stride, list(conv.padding),
                                             str(call.ty.dtype), primfunc_name_hint="split_k_conv2d"))
    return _sum_of_parts(emit, partial, parts, out_shape)


def _sum_of_parts(emit: Any, partial: Any, parts: int, shape: list[int]) -> Any:
    """The sum of ``partial``'s ``parts`` along its first axis in ``shape``, as slices and adds, which
    fuse with the epilogue of the matmul or convolution (bias, residual, activation). The reshape
    at the end, even to the shape the adds have, is what lets ``FuseOps`` put the epilogue in
    their kernel (without it, an epilogue of a bias and a ReLU is a kernel of its own)."""
    total = None
    for i in range(parts):
        part = emit(relax.op.squeeze(emit(relax.op.strided_slice(partial, axes=[0], begin=[i], end=[i + 1])), [0]))
        total = part if total is None else emit(relax.op.add(total, part))
    return relax.op.reshape(total, shape)


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


def _partial_convolutions(data: te.Tensor, weight: te.Tensor, stride: int, padding: list[int],
                          out_dtype: str) -> te.Tensor:
    """``[parts, N, OH, OW, O]``: part ``s`` of an NHWC convolution's sum, over input channels
    ``s * C / parts`` up to the next part's, summed in ``out_dtype``."""
    from tvm import topi

    parts, channels_out, window_h, window_w, channels = weight.shape
    batch, height, width, _ = data.shape
    top, left, bottom, right = padding
    padded = topi.nn.pad(data, [0, top, left, 0], [0, bottom, right, 0], name="pad")
    out_h = (height + top + bottom - window_h) // stride + 1
    out_w = (width + left + right - window_w) // stride + 1
    rh, rw = te.reduce_axis((0, window_h), name="rh"), te.reduce_axis((0, window_w), name="rw")
    rc = te.reduce_axis((0, channels), name="rc")
    return te.compute(
        (parts, batch, out_h, out_w, channels_out),
        lambda s, n, h, w, o: te.sum(
            padded[n, h * stride + rh, w * stride + rw, s * channels + rc].astype(out_dtype)
            * weight[s, o, rh, rw, rc].astype(out_dtype), axis=[rh, rw, rc]),
        name="split_k_conv2d")
