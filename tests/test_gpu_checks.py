"""CUDA tasks without a GPU: the target's limits, the check before building, a clear runner error.

On a GPU, MetaSchedule's postprocessors reject most of a design space (threads per block, shared
memory). These tests need no GPU: the design space, the check and the builds (where nvcc is
installed) are TVM's own; only the timings given to the tuners are synthetic, because nothing
here can run a CUDA kernel.
"""

import json
import os
import re
import shutil
import time

import numpy as np
import pytest
import tvm

import autotvm
from autotvm.measure.measure import MeasureInput, MeasureResult
from tools.tuners import make_tuner

from conftest import matmul_primfunc
from test_driver import ROOT

HAS_GPU = tvm.cuda(0).exist


@pytest.fixture(scope="module")
def cuda_task():
    return autotvm.task.create_from_primfunc(matmul_primfunc(256, 256, 256), "cuda", name="mm256-cuda")


def test_a_bare_cuda_target_gets_the_limits_the_gpu_rules_read():
    target = autotvm.make_target("cuda")
    assert int(target.attrs["max_threads_per_block"]) >= 256
    assert int(target.attrs["max_shared_memory_per_block"]) >= 48 * 1024
    given = autotvm.make_target({"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 512})
    assert int(given.attrs["max_threads_per_block"]) == 512 and str(given.attrs["arch"]) == "sm_80"


def test_most_of_a_cuda_space_is_rejected_before_building(cuda_task):
    assert cuda_task.checks_before_build
    rng = np.random.default_rng(0)
    verdicts = [cuda_task.check(cuda_task.config_space.get(int(i)))
                for i in rng.integers(0, len(cuda_task.config_space), 100)]
    rejected = [v for v in verdicts if v is not None]
    assert 50 <= len(rejected) < 100, len(rejected)  # measured: 93% of uniform configs
    assert all("VerifyGPUCode" in v or "threads per block" in v or "shared memory per block" in v
               or "local memory per thread" in v for v in rejected)


def test_configs_over_the_thread_limits_are_rejected_from_their_tiles_alone(cuda_task):
    """Most rejected configs bind more threads to a block than the GPU allows (or fewer than the
    sketch asks): read from the tile sizes, without replaying the schedule. Every such config is
    one the postprocessors reject too, and the reading is many times faster than the replay."""
    rng = np.random.default_rng(1)
    configs = [cuda_task.config_space.get(int(i)) for i in rng.integers(0, len(cuda_task.config_space), 200)]
    start = time.perf_counter()
    quick = [cuda_task._threads_out_of_limits(c) for c in configs]
    quick_s = time.perf_counter() - start
    start = time.perf_counter()
    full = []
    for config in configs:
        try:
            cuda_task.schedule_of(config)
            full.append(None)
        except autotvm.task.space.InstantiationError as err:
            full.append(str(err))
    full_s = time.perf_counter() - start
    assert all(f is not None for q, f in zip(quick, full) if q is not None)  # never rejects a valid config
    caught = sum(q is not None for q in quick)
    assert caught >= 0.5 * sum(f is not None for f in full), (caught, full.count(None))
    assert quick_s < full_s / 10, (quick_s, full_s)
    assert all(f"allow 32 to {int(cuda_task.target.attrs['max_threads_per_block'])}" in q for q in quick if q)


def test_configs_over_the_shared_memory_are_rejected_from_their_replayed_loops(cuda_task):
    """Of the configs within the thread limits, most that the postprocessors reject copy more
    into shared memory than the GPU has: read from the replayed loops, before the postprocessors
    lower the program. Every such config is one the postprocessors reject too."""
    from autotvm.task.trace_task import _shared_memory_over_limit

    rng = np.random.default_rng(2)
    configs = [cuda_task.config_space.get(int(i)) for i in rng.integers(0, len(cuda_task.config_space), 400)]
    configs = [c for c in configs if cuda_task._threads_out_of_limits(c) is None]
    quick, full = [], []
    for config in configs:
        sch = cuda_task._replayed(config)
        quick.append(_shared_memory_over_limit(sch, cuda_task.target))
        try:
            cuda_task._postprocessed(sch)
            full.append(None)
        except autotvm.task.space.InstantiationError as err:
            full.append(str(err))
    assert all(f is not None for q, f in zip(quick, full) if q is not None)  # never rejects a valid config
    caught = sum(q is not None for q in quick)
    assert caught >= 0.5 * sum(f is not None for f in full) > 0, (caught, full)
    limit = int(cuda_task.target.attrs["max_shared_memory_per_block"])
    assert all(f"the target allows {limit}" in q for q in quick if q)
    verdicts = [cuda_task.check(c) for c in configs]  # the tune's check: the postprocessors' verdicts
    registers = [v is not None and "local memory per thread" in v for v in verdicts]  # (and a thread's registers),
    assert [v is None or r for v, r in zip(verdicts, registers)] == [f is None for f in full]
    assert all(v == q for v, q in zip(verdicts, quick) if q)  # given from the loops where they tell


def synthetic_timings(task, seen):
    """Checks every config it is given with the target's own check, records it, and times it
    synthetically (no GPU here): a smooth function of the knobs, so the tuners have a landscape."""
    def measure(inputs):
        out = []
        for inp in inputs:
            assert task.check(inp.config) is None, inp.config.index  # only valid configs reach a build
            seen.append(inp.config.index)
            cost = 1e-3 * (1.0 + 0.1 * sum(inp.config.knob) % 1.0)
            out.append(MeasureResult((cost,), 0, 0.0, time.time()))
        return out
    return measure


@pytest.mark.parametrize("name,options", [("random", {}), ("ga", {"pop_size": 8}), ("xgb", {"plan_size": 8}),
                                          ("ga-dqn", {"pop_size": 8})])
def test_tuners_spend_no_trial_on_a_config_the_target_rejects(cuda_task, name, options):
    tuner = make_tuner(name, cuda_task, seed=0, **options)
    seen = []
    tuner.run_loop(synthetic_timings(cuda_task, seen), 2, 24)
    assert len(tuner.history) == 24 and len(seen) == 24 and len(set(seen)) == 24  # the budget: valid configs
    assert tuner.rejected > 0 and all(row["error_no"] == 0 for row in tuner.history)
    assert set(seen) <= tuner.visited and len(tuner.visited) == 24 + tuner.rejected  # none proposed twice
    if name in ("ga", "ga-dqn"):  # a rejected child gave its slot back: the population is all valid
        assert all(cuda_task.check(cuda_task.config_space.get(m.index)) is None for m in tuner.population)
        assert tuner.generation >= 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc to build CUDA code")
def test_configs_that_pass_the_check_build(cuda_task):
    tuner = make_tuner("random", cuda_task, seed=1)
    seen = []
    tuner.run_loop(synthetic_timings(cuda_task, seen), 2, 4)
    builder = autotvm.LocalBuilder(n_parallel=2, timeout=60)
    builds = builder.build([MeasureInput(cuda_task.target, cuda_task, cuda_task.config_space.get(i)) for i in seen])
    assert [b.error_no for b in builds] == [0] * 4, [b.error_msg for b in builds]


@pytest.mark.skipif(HAS_GPU, reason="this machine has a CUDA GPU")
def test_measuring_on_cuda_without_a_gpu_is_a_clear_error(cuda_task):
    option = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=1), autotvm.LocalRunner())
    with pytest.raises(autotvm.AutoTVMError, match="no CUDA GPU.*RPC"):
        make_tuner("random", cuda_task, seed=0).tune(2, option)


def test_the_tune_summary_counts_the_configs_the_target_rejected():
    from tools.tune import format_summary

    row = {"model": "m", "task": "mm", "weight": 1, "configs": 900, "trials": 64, "best_gflops": 1.0, "seconds": 2.0}
    assert "rejected" not in format_summary([dict(row, rejected=0)])  # LLVM: nothing to say
    assert "rejected before building (not trials): 455" in format_summary([dict(row, rejected=455)])
    # a function with one config has nothing to tune: no GFLOPS figure, and the columns explained
    text = format_summary([dict(row, configs=1, trials=1, best_gflops=0.0, rejected=0)])
    assert "- (1 config)" in text and "0.00" not in text and "calls: times the model calls" in text
    # failed trials, by AutoTVM's error kind, summed over the tasks
    assert "failed" not in format_summary([dict(row, failed={})])
    text = format_summary([dict(row, failed={"build_timeout": 3}), dict(row, task="mm2", failed={"build_timeout": 1,
                                                                                                "compile_device": 2})])
    assert "trials that failed: 6 (build_timeout 4, compile_device 2)" in text
    # the build workers' load; on a CUDA target, the part of a build in the CUDA compiler
    pool = {"model_seconds": 10.0, "build_workers": 2, "builds": 8, "build_worker_seconds": 16.0}
    assert "busy 80% of the tuning time (8 builds, 2.00 s each on average)" in format_summary([dict(row, **pool)])
    assert "(8 builds, 2.00 s each on average, 1.50 s of it in the CUDA compiler, NVRTC)" in format_summary(
        [dict(row, **pool, build_device_compile_seconds=12.0, build_device_compiler="NVRTC")])


def test_a_space_the_target_rejects_entirely_ends_the_tuning_instead_of_looping():
    from synthetic import one_knob_dominates, synthetic_measure

    task = one_knob_dominates()
    task.checks_before_build = True
    task.check = lambda config: "postprocessor VerifyGPUCode rejected the config"  # nothing is valid
    tuner = make_tuner("ga", task, seed=0, pop_size=8)
    tuner.run_loop(synthetic_measure(task), 2, 16)
    assert tuner.history == [] and 0 < tuner.rejected <= 200 * 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc to compile CUDA code")
def test_without_a_gpu_the_builder_compiles_each_cuda_kernel_with_nvcc(cuda_task, tmp_path, monkeypatch):
    """TVM keeps a CUDA build's kernels as source where there is no GPU; the builder hands them to
    nvcc, so a kernel nvcc refuses fails here as it would on the GPU (a refusing nvcc shows it)."""
    if HAS_GPU:
        pytest.skip("on a GPU, TVM's code generator compiles the kernels itself")
    rng = np.random.default_rng(2)
    configs = [c for c in (cuda_task.config_space.get(int(i)) for i in rng.integers(0, len(cuda_task.config_space), 300))
               if cuda_task.check(c) is None][:2]
    inputs = [MeasureInput(cuda_task.target, cuda_task, c) for c in configs]
    builder = autotvm.LocalBuilder(n_parallel=2, timeout=60)
    try:
        assert [b.error_no for b in builder.build(inputs)] == [0, 0]
    finally:
        builder.close()
    # the builds' seconds, and the part of them in nvcc (the tune's summary prints both)
    assert builder.builds == 2 and 0 < builder.device_compile_seconds < builder.busy_seconds
    assert builder.device_compiler == "nvcc"
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'nvcc: kernel refused' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")  # the workers start with this PATH
    builder = autotvm.LocalBuilder(n_parallel=2, timeout=60)
    try:
        refused = builder.build(inputs)
    finally:
        builder.close()
    assert all(b.error_no == autotvm.MeasureErrorNo.COMPILE_DEVICE and "kernel refused" in b.error_msg
               for b in refused), [b.error_msg for b in refused]


def _no_compile_mode(monkeypatch) -> None:
    """TVM_CUDA_COMPILE_MODE and TVM_CUDA_NVRTC_EXTRA_OPTS unset for this test, and restored after
    it (as PATH)."""
    for name in ("TVM_CUDA_COMPILE_MODE", "TVM_CUDA_NVRTC_EXTRA_OPTS"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", os.environ["PATH"])


def test_nvcc_is_found_in_a_cuda_toolkit_off_the_path(tmp_path, monkeypatch):
    """A CUDA toolkit often stays off the PATH: nvcc is looked for where TVM looks for the toolkit
    (CUDA_PATH, CUDA_HOME, /usr/local/cuda), and TVM then compiles with it, not NVRTC."""
    from autotvm.env import cuda_compiler, find_nvcc, use_cuda_compiler

    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    _no_compile_mode(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc on it
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "cuda"))  # a toolkit without headers: no NVRTC to prefer
    assert find_nvcc() == str(nvcc) and cuda_compiler() == "nvcc"
    assert use_cuda_compiler() == "nvcc" and shutil.which("nvcc") == str(nvcc)  # TVM runs the one on the PATH
    assert os.environ["TVM_CUDA_COMPILE_MODE"] == "nvcc"
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvrtc")  # the user's choice stands
    assert use_cuda_compiler() == "NVRTC" and os.environ["TVM_CUDA_COMPILE_MODE"] == "nvrtc"


def test_nvrtc_compiles_with_a_precompiled_header_where_it_has_them(monkeypatch):
    """Where the project's CUDA compiler is NVRTC (no nvcc, or the user's choice), TVM's NVRTC
    compiles in its processes pre-include the CUDA headers into a precompiled header (NVRTC 12.8
    and later); a user's own NVRTC options, empty ones included, stand, and nvcc is left alone."""
    from autotvm import env

    _no_compile_mode(monkeypatch)
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvrtc")
    monkeypatch.setattr(env, "nvrtc_version", lambda: (12, 6))
    assert env.use_cuda_compiler() == "NVRTC" and "TVM_CUDA_NVRTC_EXTRA_OPTS" not in os.environ
    monkeypatch.setattr(env, "nvrtc_version", lambda: (13, 0))
    assert env.use_cuda_compiler() == "NVRTC"
    assert os.environ["TVM_CUDA_NVRTC_EXTRA_OPTS"] == env.NVRTC_PRECOMPILED_HEADER
    monkeypatch.setenv("TVM_CUDA_NVRTC_EXTRA_OPTS", "")  # the user's: no precompiled header
    assert not env.use_nvrtc_precompiled_header() and os.environ["TVM_CUDA_NVRTC_EXTRA_OPTS"] == ""
    monkeypatch.delenv("TVM_CUDA_NVRTC_EXTRA_OPTS")
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")
    assert env.use_cuda_compiler() == "nvcc" and "TVM_CUDA_NVRTC_EXTRA_OPTS" not in os.environ


def test_nvrtc_with_a_precompiled_header_is_preferred_to_nvcc(tmp_path, monkeypatch):
    """NVRTC builds faster than nvcc where it compiles with a precompiled header (NVRTC 12.8 and
    later, and the CUDA headers where TVM looks for them), so it is the compiler there, nvcc
    installed or not; elsewhere nvcc where found; a TVM_CUDA_COMPILE_MODE of the user's stands."""
    from autotvm import env

    _no_compile_mode(monkeypatch)
    monkeypatch.setattr(env, "find_nvcc", lambda: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(env, "nvrtc_version", lambda: (13, 0))
    monkeypatch.setenv("CUDA_PATH", str(tmp_path))
    assert not env.nvrtc_precompiles() and env.cuda_compiler() == "nvcc"  # no CUDA headers for NVRTC
    headers = tmp_path / "targets" / "x86_64-linux" / "include"
    headers.mkdir(parents=True)
    (headers / "cuda_runtime.h").write_text("")
    assert env.nvrtc_precompiles() and env.cuda_compiler() == "NVRTC"
    assert env.use_cuda_compiler() == "NVRTC" and os.environ["TVM_CUDA_COMPILE_MODE"] == "nvrtc"
    assert os.environ["TVM_CUDA_NVRTC_EXTRA_OPTS"] == env.NVRTC_PRECOMPILED_HEADER
    _no_compile_mode(monkeypatch)
    monkeypatch.setattr(env, "nvrtc_version", lambda: (12, 6))  # no precompiled headers
    assert not env.nvrtc_precompiles() and env.use_cuda_compiler() == "nvcc"
    monkeypatch.setattr(env, "nvrtc_version", lambda: (13, 0))
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")  # the user's choice stands
    assert env.use_cuda_compiler() == "nvcc" and "TVM_CUDA_NVRTC_EXTRA_OPTS" not in os.environ


@pytest.mark.skipif(not autotvm.env.nvrtc_precompiles(),
                    reason="needs cuda-bindings, NVRTC >= 12.8 and the CUDA headers (CUDA_PATH)")
def test_the_precompiled_header_leaves_the_machine_code_as_it_was(monkeypatch):
    """The precompiled header only saves NVRTC its parse of the headers: TVM's kernels (a float32
    and a float16 matmul's) compile to the bytes of a plain compile with it, and once it is made a
    compile takes under half the time of one without it."""
    from tvm.support import nvcc as tvm_nvcc

    from autotvm.env import NVRTC_PRECOMPILED_HEADER
    from autotvm.measure.workers import cuda_sources

    target = autotvm.make_target({"kind": "cuda", "arch": "sm_90"})
    sources = []
    for func in (matmul_primfunc(64, 64, 64), _fp16_matmul(64)):
        mod = tvm.IRModule({"main": func})
        sch = tvm.s_tir.Schedule(mod)
        i, j = sch.get_loops(sch.get_sblock("C"))[:2]
        sch.bind(i, "blockIdx.x")
        sch.bind(j, "threadIdx.x")
        lib = tvm.compile(sch.mod, target=target)
        sources += cuda_sources(lib)
    assert len(sources) == 2 and "half" in sources[1]
    with target:
        for source in sources:
            compiled, seconds = [], []
            # plain twice; the header made, then used
            for options in ("", "", NVRTC_PRECOMPILED_HEADER, NVRTC_PRECOMPILED_HEADER):
                monkeypatch.setenv("TVM_CUDA_NVRTC_EXTRA_OPTS", options)
                start = time.perf_counter()
                compiled.append(bytes(tvm_nvcc.compile_cuda(source, target_format="cubin", compiler="nvrtc")))
                seconds.append(time.perf_counter() - start)
            # NVRTC's own compiles of a kernel may differ in which registers they use (finding 11)
            assert compiled[2] in compiled[:2] and compiled[3] in compiled[:2] and len(compiled[0]) > 1000
            assert seconds[3] < min(seconds[:2]) / 2, seconds


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc to compile CUDA code")
def test_the_model_is_built_with_the_compiler_its_tune_measured(monkeypatch):
    """nvcc and NVRTC compile a kernel to different machine code, and TVM compiles with NVRTC unless
    told otherwise: the process that builds the tuned model compiles its CUDA kernels with the
    compiler the build workers compiled them with for the tune (NVRTC where it has a precompiled
    header, else nvcc where it is installed), and so do MetaSchedule's build workers, which start
    with its environment."""
    from tools.config import load_config
    from tools.metaschedule import _builder_and_runner
    from tools.models import build_model, load_program

    _no_compile_mode(monkeypatch)
    builder = autotvm.LocalBuilder(n_parallel=1, timeout=60)
    try:
        worker_mode = builder.executor.submit(os.getenv, "TVM_CUDA_COMPILE_MODE").result()
    finally:
        builder.close()
    assert worker_mode == autotvm.env.cuda_compiler().lower() and "TVM_CUDA_COMPILE_MODE" not in os.environ
    spec = {"name": "cnn", "type": "torch", "model": "cnn", "width": 8, "image_size": 16, "batch": 1}
    _, mod, params = load_program(spec)
    build_model(spec, mod, params, autotvm.make_target({"kind": "cuda", "arch": "sm_90"}))
    assert os.environ["TVM_CUDA_COMPILE_MODE"] == worker_mode
    monkeypatch.delenv("TVM_CUDA_COMPILE_MODE")
    settings = load_config(os.path.join(ROOT, "config-example.json")).autotuner_settings
    _builder_and_runner(settings, "llvm")  # a CPU's run leaves it alone
    assert "TVM_CUDA_COMPILE_MODE" not in os.environ
    _builder_and_runner(settings, "cuda")
    assert os.environ["TVM_CUDA_COMPILE_MODE"] == worker_mode


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc to compile CUDA code")
def test_the_cuda_compiler_callback_is_timed_and_still_compiles(monkeypatch):
    """On a GPU host TVM's code generator compiles each build's kernels through its callback
    ``tvm_callback_cuda_compile``; a build worker wraps it to time it, and the wrapped callback
    still returns the compiled kernel (called here as TVM calls it)."""
    import tvm_ffi

    from autotvm.measure import workers

    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")
    monkeypatch.setitem(workers._DEVICE_COMPILER, "seconds", 0.0)
    workers._time_device_compiler()
    source = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = 1.0f; }\n'
    with autotvm.make_target({"kind": "cuda", "arch": "sm_80"}):
        binary = tvm_ffi.get_global_func("tvm_callback_cuda_compile")(source)
    assert len(binary) > 100 and 0 < workers._DEVICE_COMPILER["seconds"] < 60


def _fp16_matmul(n=256, sums="float16"):
    return _fp16_matmul_of(n, n, n, sums)


def _fp16_matmul_of(rows, depth, columns, sums="float32"):
    """A float16 ``rows`` x ``depth`` by ``depth`` x ``columns`` matmul summing in ``sums``."""
    from tvm import te

    a = te.placeholder((rows, depth), name="A", dtype="float16")
    b = te.placeholder((depth, columns), name="B", dtype="float16")
    k = te.reduce_axis((0, depth), name="k")
    c = te.compute((rows, columns), lambda i, j: te.sum(a[i, k].astype(sums) * b[k, j].astype(sums), axis=k),
                   name="C")
    return te.create_prim_func([a, b, c])


def test_float16_tasks_on_tensor_core_gpus_search_tensor_core_kernels():
    """A float16 function on a GPU with tensor cores gets MetaSchedule's tensor-core rules: its
    sketches are tiled for WMMA, and the configs that pass the check compile to WMMA kernels."""
    from autotvm.task.trace_task import rules_kind

    task = autotvm.task.create_from_primfunc(_fp16_matmul(), {"kind": "cuda", "arch": "sm_80"}, name="mm256-f16")
    assert rules_kind(task.mod, task.target) == "cuda-tensorcore"
    assert rules_kind(task.mod, autotvm.make_target({"kind": "cuda", "arch": "sm_61"})) is None  # no tensor cores
    rng = np.random.default_rng(0)
    configs = [c for c in (task.config_space.get(int(i)) for i in rng.integers(0, len(task.config_space), 400))
               if task.check(c) is None][:3]
    assert configs
    for config in configs:
        lib = tvm.compile(task.instantiate(config), target=task.target)
        source = next(m for m in lib.mod.imports if m.kind == "cuda").inspect_source("cuda")
        assert "wmma::mma_sync" in source
        if shutil.which("nvcc"):
            from autotvm.measure.workers import check_cuda_kernels

            check_cuda_kernels(lib, task.target)  # nvcc compiles it for sm_80, or raises


def test_float16_matmuls_that_sum_in_float32_build_on_tensor_cores():
    """A float16 model's matmuls read float16 and sum in float32 (as PyTorch's do): every config
    that passes the check compiles to a WMMA kernel with float32 accumulators (TVM's default rules
    stage the sums in the dynamic shared memory of the float16 inputs, where TVM 0.27's code
    generator stops on most of them)."""
    task = autotvm.task.create_from_primfunc(_fp16_matmul(512, "float32"), {"kind": "cuda", "arch": "sm_90"},
                                             name="mm512-f16-f32sums")
    rng = np.random.default_rng(0)
    configs = [c for c in (task.config_space.get(int(i)) for i in rng.integers(0, len(task.config_space), 600))
               if task.check(c) is None][:6]
    assert len(configs) == 6
    for config in configs:
        lib = tvm.compile(task.instantiate(config), target=task.target)
        source = next(m for m in lib.mod.imports if m.kind == "cuda").inspect_source("cuda")
        assert "wmma::accumulator, 16, 16, 16, float>" in source
        if shutil.which("nvcc"):
            from autotvm.measure.workers import check_cuda_kernels

            check_cuda_kernels(lib, task.target)


def _copy(dtype, lanes, transposed):
    """A 64x64 copy whose threads read ``lanes`` values at once, down a column where ``transposed``."""
    from tvm import te
    from tvm.s_tir import Schedule

    a = te.placeholder((64, 64), dtype, name="A")
    b = te.compute((64, 64), (lambda i, j: a[j, i]) if transposed else (lambda i, j: a[i, j]), name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    i, j = sch.get_loops(sch.get_sblock("B"))
    outer, inner = sch.split(j, [None, lanes])
    sch.bind(i, "blockIdx.x")
    sch.bind(outer, "threadIdx.x")
    sch.vectorize(inner)
    return sch.mod


def test_a_float16_config_that_gathers_8_values_at_once_is_rejected_before_building():
    """TVM 0.27's CUDA code generator writes a vector of 8 float16 values that are not side by
    side as code nvcc refuses (a 16 it cannot write at all); the check rejects such a config
    before building: a copy down a column 8 or 16 at a time, not 4 at a time, not along a row,
    not in float32. Some configs of a 128x384x1536 float16 matmul (its weight tile read down its
    columns into shared memory) are such; nvcc compiles the others (where it is installed)."""
    from autotvm.task.trace_task import _float16_gathers, _loop_lowering

    target = autotvm.make_target({"kind": "cuda", "arch": "sm_90"})
    cases = {(dtype, lanes, transposed): _copy(dtype, lanes, transposed)
             for dtype in ("float16", "float32") for lanes in (4, 8, 16) for transposed in (True, False)}
    rejected = {case for case, mod in cases.items() if _float16_gathers(_loop_lowering()(mod)) is not None}
    assert rejected == {("float16", 8, True), ("float16", 16, True)}
    if shutil.which("nvcc"):
        from autotvm.measure.workers import check_cuda_kernels

        with pytest.raises(Exception, match="too many arguments"):
            check_cuda_kernels(tvm.compile(cases["float16", 8, True], target=target), target)
        check_cuda_kernels(tvm.compile(cases["float16", 4, True], target=target), target)
    task = autotvm.task.create_from_primfunc(_fp16_matmul_of(128, 384, 1536), target, name="mm-f16-128x384x1536")
    reasons = [task.check(task.config_space.get(int(i)))
               for i in np.random.default_rng(0).integers(0, len(task.config_space), 300)]
    assert any(why and "gather 8 or more float16" in why for why in reasons)


def test_metaschedule_beside_our_tuners_searches_the_same_tensor_core_kernels():
    """MetaSchedule's peer runs on a GPU with the tensor-core rules our tasks search (float32 sums
    staged where TVM 0.27 compiles them), on a CPU with its own defaults."""
    from tvm.s_tir import meta_schedule as ms

    from tools.metaschedule import _space

    assert _space(autotvm.make_target("llvm")) == "post-order-apply"
    target = autotvm.make_target({"kind": "cuda", "arch": "sm_90"})
    ctx = ms.TuneContext(mod=tvm.IRModule({"main": _fp16_matmul(256, "float32")}), target=target,
                         space_generator=_space(target), task_name="main", num_threads=1)
    sketches = [str(sch.trace) for sch in ctx.generate_design_space()]
    assert sketches and all("wmma_store_16x16x16_f32_shared\"" in trace for trace in sketches)


def test_a_gpu_build_replays_the_model_as_one_cuda_graph():
    """On a GPU the Relax VM captures the model's kernels between its first and last (those that
    read the input and write the output) as a CUDA graph, replayed as one launch."""
    from tools.models import build_model, load_program

    spec = {"name": "t", "type": "torch", "model": "transformer", "layers": 1}
    _, mod, params = load_program(spec)
    exe = build_model(spec, mod, params, autotvm.make_target({"kind": "cuda", "arch": "sm_80"}))
    assert "vm.builtin.cuda_graph.run_or_capture" in exe.as_text()
    cpu = build_model(spec, mod, params, autotvm.make_target("llvm"))
    assert "cuda_graph" not in cpu.as_text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc to compile CUDA code")
@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_whole_model_cuda_build_compiles_with_nvcc(precision, tmp_path, monkeypatch):
    """The benchmark's build of a whole model (TVM's default GPU schedules for the functions no
    record covers, the float16 conversion, the CUDA graph) is compiled by nvcc for an H100 as its
    GPU would load it, so a kernel nvcc refuses fails here, without a GPU (a refusing nvcc shows it)."""
    from autotvm.measure.workers import check_cuda_kernels
    from tools.models import build_model, load_program

    spec = {"name": "cnn", "type": "torch", "model": "cnn", "width": 16, "image_size": 32, "batch": 1}
    _, mod, params = load_program(spec)
    target = autotvm.make_target({"kind": "cuda", "arch": "sm_90"})
    exe = build_model(spec, mod, params, target, precision)
    assert check_cuda_kernels(exe, target) == 1  # one CUDA module holds every kernel of the model
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'nvcc: kernel refused' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(Exception, match="kernel refused"):
        check_cuda_kernels(exe, target)


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_on_a_gpu_attention_reads_in_place_and_deep_matmuls_and_convolutions_sum_in_parts(precision):
    """On a GPU (only there) a BERT layer's feed-forward down-projection (16x512x64) is two partial
    products of 256 each, its two attention matmuls read their heads in place, and, in float16, a
    3x3 convolution of 256 channels on 8x8 pixels is eight of 32 input channels each: tasks of
    their own whose float16 sketches are all on the tensor cores; the layer norms compute the sums
    before them; the whole builds compile with nvcc where it is installed."""
    from test_relax import conv_block, tiny_bert

    target = autotvm.make_target({"kind": "cuda", "arch": "sm_90"})
    _, bert, bound = tiny_bert()
    conv, _, _ = conv_block(2)
    for mod, params, names in ((bert, bound, {"split_k_matmul": [2, 16, 64], "view_matmul": None}),
                               (conv, None, {"split_k_conv2d": [8, 1, 8, 8, 256]})):
        extracted = autotvm.task.extract_from_program(mod, target, params, precision=precision)
        for name, shape in names.items():
            tasks = [t for t in extracted if name in t.name]
            if name == "split_k_conv2d" and precision == "float32":
                assert not tasks  # on CUDA cores a convolution stays whole
                continue
            assert len(tasks) == (2 if name == "view_matmul" else 1), [t.name for t in extracted]
            assert shape is None or [int(d) for d in tasks[0].mod["main"].params[-1].shape] == shape
            if precision == "float16":
                assert all("wmma_sync_16x16x16_f16f16f32" in str(trace) for task in tasks for trace in task.sketches)
        on_cpu = [t.name for t in autotvm.task.extract_from_program(mod, "llvm", params)]
        assert not [name for name in on_cpu if "split_k" in name or "view_matmul" in name], on_cpu
        if mod is bert:  # the embeddings' and the split-K parts' sums in the norms' kernels
            norms = [t.name for t in extracted if "layer_norm" in t.name]
            assert [n for n in norms if "take" in n] and [n for n in norms if "strided_slice" in n], norms
            assert not [n for n in on_cpu if "layer_norm" in n and "take" in n], on_cpu
        exe = autotvm.build_program(mod, target, params, precision=precision)
        assert all(name in exe.as_text() for name in names if precision == "float16" or name != "split_k_conv2d")
        if shutil.which("nvcc"):
            from autotvm.measure.workers import check_cuda_kernels

            assert check_cuda_kernels(exe, target) == 1


def test_a_float16_build_converts_the_weights_once_and_keeps_float32_outputs():
    """float16 (Relax's ToMixedPrecision): the fused functions read float16 weights folded at
    build time and sum in float32, the model's outputs stay float32 and are close to PyTorch's
    float32 ones (here run on the CPU, which has no tensor cores, only to check the numbers)."""
    from tvm import relax

    from tools.models import build_model, load_program
    from tools.timing import compare_outputs, cosine

    spec = {"name": "mlp", "type": "torch", "model": "mlp", "width": 64, "batch": 4}
    model, mod, params = load_program(spec)
    fused = autotvm.task.relax_integration.fused_program(mod, "llvm", params, precision="float16")
    matmuls = [f.script() for g, f in fused.functions_items() if "matmul" in g.name_hint]
    assert matmuls and all('"float16"' in f and "= T.float32(0.0)" in f for f in matmuls)  # sums in float32
    exe = build_model(spec, mod, params, autotvm.make_target("llvm"), "float16")
    vm = relax.VirtualMachine(exe, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(t.numpy()) for t in model.inputs])
    got = [o.numpy() for o in (out if not hasattr(out, "numpy") else [out])]
    assert got[0].dtype == np.float32
    error, _ = compare_outputs(got, model.torch_outputs(), 1e-2, 1e-2)
    assert error < 1e-2 and cosine(got, model.torch_outputs()) > 0.999


def test_the_benchmark_puts_every_runtime_on_the_targets_device():
    """On a GPU PyTorch runs there (eager, compiled, with CUDA graphs), ONNX Runtime only with a
    CUDA provider, OpenVINO not at all; on a CPU torch.compile's CUDA graphs are left out. What
    cannot run is one line, and nothing runs on the wrong device."""
    from tools.benchmark import default_variants
    from tools.models import load_model
    from tools.runtimes import Placement, RuntimeUnavailable, prepare

    assert "torch-compile-cudagraphs" in default_variants("cuda") and "openvino" not in default_variants("cuda")
    assert "torch-compile-cudagraphs" not in default_variants("cpu") and "openvino-f32" in default_variants("cpu")
    model = load_model({"name": "m", "type": "op", "workload": "mm64"})
    with pytest.raises(RuntimeUnavailable, match="not on this NVIDIA GPU"):
        prepare("openvino", model, Placement("cuda", 2, "float32"))
    with pytest.raises(RuntimeUnavailable, match="CUDA graphs need a GPU"):
        prepare("torch-compile-cudagraphs", model, Placement("cpu", 2, "float32"))
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(RuntimeUnavailable, match="no CUDA provider"):
            prepare("onnxruntime", model, Placement("cuda", 2, "float32"))


def test_the_correctness_reference_of_a_cuda_task_is_a_gpu_kernel(cuda_task):
    """check_correctness compares each config with the untuned program: for a GPU its loops are
    bound to threads, or TVM compiles it for the host, which would be handed the GPU's pointers."""
    from autotvm.measure.local import reference_module

    assert [m.kind for m in tvm.compile(cuda_task.default_module(), target=cuda_task.target).mod.imports] == []
    lib = tvm.compile(reference_module(cuda_task), target=cuda_task.target)
    assert [m.kind for m in lib.mod.imports] == ["cuda"]


def test_rounds_in_flight_default_to_two_on_a_gpu_and_one_on_a_cpu():
    from tools.config import load_config

    for target, expected in (("llvm", 1), ("cuda", 2)):
        settings = load_config(json.dumps({"target": target})).autotuner_settings
        assert settings.in_flight(autotvm.make_target(target)) == expected
    settings = load_config(json.dumps({"target": "cuda", "autotuner_settings": {"rounds_in_flight": 1}}))
    assert settings.autotuner_settings.in_flight(autotvm.make_target("cuda")) == 1


def _cuda_source(lib):
    from autotvm.measure.workers import cuda_sources

    return "".join(cuda_sources(lib))


def test_configs_whose_thread_buffers_outgrow_the_registers_are_rejected(cuda_task, tmp_path):
    """A config the postprocessors accept is still rejected where a thread's own buffers (its
    tile of sums, once per virtual thread) need more 32-bit words than a thread's 255 registers:
    counted as the CUDA source declares them. Where nvcc is installed, ptxas puts such a buffer
    in a stack frame (local memory)."""
    import subprocess

    from autotvm.task.trace_task import REGISTERS_PER_THREAD

    rng = np.random.default_rng(3)
    valid, over = [], []
    for index in rng.integers(0, len(cuda_task.config_space), 3000):
        config = cuda_task.config_space.get(int(index))
        if cuda_task._threads_out_of_limits(config) is not None:
            continue
        try:
            cuda_task.schedule_of(config)
        except autotvm.task.space.InstantiationError:
            continue
        why = cuda_task.check(config)
        assert why is None or "local memory per thread" in why, why
        (valid if why is None else over).append(config)
        if len(valid) >= 3 and len(over) >= 3:
            break
    assert len(valid) >= 3 and len(over) >= 3, (len(valid), len(over))
    for config in valid[:3] + over[:3]:
        source = _cuda_source(tvm.compile(cuda_task.schedule_of(config).mod, target=cuda_task.target))
        words = sum(int(n) for n in re.findall(r"float \w+_local_ptr\[(\d+)\]", source))
        why = cuda_task.check(config)
        assert (words > REGISTERS_PER_THREAD) == (why is not None), (words, why)
        assert why is None or why.startswith(f"{words} 32-bit words of local memory per thread"), (words, why)
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        (tmp_path / "kernel.cu").write_text(source)  # the last of the rejected configs
        ptxas = subprocess.run([nvcc, "--cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", str(tmp_path / "kernel.cubin"),
                                str(tmp_path / "kernel.cu")], capture_output=True, text=True)
        assert ptxas.returncode == 0, ptxas.stderr[-2000:]
        frames = [int(n) for n in re.findall(r"(\d+) bytes stack frame", ptxas.stdout + ptxas.stderr)]
        assert frames and max(frames) > 0, frames
