"""One matmul, every way this CPU can run it, as ``Runtime``s to time together: TVM in float32
(a tuned config), TVM in bfloat16 on the micro-kernel (``autotvm.task.x86_bf16``: AVX512-BF16, or AMX),
OpenVINO's fully connected layer (its default precision, and float32) and PyTorch's ``linear``
(float32, bfloat16). What ``bf16_headroom`` times."""

from __future__ import annotations

from typing import Any

import numpy as np

from autotvm.lowering import tir_pipeline
from autotvm.measure.workers import random_inputs

from .models import Model
from .runtimes import Runtime, openvino_model, openvino_precision
from .workloads import workload_task

_QUICK = {"number": 20, "repeat": 3}  # the timing that picks the micro-kernel's tile


def headroom_runtimes(op: str, m: int, k: int, n: int, best_index: int | None, target: Any,
                      threads: int) -> tuple[list[Runtime], dict[str, str]]:
    """The runtimes of C[m, n] = A[m, k] B[k, n], and a note on each (the tile, the layer time)."""
    import torch

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32) / np.sqrt(k)
    runtimes, notes = [], {}
    if best_index is not None:
        runtimes.append(_tvm_float32(op, best_index, target))
    bf16, notes["tvm-bf16"] = _tvm_bfloat16(a, b, target)
    runtimes.append(bf16)
    module = torch.nn.Linear(k, n, bias=False).eval()
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(b.T.copy()))
    for name, precision in (("openvino", None), ("openvino-f32", "f32")):
        runtime, notes[name] = _openvino(Model(name, module, (torch.from_numpy(a),)), threads, precision)
        runtimes.append(runtime)
    for dtype, name in ((torch.float32, "pytorch-f32"), (torch.bfloat16, "pytorch-bf16")):
        x, w = torch.from_numpy(a).to(dtype), torch.from_numpy(b.T.copy()).to(dtype)

        def call(x=x, w=w) -> Any:
            return torch.nn.functional.linear(x, w)

        runtimes.append(Runtime(name, call, lambda call=call: [call().float().numpy()],
                                "float32" if dtype == torch.float32 else "bfloat16"))
    return runtimes, notes


def _tvm_float32(op: str, index: int, target: Any) -> Runtime:
    """The tuned config built as tuning timed it: its weight already in the layout it reads."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    task = workload_task(op, target)
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(task.instantiate(task.config_space.get(index)))
    lib = tvm.compile(mod, target=task.target, tir_pipeline=tir_pipeline(task.target))
    args = [tvm.runtime.tensor(x) for x in random_inputs([([int(d) for d in p.shape], str(p.dtype))
                                                          for p in mod["main"].params])]
    main = lib["main"]
    return Runtime("tvm-f32", lambda: main(*args), lambda: [args[-1].numpy()], "float32")


def _tvm_bfloat16(a: np.ndarray, b: np.ndarray, target: Any) -> tuple[Runtime, str]:
    """The micro-kernel's fastest tile (on AMX where the CPU has it), its weight packed in pairs
    once (as a model's would be)."""
    import ml_dtypes
    import tvm

    from autotvm.task import x86_bf16

    (m, k), n = a.shape, b.shape[1]
    a16 = a.astype(ml_dtypes.bfloat16)
    packed = x86_bf16.pack_matmul_weight(b)
    args = [tvm.runtime.tensor(a16), tvm.runtime.tensor(packed), tvm.runtime.tensor(np.zeros((m, n), np.float32))]
    func, best = x86_bf16.matmul(m, k, n), None
    for tile in x86_bf16.tiles(m, k, n, amx=x86_bf16.uses_amx(target)) or x86_bf16.tiles(m, k, n):
        lib = tvm.compile(x86_bf16.schedule(func, *tile).mod, target=target, tir_pipeline=tir_pipeline(target))
        seconds = min(lib.mod.time_evaluator("main", tvm.cpu(), **_QUICK)(*args).results)
        if best is None or seconds < best[0]:
            best = (seconds, tile, lib)
    _, tile, lib = best
    main = lib["main"]
    main(*args)
    reference = a16.astype(np.float32) @ b.astype(ml_dtypes.bfloat16).astype(np.float32)
    error = float(np.max(np.abs(args[2].numpy() - reference)) / np.max(np.abs(reference)))
    return (Runtime("tvm-bf16", lambda: main(*args), lambda: [args[2].numpy()], "bfloat16"),
            f"tile {tile}; error {error:.1e} of the float32 product of the same inputs")


def _openvino(model: Model, threads: int, precision: str | None) -> tuple[Runtime, str]:
    """OpenVINO on the one-layer model, and its fully connected layer's own time per call."""
    compiled = openvino_model(model, threads, precision, {"PERF_COUNT": "YES"})
    request = compiled.create_infer_request()
    inputs = [x.numpy() for x in model.inputs]
    for _ in range(20):
        request.infer(inputs)
    layer_ms = []
    for _ in range(50):
        request.infer(inputs)
        layer_ms.append(sum(layer.real_time.total_seconds() * 1e3 for layer in request.get_profiling_info()
                            if layer.node_type == "FullyConnected" and layer.status.name == "EXECUTED"))
    kernels = sorted({layer.exec_type for layer in request.get_profiling_info() if layer.node_type == "FullyConnected"})
    runtime = Runtime(model.name, lambda: request.infer(inputs), lambda: [np.array(v, np.float32) for v in
                                                                          request.infer(inputs).values()],
                      openvino_precision(compiled))
    return runtime, f"its FullyConnected layer alone: {np.median(layer_ms):.4f} ms ({', '.join(kernels)})"
