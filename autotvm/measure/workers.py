"""Functions that run inside builder and runner worker processes.

They import only TVM and NumPy: in particular never TVM's tensor intrinsics, whose import
takes most of a minute in every fresh process on a small machine and is not needed to compile a
scheduled module.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import numpy as np

from ..env import find_nvcc, private_cache_bytes, use_cuda_compiler
from ..lowering import tir_pipeline

_REFERENCE_OUTPUTS: dict[str, list] = {}
# the timed arguments of the last tasks, on the device: the next config of the same task is timed
# on them (a task's trials share their shapes; a convolution's weights are megabytes to draw and copy)
_TIMING_ARGS: dict[tuple, list] = {}
TIMING_ARGS_KEPT = 2
BUILD_NICENESS = 10  # added to a build worker's niceness (nvcc inherits it)
_DEVICE_COMPILER = {"seconds": 0.0, "timed": False}  # this worker's time in the CUDA compiler (nvcc, NVRTC)


def init_builder(parent: int) -> None:
    """Build worker initializer: Ctrl-C is the tuning process's, and the worker dies with it.
    TVM compiles CUDA kernels with the project's one CUDA compiler (``env.use_cuda_compiler``: NVRTC
    where it has a precompiled header, else nvcc where it is installed), the one the tuned model is
    built with.
    Builds run at a lower priority (``BUILD_NICENESS``): where they overlap runs (rounds of a GPU's
    tasks in flight at once), the runner and the tuner get their core first."""
    _init_worker(parent)
    try:
        os.nice(BUILD_NICENESS)
    except OSError:
        pass
    use_cuda_compiler()


def _init_worker(parent: int) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with(parent)


def die_with(parent: int) -> None:
    """End this worker when the tuning process ``parent`` ends, even by kill -9 (Linux's
    parent-death signal); a worker whose parent is already gone ends at once."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the signal comes when the parent ends
    except (OSError, AttributeError):  # not Linux: the worker ends when its pipe closes
        return
    if os.getppid() != parent:  # the parent ended before the signal was armed
        os._exit(1)


def init_runner(threads: int | None, parent: int) -> None:
    """Runner worker initializer: as ``init_builder`` (at the tuning process's priority), and
    kernels are timed with the threads the tuned program will run with (``env.use_runtime_threads``)."""
    _init_worker(parent)
    if threads is not None:
        from ..env import use_runtime_threads

        use_runtime_threads(threads)


def open_device(device: str) -> None:
    """Open ``device`` ahead of the first run in this run worker: TVM's runtime for it and, on a
    GPU, the CUDA context that a first run would otherwise wait for."""
    import tvm

    dev = tvm.device(device)
    tvm.runtime.tensor(np.zeros(1, dtype="float32"), dev)
    dev.sync()


def _arg_info(mod: Any) -> list:
    return [([int(x) for x in p.shape], str(p.dtype)) for p in mod["main"].params]


def _compile(mod: Any, target: Any, out_dir: str, suffix: str, gpu_here: bool) -> str:
    import tvm

    if target.kind.name == "cuda" and gpu_here:
        _time_device_compiler()
    lib = tvm.compile(mod, target=target, tir_pipeline=tir_pipeline(target))
    if target.kind.name == "cuda" and not gpu_here:
        check_cuda_kernels(lib, target)
    fd, path = tempfile.mkstemp(suffix=suffix + ".so", dir=out_dir)
    os.close(fd)
    lib.export_library(path)
    return path


def _time_device_compiler() -> None:
    """Count the time TVM's CUDA code generator spends in its compiler (``tvm_callback_cuda_compile``,
    TVM's hook for nvcc or NVRTC, wrapped once per worker), so that a build's seconds split into
    the device compiler's and the rest (lowering, the host's code, the library's export)."""
    if _DEVICE_COMPILER["timed"]:
        return
    import tvm_ffi
    from tvm.support import nvcc as tvm_nvcc  # registers TVM's own callback

    compile_cuda = tvm_nvcc.tvm_callback_cuda_compile

    def timed(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return compile_cuda(*args)
        finally:
            _DEVICE_COMPILER["seconds"] += time.perf_counter() - start

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", timed, override=True)
    _DEVICE_COMPILER["timed"] = True


def cuda_sources(lib: Any) -> list[str]:
    """The CUDA source of each CUDA module a build holds (TVM keeps it as source where no GPU
    loaded it). ``lib``: a built library or a Relax executable (its kernels are imported by its
    host module)."""
    sources, modules = [], list(lib.mod.imports)
    while modules:
        module = modules.pop()
        modules.extend(module.imports)
        source = module.inspect_source("cuda") if module.kind == "cuda" else ""
        sources += [source] if source else []
    return sources


def check_cuda_kernels(lib: Any, target: Any) -> int:
    """Compile a CUDA build's kernels with nvcc (where it is installed) for the target's
    architecture; returns how many CUDA modules it compiled. Without a GPU, TVM keeps them as CUDA
    source (``cuda_sources``), which no compiler reads until a GPU loads them: this is what
    catches, on the machine that builds, a kernel nvcc refuses."""
    nvcc = find_nvcc()
    if nvcc is None:
        return 0
    from tvm.support import nvcc as tvm_nvcc

    os.environ["PATH"] = os.path.dirname(nvcc) + os.pathsep + os.environ.get("PATH", "")
    sources = cuda_sources(lib)
    for source in sources:
        start = time.perf_counter()
        try:
            with target:
                tvm_nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc")
        finally:
            _DEVICE_COMPILER["seconds"] += time.perf_counter() - start
    return len(sources)


def build_artifact(mod: Any, target: Any, out_dir: str, remove_layout_rewrite: bool, check: bool,
                   gpu_here: bool = False) -> tuple:
    """Compile ``mod`` for ``target``; returns (path, arg_info, check_path, check_arg_info, seconds,
    device_seconds): the build's seconds, and those of them spent in the CUDA compiler (0 on a CPU).

    ``gpu_here``: the machine has the target's GPU, where TVM's code generator compiles a CUDA
    build's kernels itself (its compiler callback, timed by ``_time_device_compiler``); without
    one TVM keeps them as source and nvcc compiles them here (``check_cuda_kernels``). The tuning
    process says so: a build worker never opens a GPU context of its own.

    With ``remove_layout_rewrite`` the weight-layout rewrite block is dropped before the timed
    build (weights are taken as pre-laid-out, MetaSchedule's convention); with ``check`` a second
    library that keeps the rewrite is built so its output can be compared with the reference.
    """
    import tvm_ffi
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    start, device_before = time.perf_counter(), _DEVICE_COMPILER["seconds"]
    timed = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod) if remove_layout_rewrite else mod
    path = _compile(timed, target, out_dir, "", gpu_here)
    check_path = None
    if check:
        check_path = path if timed is mod or tvm_ffi.structural_equal(timed, mod) else _compile(mod, target, out_dir, "_check", gpu_here)
    return (path, _arg_info(timed), check_path, _arg_info(mod), time.perf_counter() - start,
            _DEVICE_COMPILER["seconds"] - device_before)


def random_inputs(arg_info: list, seed: int = 0) -> list[np.ndarray]:
    """Deterministic random arguments, the same for the reference and every candidate."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in arg_info:
        if dtype == "bfloat16":  # NumPy knows it through ml_dtypes (a dependency of TVM)
            import ml_dtypes

            arrays.append(rng.uniform(-1, 1, size=shape).astype(ml_dtypes.bfloat16))
        elif "float" in dtype:
            arrays.append(rng.uniform(-1, 1, size=shape).astype(dtype))
        elif dtype == "bool":
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            arrays.append(rng.integers(0, 8, size=shape).astype(dtype))
    return arrays


def _load(path: str, session: Any) -> Any:
    import tvm

    if session is None:
        return tvm.runtime.load_module(path)
    session.upload(path)
    return session.load_module(os.path.basename(path))


def _execute(func: Any, dev: Any, arrays: list[np.ndarray]) -> list[np.ndarray]:
    import tvm

    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    func(*tensors)
    dev.sync()
    return [t.numpy() for t in tensors]


def _timing_args(arg_info: list, dev: Any) -> list:
    """The deterministic random arguments of ``arg_info`` on ``dev``, made once per task."""
    import tvm

    key = (str(dev), repr(arg_info))
    if key not in _TIMING_ARGS:
        while len(_TIMING_ARGS) >= TIMING_ARGS_KEPT:
            _TIMING_ARGS.pop(next(iter(_TIMING_ARGS)))
        _TIMING_ARGS[key] = [tvm.runtime.tensor(a, dev) for a in random_inputs(arg_info)]
    return _TIMING_ARGS[key]


EVICTOR = "autotvm.evict_private_caches"
EVICT_FACTOR = 4  # bytes each thread reads, in private caches' sizes, to evict its core's


def _preprocessor(flush: bool | str) -> str:
    """The ``time_evaluator`` preprocessor run before each timed repeat: none (the caches as the
    last repeat left them), TVM's flush of every argument but the first (``True``), or for
    ``"private"`` ``EVICTOR``, which empties each core's private caches of the kernel's data and
    leaves the last-level cache as it was (``LocalRunner``)."""
    if flush == "private":
        _register_evictor()
        return EVICTOR
    return "cache_flush_cpu_non_first_arg" if flush else ""


def _register_evictor() -> None:
    """Register ``EVICTOR`` in this worker, once: a kernel whose threads (the runtime's, one row
    each) read a buffer of ``EVICT_FACTOR`` private caches each."""
    import tvm
    from tvm import te

    if tvm.get_global_func(EVICTOR, allow_missing=True) is not None:
        return
    threads = tvm.get_global_func("runtime.NumThreads")()  # the pool's threads, as TVM counts them
    lanes = 16
    n = EVICT_FACTOR * private_cache_bytes() // (4 * lanes)
    data = te.placeholder((threads, n, lanes), "float32", name="data")
    k = te.reduce_axis((0, n), "k")
    sums = te.compute((threads, lanes), lambda i, v: te.sum(data[i, k, v], axis=k), name="sums")
    sch = tvm.s_tir.Schedule(te.create_prim_func([data, sums]))
    block = sch.get_sblock("sums")
    i, v, k = sch.get_loops(block)
    sch.reorder(i, k, v)  # LLVM makes the 16 lanes one vector
    sch.parallel(i)
    kernel = tvm.compile(sch.mod, target="llvm")
    dev = tvm.cpu()
    buffers = (tvm.runtime.tensor(np.ones((threads, n, lanes), "float32"), dev),
               tvm.runtime.empty((threads, lanes), "float32", dev))

    def evict(*_args: Any) -> None:
        kernel(*buffers)

    tvm.register_global_func(EVICTOR, evict)


def run_evaluator_private(rt_mod: Any, device: Any, evaluator_config: Any, repeated_args: list) -> list[float]:
    """MetaSchedule's run evaluator (its ``LocalRunner``'s ``f_run_evaluator``) with each
    core's private caches evicted before each repeat, as ``run_artifact`` times with
    ``flush="private"``."""
    evaluator = rt_mod.time_evaluator(rt_mod.entry_name, device, number=evaluator_config.number,
                                      repeat=evaluator_config.repeat, min_repeat_ms=evaluator_config.min_repeat_ms,
                                      f_preproc=_preprocessor("private"))
    costs = []
    for args in repeated_args:
        device.sync()
        costs += [float(cost) for cost in evaluator(*args).results]
    return costs


def run_artifact(job: dict) -> tuple:
    """Time one built library on its device; optionally check it against the reference.

    ``job`` keys: path, arg_info, device, number, repeat, min_repeat_ms, flush, and for a check
    check_path, check_arg_info, reference_path; for RPC: tracker (host, port, key, priority, timeout).
    Returns ("ok", costs) or ("wrong", message).
    """
    import tvm

    session = None
    if job.get("tracker"):
        host, port, key, priority, timeout = job["tracker"]
        session = tvm.rpc.connect_tracker(host, port).request(key, priority=priority, session_timeout=timeout)
    dev = session.device(job["device"]) if session is not None else tvm.device(job["device"])
    module = _load(job["path"], session)
    func = module["main"]
    if job.get("reference_path"):
        inputs = random_inputs(job["check_arg_info"])
        ref_key = job["reference_path"]
        if ref_key not in _REFERENCE_OUTPUTS:
            _REFERENCE_OUTPUTS[ref_key] = _execute(_load(ref_key, session)["main"], dev, inputs)
        check_func = func if job["check_path"] == job["path"] else _load(job["check_path"], session)["main"]
        got = _execute(check_func, dev, inputs)
        for i, (a, b) in enumerate(zip(got, _REFERENCE_OUTPUTS[ref_key])):
            if not np.allclose(a, b, rtol=1e-3, atol=1e-3):
                err = float(np.max(np.abs(a.astype(np.float64) - b)))
                return "wrong", f"argument {i} differs from the reference (max abs error {err:.3g})"
    args = _timing_args(job["arg_info"], dev) if session is None else \
        [tvm.runtime.tensor(a, dev) for a in random_inputs(job["arg_info"])]
    timer = module.time_evaluator("main", dev, number=job["number"], repeat=job["repeat"],
                                  min_repeat_ms=job["min_repeat_ms"], f_preproc=_preprocessor(job["flush"]))
    costs = list(timer(*args).results)
    if len(costs) > 2:  # AutoTVM's convention: drop the fastest and slowest repeat
        costs = sorted(costs)[1:-1]
    return "ok", costs
