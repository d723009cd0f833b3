"""Operator workloads (public shapes), each defined once: its TIR function, tuned directly by the
operator experiments, and its PyTorch module, a one-operator model (type ``op``) for -m=tune and
-m=benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tvm import te, topi

import autotvm
from autotvm.checks import AutoTVMError


@dataclass(frozen=True)
class Workload:
    description: str
    kind: str  # "conv2d", "matmul", "batch_matmul" or "dense"
    shape: dict = field(default_factory=dict)

    def tir(self) -> Any:
        """The operator as a TIR PrimFunc."""
        s = self.shape
        if self.kind == "conv2d":
            data = te.placeholder((s["batch"], s["in_ch"], s["size"], s["size"]), name="data")
            weight = te.placeholder((s["out_ch"], s["in_ch"], s["kernel"], s["kernel"]), name="weight")
            return te.create_prim_func([data, weight, topi.nn.conv2d_nchw(data, weight, s["stride"], s["pad"], 1)])
        if self.kind == "dense":
            x = te.placeholder((s["batch"], s["in_dim"]), name="X")
            w = te.placeholder((s["out_dim"], s["in_dim"]), name="W")
            return te.create_prim_func([x, w, topi.nn.dense(x, w)])
        if self.kind == "batch_matmul":
            a = te.placeholder((s["batch"], s["n"], s["k"]), name="A")
            b = te.placeholder((s["batch"], s["k"], s["m"]), name="B")
            r = te.reduce_axis((0, s["k"]), name="k")
            c = te.compute((s["batch"], s["n"], s["m"]), lambda x, i, j: te.sum(a[x, i, r] * b[x, r, j], axis=r),
                           name="C")
            return te.create_prim_func([a, b, c])
        a = te.placeholder((s["n"], s["k"]), name="A")
        b = te.placeholder((s["k"], s["m"]), name="B")
        r = te.reduce_axis((0, s["k"]), name="k")
        return te.create_prim_func([a, b, te.compute((s["n"], s["m"]), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r),
                                                     name="C")])

    def torch(self) -> tuple[nn.Module, tuple]:
        """The operator as a PyTorch module and example inputs (weights drawn from the current seed)."""
        s = self.shape
        if self.kind == "conv2d":
            module = nn.Conv2d(s["in_ch"], s["out_ch"], s["kernel"], stride=s["stride"], padding=s["pad"], bias=False)
            return module, (torch.randn(s["batch"], s["in_ch"], s["size"], s["size"]),)
        if self.kind == "dense":
            return nn.Linear(s["in_dim"], s["out_dim"]), (torch.randn(s["batch"], s["in_dim"]),)
        if self.kind == "batch_matmul":
            return BatchMatMul(), (torch.randn(s["batch"], s["n"], s["k"]), torch.randn(s["batch"], s["k"], s["m"]))
        return MatMul(s["k"], s["m"]), (torch.randn(s["n"], s["k"]),)


class MatMul(nn.Module):
    """``x @ weight``, the weight a parameter (a model's matmul with its weights)."""

    def __init__(self, k: int, m: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, m) / k**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class BatchMatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def _conv(batch: int, in_ch: int, size: int, out_ch: int, kernel: int, stride: int = 1, pad: int = 0) -> dict:
    return {"batch": batch, "in_ch": in_ch, "size": size, "out_ch": out_ch, "kernel": kernel, "stride": stride,
            "pad": pad}


WORKLOADS: dict[str, Workload] = {
    "c1": Workload("1x1 conv (1,144,28,28) -> 32 channels", "conv2d", _conv(1, 144, 28, 32, 1)),
    "r3x3": Workload("ResNet-18 3x3 conv 64->64 on 56x56, pad 1", "conv2d", _conv(1, 64, 56, 64, 3, 1, 1)),
    "mm512": Workload("512x512x512 matmul", "matmul", {"n": 512, "m": 512, "k": 512}),
    "bmm": Workload("batch matmul 12x(128x64)x(64x128) (BERT attention scores)", "batch_matmul",
                    {"batch": 12, "n": 128, "m": 128, "k": 64}),
    "dense": Workload("dense 1x512 -> 1000 (ResNet-18 classifier)", "dense", {"batch": 1, "in_dim": 512, "out_dim": 1000}),
    "conv3x3-small": Workload("3x3 conv 16->16 on 14x14, pad 1 (for tests)", "conv2d", _conv(1, 16, 14, 16, 3, 1, 1)),
    "mm64": Workload("64x64x64 matmul (for tests)", "matmul", {"n": 64, "m": 64, "k": 64}),
    "ffn": Workload("MiniLM-BERT's feed-forward matmul, 128x384 by 384x1536", "matmul", {"n": 128, "m": 1536, "k": 384}),
}


def workload(name: str) -> Workload:
    """A named workload; a clear error lists the known ones."""
    if name not in WORKLOADS:
        raise AutoTVMError(f"unknown workload {name!r}; allowed: {', '.join(WORKLOADS)}")
    return WORKLOADS[name]


def workload_task(name: str, target: Any = "llvm") -> Any:
    """The tuning task of a named workload on ``target``, named after the workload (its design
    space comes from the on-disk cache after the first time)."""
    return autotvm.task.create_from_primfunc(workload(name).tir(), target, name=name)
