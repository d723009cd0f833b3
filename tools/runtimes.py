"""The runtimes a user would otherwise ship, each behind one interface for ``-m=benchmark``.

``prepare(variant, model, where)`` returns a ``Runtime``: ``call()`` runs one inference and
waits for it (what is timed: on a GPU every call synchronizes, so each is one inference's
latency), ``outputs()`` returns it as float32 numpy arrays (what is checked against PyTorch
eager in float32), and ``precision`` says what it computes in. ``where`` says on which device,
with how many CPU threads and in which precision (``Placement``); every runtime of a benchmark
gets the same. A runtime that cannot run there is ``RuntimeUnavailable``, with the reason in
one line. ONNX Runtime and OpenVINO come from the optional extra ``compare``
(``pip install -e ".[compare]"``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .models import flatten

# what each variant is, in the order the tables show them
VARIANTS = {
    "pytorch-eager": "PyTorch eager, no_grad, on the target's device, in the run's precision",
    "torch-compile": "torch.compile (Inductor, default mode)",
    "torch-compile-cudagraphs": "torch.compile(mode=\"reduce-overhead\"): Inductor with CUDA graphs (GPU only)",
    "onnxruntime": "ONNX Runtime from torch.onnx.export (its CUDA provider on a GPU, from onnxruntime-gpu)",
    "openvino": "OpenVINO CPU at its default precision (bfloat16 on CPUs with AVX512-BF16 or AMX), latency hint",
    "openvino-f32": "OpenVINO CPU held to float32, latency hint",
    "tvm-untuned": "TVM, default schedules",
    "tvm-tuned": "TVM with the model's tuning records",
}
TVM_VARIANTS = ("tvm-untuned", "tvm-tuned")
# "tvm-tuned:<save_name>": TVM with the records of another tune of the model, <save_path>/<save_name>-<model>.json
# (another tuner's, seed's or setting's), timed beside the rest
TUNED_FROM = "tvm-tuned:"
# the short names the tables give precisions
SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


class RuntimeUnavailable(Exception):
    """The variant cannot run here (its package is missing, the device is not its, or the model
    does not convert)."""


@dataclass(frozen=True)
class Placement:
    """Where and how every runtime of a benchmark runs."""

    device: str = "cpu"  # "cpu" or "cuda"
    threads: int = 1  # CPU threads of each runtime
    precision: str = "float32"  # what the model computes in: float32, float16 (GPU) or bfloat16 (CPU)


@dataclass
class Runtime:
    variant: str
    call: Callable[[], Any]
    outputs: Callable[[], list[np.ndarray]]
    precision: str = "float32"  # what it computes in (OpenVINO's default may differ from the run's)


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


def _torch_dtype(precision: str) -> Any:
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[precision]


def torch_module_and_inputs(model: Any, where: Placement) -> tuple[Any, tuple]:
    """The model's PyTorch module and example inputs on the device, in the precision (float
    inputs converted; token ids stay integers). In float32 on a GPU, TF32 is switched off, as
    TVM's float32 kernels compute in float32."""
    import torch

    if where.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    dtype = _torch_dtype(where.precision)
    module = model.module
    if where.device != "cpu" or dtype != torch.float32:  # ``to`` converts in place: the float32 CPU model is kept
        module = copy.deepcopy(module).to(device=where.device, dtype=dtype)
    inputs = tuple(x.to(device=where.device, dtype=dtype if x.is_floating_point() else x.dtype) for x in model.inputs)
    return module, inputs


def _torch(model: Any, where: Placement, mode: str | None) -> Runtime:
    """PyTorch eager (``mode`` None) or torch.compile in ``mode``."""
    import torch

    torch.set_num_threads(where.threads)
    module, inputs = torch_module_and_inputs(model, where)
    if mode is not None:
        with _quiet():
            module = torch.compile(module, mode=mode)
            with torch.no_grad():
                for _ in range(3):  # compiles now (and records its CUDA graphs), not inside the timed blocks
                    module(*inputs)
    sync = torch.cuda.synchronize if where.device == "cuda" else (lambda: None)

    def call() -> Any:
        with torch.no_grad():
            out = module(*inputs)
        sync()
        return out

    name = {None: "pytorch-eager", "default": "torch-compile", "reduce-overhead": "torch-compile-cudagraphs"}[mode]
    return Runtime(name, call, lambda: [t.detach().float().cpu().numpy() for t in flatten(call())], where.precision)


def _convert(step: str, convert: Callable[[], Any]) -> Any:
    """``convert()`` quietly; an exporter's own failure on this model makes the variant unavailable."""
    try:
        with _quiet():
            return convert()
    except Exception as err:
        raise RuntimeUnavailable(f"{step} failed: {type(err).__name__}: {str(err)[:200]}") from None


def _onnxruntime(model: Any, where: Placement) -> Runtime:
    try:
        import onnxruntime as ort
        import torch
    except ImportError:
        raise RuntimeUnavailable("onnxruntime is not installed (pip install -e \".[compare]\")") from None
    if where.device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeUnavailable("this onnxruntime has no CUDA provider (install onnxruntime-gpu for the GPU)")
    if where.precision == "bfloat16":
        raise RuntimeUnavailable("ONNX Runtime's CPU provider runs no bfloat16 model")
    module, inputs = torch_module_and_inputs(model, where)
    program = _convert("torch.onnx.export", lambda: torch.onnx.export(module, inputs, dynamo=True, verbose=False))
    options = ort.SessionOptions()
    options.intra_op_num_threads = where.threads
    options.inter_op_num_threads = 1
    providers = ["CUDAExecutionProvider"] if where.device == "cuda" else ["CPUExecutionProvider"]
    session = ort.InferenceSession(program.model_proto.SerializeToString(), options, providers=providers)
    feeds = {spec.name: x.cpu().numpy() for spec, x in zip(session.get_inputs(), inputs)}

    def call() -> Any:
        return session.run(None, feeds)  # from and to host memory: returns when the GPU is done

    return Runtime("onnxruntime", call, lambda: [np.asarray(v, np.float32) for v in call()], where.precision)


def openvino_model(model: Any, threads: int, precision: str | None = "f32", extra: dict | None = None) -> Any:
    """The model compiled by OpenVINO for the CPU as the benchmark times it: ``precision`` its
    inference precision hint ("f32", "bf16"; None: OpenVINO's default for this CPU); ``extra``:
    more properties, e.g. ``{"PERF_COUNT": "YES"}`` for its per-layer profile."""
    try:
        import openvino as ov
    except ImportError:
        raise RuntimeUnavailable("openvino is not installed (pip install -e \".[compare]\")") from None
    converted = _convert("openvino.convert_model", lambda: ov.convert_model(model.module, example_input=model.inputs))
    properties = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", **(extra or {})}
    if precision:
        properties["INFERENCE_PRECISION_HINT"] = precision
    return ov.Core().compile_model(converted, "CPU", properties)


def _openvino(model: Any, where: Placement, precision: str | None) -> Runtime:
    if where.device != "cpu":
        raise RuntimeUnavailable("OpenVINO runs on CPUs and Intel GPUs, not on this NVIDIA GPU")
    compiled = openvino_model(model, where.threads, precision)
    request = compiled.create_infer_request()
    inputs = [x.numpy() for x in model.inputs]

    def call() -> Any:
        return request.infer(inputs)

    return Runtime("openvino" if precision is None else "openvino-f32", call,
                   lambda: [np.array(v, np.float32) for v in call().values()], openvino_precision(compiled))


def openvino_precision(compiled: Any) -> str:
    """What a compiled OpenVINO model computes in (its inference precision: float32, bfloat16, ...)."""
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    short = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
    return {name: full for full, name in SHORT.items()}.get(short, short)


def is_tvm(variant: str) -> bool:
    """Whether a variant is a TVM build (``TVM_VARIANTS``, or ``TUNED_FROM`` another tune's records)."""
    return variant in TVM_VARIANTS or variant.startswith(TUNED_FROM)


def tvm_runtime(variant: str, exe: Any, target: Any, model: Any, precision: str = "float32") -> Runtime:
    """A built Relax executable on the model's example inputs, on the target's device."""
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

    return Runtime(variant, call, lambda: [o.numpy().astype(np.float32) for o in _flatten_tvm(call())], precision)


def _flatten_tvm(out: Any) -> list:
    if hasattr(out, "numpy"):
        return [out]
    return [t for item in out for t in _flatten_tvm(item)]


def prepare(variant: str, model: Any, where: Placement) -> Runtime:
    """A non-TVM runtime for the model (``tvm_runtime`` makes the TVM ones from a build)."""
    if variant == "pytorch-eager":
        return _torch(model, where, None)
    if variant == "torch-compile":
        return _torch(model, where, "default")
    if variant == "torch-compile-cudagraphs":
        if where.device != "cuda":
            raise RuntimeUnavailable("CUDA graphs need a GPU (on a CPU this is torch-compile)")
        return _torch(model, where, "reduce-overhead")
    if variant == "onnxruntime":
        return _onnxruntime(model, where)
    if variant == "openvino":
        return _openvino(model, where, None)
    if variant == "openvino-f32":
        return _openvino(model, where, "f32")
    raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
