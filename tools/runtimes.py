"""The runtimes a user would otherwise ship, each behind one interface for ``-m=benchmark``.

``prepare(variant, model, threads)`` returns a ``Runtime``: ``call()`` runs one inference (what
is timed) and ``outputs()`` returns it as numpy arrays (what is checked against PyTorch eager).
Every runtime gets the same number of threads. ONNX Runtime and OpenVINO come from the optional
extra ``compare`` (``pip install -e ".[compare]"``); without it they are skipped with one note.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .models import flatten

# what each variant is, in the order the tables show them
VARIANTS = {
    "pytorch-eager": "PyTorch eager, no_grad",
    "torch-compile": "torch.compile (Inductor, default mode)",
    "onnxruntime": "ONNX Runtime CPU, from torch.onnx.export",
    "openvino": "OpenVINO CPU, float32, latency hint, from openvino.convert_model",
    "tvm-untuned": "TVM, default schedules",
    "tvm-tuned": "TVM with the model's tuning records",
}
TVM_VARIANTS = ("tvm-untuned", "tvm-tuned")


class RuntimeUnavailable(Exception):
    """The variant cannot run here (its package is missing, or the model does not convert)."""


@dataclass
class Runtime:
    variant: str
    call: Callable[[], Any]
    outputs: Callable[[], list[np.ndarray]]


@contextlib.contextmanager
def _quiet():
    """Exporters print warnings about their own internals (missing torchvision ops, constant
    folding, tracer notes) that a user can do nothing about; keep them out of the table."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _torch(model: Any, threads: int, compiled: bool) -> Runtime:
    import torch

    torch.set_num_threads(threads)
    module = model.module
    if compiled:
        with _quiet():
            module = torch.compile(module)
            with torch.no_grad():
                module(*model.inputs)  # compiles now, not inside the timed blocks

    def call() -> Any:
        with torch.no_grad():
            return module(*model.inputs)

    return Runtime("torch-compile" if compiled else "pytorch-eager", call,
                   lambda: [t.detach().numpy() for t in flatten(call())])


def _convert(step: str, convert: Callable[[], Any]) -> Any:
    """``convert()`` quietly; an exporter's own failure on this model makes the variant unavailable."""
    try:
        with _quiet():
            return convert()
    except Exception as err:
        raise RuntimeUnavailable(f"{step} failed: {type(err).__name__}: {str(err)[:200]}") from None


def _onnxruntime(model: Any, threads: int) -> Runtime:
    try:
        import onnxruntime as ort
        import torch
    except ImportError:
        raise RuntimeUnavailable("onnxruntime is not installed (pip install -e \".[compare]\")") from None
    program = _convert("torch.onnx.export",
                       lambda: torch.onnx.export(model.module, model.inputs, dynamo=True, verbose=False))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(program.model_proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    feeds = {spec.name: x.numpy() for spec, x in zip(session.get_inputs(), model.inputs)}

    def call() -> Any:
        return session.run(None, feeds)

    return Runtime("onnxruntime", call, lambda: list(call()))


def openvino_model(model: Any, threads: int, extra: dict | None = None) -> Any:
    """The model compiled by OpenVINO for the CPU as the benchmark times it (``extra``: more
    properties, e.g. ``{"PERF_COUNT": "YES"}`` for its per-layer profile)."""
    try:
        import openvino as ov
    except ImportError:
        raise RuntimeUnavailable("openvino is not installed (pip install -e \".[compare]\")") from None
    converted = _convert("openvino.convert_model", lambda: ov.convert_model(model.module, example_input=model.inputs))
    # float32 as every other variant: on a CPU with AVX512-BF16 or AMX, OpenVINO's default is bfloat16
    return ov.Core().compile_model(converted, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
                                                      "INFERENCE_PRECISION_HINT": "f32", **(extra or {})})


def _openvino(model: Any, threads: int) -> Runtime:
    request = openvino_model(model, threads).create_infer_request()
    inputs = [x.numpy() for x in model.inputs]

    def call() -> Any:
        return request.infer(inputs)

    return Runtime("openvino", call, lambda: [np.array(v) for v in call().values()])


def tvm_runtime(variant: str, exe: Any, target: Any, model: Any) -> Runtime:
    """A built Relax executable on the model's example inputs."""
    import tvm
    from tvm import relax

    dev = tvm.cuda() if target.kind.name == "cuda" else tvm.cpu()
    vm = relax.VirtualMachine(exe, dev)
    args = [tvm.runtime.tensor(t.numpy(), dev) for t in model.inputs]
    main = vm["main"]

    def call() -> Any:
        out = main(*args)
        dev.sync()
        return out

    return Runtime(variant, call, lambda: [o.numpy() for o in _flatten_tvm(call())])


def _flatten_tvm(out: Any) -> list:
    if hasattr(out, "numpy"):
        return [out]
    return [t for item in out for t in _flatten_tvm(item)]


def prepare(variant: str, model: Any, threads: int) -> Runtime:
    """A non-TVM runtime for the model (``tvm_runtime`` makes the TVM ones from a build)."""
    if variant == "pytorch-eager":
        return _torch(model, threads, compiled=False)
    if variant == "torch-compile":
        return _torch(model, threads, compiled=True)
    if variant == "onnxruntime":
        return _onnxruntime(model, threads)
    if variant == "openvino":
        return _openvino(model, threads)
    raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
