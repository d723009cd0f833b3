"""Operator workloads: single TIR functions that are tuned directly (public shapes)."""

from __future__ import annotations

from typing import Any, Callable

from tvm import te, topi

import autotvm
from autotvm.env import AutoTVMError


def conv2d(batch: int, in_ch: int, size: int, out_ch: int, kernel: int, stride: int = 1, pad: int = 0) -> Any:
    data = te.placeholder((batch, in_ch, size, size), name="data")
    weight = te.placeholder((out_ch, in_ch, kernel, kernel), name="weight")
    return te.create_prim_func([data, weight, topi.nn.conv2d_nchw(data, weight, stride, pad, 1)])


def matmul(n: int, m: int, k: int) -> Any:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    return te.create_prim_func([a, b, te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")])


def batch_matmul(batch: int, n: int, m: int, k: int) -> Any:
    a = te.placeholder((batch, n, k), name="A")
    b = te.placeholder((batch, k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((batch, n, m), lambda x, i, j: te.sum(a[x, i, r] * b[x, r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


def dense(batch: int, in_dim: int, out_dim: int) -> Any:
    x = te.placeholder((batch, in_dim), name="X")
    w = te.placeholder((out_dim, in_dim), name="W")
    return te.create_prim_func([x, w, topi.nn.dense(x, w)])


# name -> (description, builder)
WORKLOADS: dict[str, tuple[str, Callable[[], Any]]] = {
    "c1": ("1x1 conv (1,144,28,28) -> 32 channels", lambda: conv2d(1, 144, 28, 32, 1)),
    "r3x3": ("ResNet-18 3x3 conv 64->64 on 56x56, pad 1", lambda: conv2d(1, 64, 56, 64, 3, 1, 1)),
    "mm512": ("512x512x512 matmul", lambda: matmul(512, 512, 512)),
    "bmm": ("batch matmul 12x(128x64)x(64x128) (BERT attention scores)", lambda: batch_matmul(12, 128, 128, 64)),
    "dense": ("dense 1x512 -> 1000 (ResNet-18 classifier)", lambda: dense(1, 512, 1000)),
    "conv3x3-small": ("3x3 conv 16->16 on 14x14, pad 1 (for tests)", lambda: conv2d(1, 16, 14, 16, 3, 1, 1)),
    "mm64": ("64x64x64 matmul (for tests)", lambda: matmul(64, 64, 64)),
}


def workload(name: str) -> Any:
    """The PrimFunc of a named workload; a clear error lists the known ones."""
    if name not in WORKLOADS:
        raise AutoTVMError(f"unknown workload {name!r}; allowed: {', '.join(WORKLOADS)}")
    return WORKLOADS[name][1]()


def workload_task(name: str, target: Any = "llvm") -> Any:
    """The tuning task of a named workload on ``target``, named after the workload (its design
    space comes from the on-disk cache after the first time)."""
    return autotvm.task.create_from_primfunc(workload(name), target, name=name)
