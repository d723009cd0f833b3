"""Explicit pads in an NHWC graph: keep them in NHWC, and fold them into the convolution after them.

Models exported with explicit padding (Hugging Face MobileNetV2's TensorFlow-style ``F.pad``)
reach Relax as ``pad`` in NCHW. After ``ConvertLayout`` turns the convolutions to NHWC, each pad
(and the ReLU6 clip before it) sits between two transposes, ``NHWC -> NCHW -> pad -> NHWC``: two
functions per layer that only move memory, and the clip can no longer fuse into the convolution
that produced its input. Three rewrites, with TVM's dataflow patterns:

* a pad of zero width is removed;
* ``permute_dims(pad?(clip?(permute_dims(x, p)), w), p^-1)`` becomes ``pad?(clip?(x), w permuted)``;
* ``conv2d(pad(x, w), padding=0)`` with a constant zero pad of the spatial axes becomes
  ``conv2d(x, padding=w)``, so the pad is the convolution's own (its kernel reads the border).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def _is_inverse(first: list[int], second: list[int]) -> bool:
    return [first[i] for i in second] == list(range(len(first)))


def _zero_constant_pad(call: relax.Call) -> bool:
    return str(call.attrs.pad_mode) == "constant" and float(call.attrs.pad_value) == 0.0


def _drop_zero_pads(func: relax.Function) -> relax.Function:
    data = wildcard()
    pattern = is_op("relax.nn.pad")(data)

    def rewrite(expr: relax.Expr, matches: dict) -> relax.Expr:
        return matches[data] if not any(_ints(expr.attrs.pad_width)) else expr

    return rewrite_call(pattern, rewrite, func)


def _pads_into_nhwc(func: relax.Function) -> relax.Function:
    data = wildcard()
    to_nchw = is_op("relax.permute_dims")(data)
    clipped = is_op("relax.clip")(to_nchw, wildcard(), wildcard())
    padded = is_op("relax.nn.pad")(to_nchw | clipped)
    pattern = is_op("relax.permute_dims")(padded | clipped | to_nchw)

    def rewrite(expr: relax.Expr, matches: dict) -> relax.Expr:
        first, second = _ints(matches[to_nchw].attrs.axes), _ints(expr.attrs.axes)
        pad_call = matches.get(padded)
        if not _is_inverse(first, second) or (pad_call is not None and not _zero_constant_pad(pad_call)):
            return expr
        source = matches[data]
        if clipped in matches:
            clip = matches[clipped]
            source = relax.op.clip(source, clip.args[1], clip.args[2])
        if pad_call is None:
            return source
        widths = _ints(pad_call.attrs.pad_width)  # (before, after) per axis of the transposed tensor
        per_axis = [widths[2 * i: 2 * i + 2] for i in range(len(first))]
        moved = [w for axis in second for w in per_axis[axis]]  # axis j of the result is axis second[j] of the pad's
        return relax.op.nn.pad(source, moved, pad_value=0.0, pad_mode="constant")

    return rewrite_call(pattern, rewrite, func)


def _pads_into_conv2d(func: relax.Function) -> relax.Function:
    data, weight = wildcard(), wildcard()
    padded = is_op("relax.nn.pad")(data)
    pattern = is_op("relax.nn.conv2d")(padded, weight)

    def rewrite(expr: relax.Expr, matches: dict) -> relax.Expr:
        attrs, pad_call = expr.attrs, matches[padded]
        layout = str(attrs.data_layout)
        if any(_ints(attrs.padding)) or not _zero_constant_pad(pad_call) or sorted(layout) != sorted("NCHW"):
            return expr
        widths = _ints(pad_call.attrs.pad_width)
        per_axis = {axis: widths[2 * i: 2 * i + 2] for i, axis in enumerate(layout)}
        if any(per_axis["N"]) or any(per_axis["C"]):
            return expr
        (top, bottom), (left, right) = per_axis["H"], per_axis["W"]
        return relax.op.nn.conv2d(matches[data], matches[weight], strides=attrs.strides,
                                  padding=[top, left, bottom, right], dilation=attrs.dilation, groups=attrs.groups,
                                  data_layout=layout, kernel_layout=str(attrs.kernel_layout),
                                  out_layout=str(attrs.out_layout), out_dtype=str(attrs.out_dtype))

    return rewrite_call(pattern, rewrite, func)


@tvm.transform.module_pass(opt_level=0, name="NHWCPads")
def nhwc_pads(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """The three rewrites of the module docstring on every Relax function."""
    updates = {}
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            updates[gv] = _pads_into_conv2d(_pads_into_nhwc(_drop_zero_pads(func)))
    for gv, func in updates.items():
        mod[gv] = func
    return mod
