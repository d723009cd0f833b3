"""An LLVM target means this machine unless it says otherwise: its CPU, hence its vector units."""

import os
import subprocess
import sys

import pytest
import tvm
from tvm import te
from tvm.target import codegen

import autotvm
from autotvm import env
from autotvm.task import x86_bf16


def test_bare_llvm_gets_this_cpu_and_core_count():
    target = autotvm.make_target("llvm")
    assert str(target.attrs["mcpu"]) == codegen.llvm_get_system_cpu()
    assert int(target.attrs["num-cores"]) >= 1


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux's CPU affinity")
def test_a_process_allowed_one_cpu_builds_runs_and_checks_on_one():
    """A cluster's job or a container sees the whole machine in ``os.cpu_count()`` but may use
    only the CPUs of its cpuset: the target's cores (the threads kernels run with), the build
    workers, the checking threads and a config's default ``n_parallel`` follow those."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "import autotvm; from autotvm.tuner.tuner import _checker; from tools.config import load_config; "
            "print(int(autotvm.make_target('llvm').attrs['num-cores']), autotvm.LocalBuilder().n_parallel, "
            "_checker()._max_workers, load_config('{}').autotuner_settings.n_parallel)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "1", "1", "1"]


_PARALLEL_KERNEL = """
import os, sys
import numpy as np
cpu = max(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})
import tvm
from tvm import te
import autotvm
autotvm.use_runtime_threads(2)  # more threads than the process was given
a = te.placeholder((256, 256), name="a")
b = te.compute((256, 256), lambda i, j: a[i, j] * 2.0, name="b")
sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
sch.parallel(sch.get_loops(sch.get_sblock("b"))[0])
lib = tvm.compile(sch.mod, target=autotvm.make_target("llvm"))
x = tvm.runtime.tensor(np.ones((256, 256), "float32"))
y = tvm.runtime.tensor(np.zeros((256, 256), "float32"))
lib(x, y)
assert y.numpy().min() == 2.0
print(sorted(os.sched_getaffinity(0)) == [cpu])
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs Linux's CPU affinity and 2 CPUs")
def test_tvms_threads_stay_on_the_cpus_the_process_was_given():
    """TVM's thread pool pins its threads across the whole machine: a run pinned to one CPU with
    ``taskset`` ended on every CPU, so two jobs pinned apart would time kernels on the same cores."""
    out = subprocess.run([sys.executable, "-c", _PARALLEL_KERNEL], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"]


_WORKERS_AFTER_A_KERNEL = """
import os
import psutil, tvm
from tvm import te
import autotvm
tvm.get_global_func("runtime.NumThreads")()  # TVM's thread pool starts, of one thread: it pins this one
a = te.placeholder((64, 64), name="a")
task = autotvm.task.create_from_primfunc(te.create_prim_func([a, te.compute((64, 64), lambda i, j: a[i, j] * 2)]),
                                         "llvm", name="double")
builder = autotvm.LocalBuilder(n_parallel=2, timeout=20)
builder.build([autotvm.MeasureInput(task.target, task, task.config_space.get(0))])
print(len(os.sched_getaffinity(0)), *sorted(len(os.sched_getaffinity(c.pid)) for c in psutil.Process().children()))
builder.close()
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux's CPU affinity and 2 CPUs")
def test_workers_get_every_cpu_after_tvm_pinned_the_tuning_thread():
    """A process starts on the CPUs of the thread that starts it, and TVM's thread pool, started
    with one thread, pins the thread that starts it to one core: a script that ran a kernel before
    tuning would build and time on that one core. Workers start on every CPU the process was given."""
    out = subprocess.run([sys.executable, "-c", _WORKERS_AFTER_A_KERNEL], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, env={**os.environ, "PYTHONPATH": ROOT, "TVM_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    cpus = str(len(os.sched_getaffinity(0)))
    assert out.stdout.split() == ["1", cpus, cpus], out.stdout


@pytest.mark.parametrize("files, cores", [
    ({"cpu.max": "150000 100000\n"}, 2),  # cgroup v2: 1.5 CPUs, rounded up
    ({"cpu.max": "max 100000\n"}, None),  # v2 without a quota
    ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4),  # v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1 without a quota
    ({}, None),  # no cgroup files
])
def test_a_cgroup_cpu_quota_caps_the_cores(tmp_path, files, cores):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert autotvm.env.cgroup_cpu_quota(str(tmp_path)) == cores


def test_the_host_target_has_the_vector_extensions_this_cpu_reports():
    """A virtual machine may report a CPU model older than the CPU it runs on (a KVM guest with AMX
    that LLVM names Rocket Lake): the host target adds what /proc/cpuinfo lists and the name lacks,
    and takes away what the name has and the CPU does not."""
    flags = env.host_cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo flags")
    features = env.cpu_features(autotvm.make_target("llvm"))
    for flag, llvm in env._VECTOR_EXTENSIONS.items():
        assert (llvm in features) == (flag in flags), (flag, llvm)


def test_a_cpu_name_is_corrected_by_the_flags_the_cpu_reports(tmp_path):
    guest = tmp_path / "cpuinfo"
    guest.write_text("processor\t: 0\nflags\t\t: fpu avx avx2 fma f16c avx512f avx512dq avx512cd avx512bw "
                     "avx512vl avx512ifma avx512vbmi avx512_vbmi2 avx512_vnni avx512_bitalg avx512_vpopcntdq "
                     "avx512_bf16 amx_tile amx_bf16\n")
    flags = env.host_cpu_flags(str(guest))
    assert {"avx512_bf16", "amx_tile"} <= flags
    mattr = env.host_mattr("rocketlake", flags)
    assert mattr == ["+amx-bf16", "+amx-tile", "+avx512bf16"]
    target = autotvm.make_target({"kind": "llvm", "mcpu": "rocketlake", "mattr": mattr})
    assert x86_bf16.cpu_has_bf16(target) and x86_bf16.cpu_has_amx_bf16(target)
    hidden = env.host_mattr("sapphirerapids", frozenset({"avx", "avx2", "fma", "f16c"}))
    assert {"-avx512f", "-avx512bf16", "-amx-tile"} <= set(hidden)
    assert not x86_bf16.cpu_has_bf16(autotvm.make_target({"kind": "llvm", "mcpu": "sapphirerapids",
                                                           "mattr": hidden}))
    assert env.host_mattr("sapphirerapids", None) == []
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert env.host_cpu_flags(str(tmp_path / "arm")) is None


def test_explicit_cpu_or_cross_triple_is_kept():
    assert str(autotvm.make_target({"kind": "llvm", "mcpu": "haswell"}).attrs["mcpu"]) == "haswell"
    cross = autotvm.make_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    assert "mcpu" not in cross.attrs


def test_host_target_emits_wide_fused_vector_code():
    """Without ``mcpu`` LLVM emits SSE2 only; with the host CPU a multiply-add uses AVX2 FMA
    (skipped on a CPU without AVX2)."""
    if "avx2" not in (env.host_cpu_flags() or ()):
        pytest.skip("this CPU has no AVX2")
    n = 1024
    a = te.placeholder((n,), name="a")
    b = te.placeholder((n,), name="b")
    c = te.compute((n,), lambda i: a[i] * b[i] + a[i], name="c")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b, c]))
    (loop,) = sch.get_loops(sch.get_sblock("c"))
    _, inner = sch.split(loop, [None, 8])
    sch.vectorize(inner)
    asm = tvm.compile(sch.mod, target=autotvm.make_target("llvm")).mod.inspect_source("asm")
    assert "ymm" in asm and "vfmadd" in asm


_INTRINSICS_BY_TARGET = """
import sys
from tvm import te
from tvm.s_tir import TensorIntrin
import autotvm

def matmul(dtype):
    a = te.placeholder((64, 64), dtype, name="A")
    b = te.placeholder((64, 64), dtype, name="B")
    r = te.reduce_axis((0, 64), name="r")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, r].astype("float32") * b[r, j].astype("float32"), axis=r))
    return te.create_prim_func([a, b, c])

loaded = lambda name: name if f"tvm.s_tir.tensor_intrin.{name}" in sys.modules else "no-" + name
autotvm.task.create_from_primfunc(matmul("float32"), "llvm", name="cpu")
print(loaded("cuda"), loaded("arm_cpu"), TensorIntrin.get("dot_16x4_vnni") is not None)
autotvm.task.create_from_primfunc(matmul("float32"), {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, name="arm")
print(loaded("cuda"), loaded("arm_cpu"))
task = autotvm.task.create_from_primfunc(matmul("float16"), {"kind": "cuda", "arch": "sm_90"}, name="gpu")
print(loaded("cuda"), TensorIntrin.get("wmma_sync_16x16x16_f16f16f32") is not None, len(task.config_space) > 0)
"""


def test_a_cpu_task_loads_the_cpu_intrinsics_and_a_gpu_task_the_cuda_ones(tmp_path):
    """A CPU tune imports only its architecture's tensor intrinsics, never the CUDA ones (the
    costliest to import): on an x86 machine its MetaSchedule context finds x86's (VNNI among them);
    an ARM target's task later in the process gets ARM's, and a GPU task the CUDA ones for its
    tensor-core sketches."""
    out = subprocess.run([sys.executable, "-c", _INTRINSICS_BY_TARGET], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, env={**os.environ, "PYTHONPATH": ROOT, "AUTOTVM_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["no-cuda", "no-arm_cpu", "True", "no-cuda", "arm_cpu", "cuda", "True", "True"], out.stdout
