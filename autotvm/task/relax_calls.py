"""Readers of Relax calls that the program rewrites share (``bfloat16``, ``winograd``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tvm
from tvm import relax


def is_op(expr: Any, name: str) -> bool:
    """Whether ``expr`` calls the Relax operator ``relax.<name>``."""
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax." + name


def static_shape(expr: Any) -> list[int] | None:
    """A float32 tensor's shape when every dimension is known."""
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if getattr(ty, "dtype", None) != "float32" or shape is None or not all(
            isinstance(getattr(d, "value", None), int) for d in shape.values):
        return None
    return [int(d) for d in shape.values]


def constant(expr: Any) -> np.ndarray | None:
    """A float32 constant's value (None for anything else, None included)."""
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) and expr.ty.dtype == "float32" else None


class NHWCConv2D(NamedTuple):
    """A float32 NHWC/OHWI convolution of static shape, one group, no dilation, one stride for
    both axes, with a constant weight."""

    shape: list[int]  # the input's, NHWC
    weight: Any  # the constant, OHWI (its ``.value`` a tensor)
    stride: int
    padding: tuple[int, int, int, int]  # top, left, bottom, right


def nhwc_conv2d(call: Any) -> NHWCConv2D | None:
    """``call`` as an ``NHWCConv2D``, or None where it is not one."""
    if not is_op(call, "nn.conv2d"):
        return None
    attrs, (data, weight) = call.attrs, call.args
    shape = static_shape(data)
    if (shape is None or not isinstance(weight, tvm.ir.expr.Constant) or weight.ty.dtype != "float32"
            or int(attrs.groups) != 1 or [int(d) for d in attrs.dilation] != [1, 1]
            or (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NHWC", "OHWI", "NHWC")
            or str(attrs.out_dtype) not in ("None", "", "float32", "void")):
        return None
    strides = [int(s) for s in attrs.strides]
    if strides[0] != strides[1]:
        return None
    return NHWCConv2D(shape, weight, strides[0], tuple(int(p) for p in attrs.padding))
