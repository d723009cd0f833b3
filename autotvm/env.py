"""Process-wide helpers for the TVM platform: target parsing, the CPUs and threads, the CUDA
compiler, and the one-off intrinsic import.

Kept in one place so that every layer above agrees on what a target is and so that the
expensive import of TVM's tensor intrinsics happens at most once per process.
"""

from __future__ import annotations

import functools
import glob
import importlib
import importlib.util
import inspect
import math
import os
import platform
import shutil
import sys
from typing import Any

import tvm

from .checks import AutoTVMError, check_int

SUPPORTED_TARGET_KINDS = ("llvm", "cuda")


def make_target(target: Any) -> tvm.target.Target:
    """Turn "llvm", "cuda", a target dict or a ``Target`` into a ``tvm.target.Target``.

    An LLVM target without ``mcpu`` or ``mtriple`` is for this machine: its CPU and core count
    are filled in (as ``-mcpu=native`` would), so vector units such as AVX2/FMA are used.

    Current TVM refuses CLI strings such as "llvm -mcpu=x", so only bare kind names and dicts
    are accepted; anything else gets a one-line error listing what is allowed.
    """
    if isinstance(target, tvm.target.Target):
        kind = target.kind.name
        if kind not in SUPPORTED_TARGET_KINDS:
            raise AutoTVMError(f"unknown target kind {kind!r}; allowed: {', '.join(SUPPORTED_TARGET_KINDS)}")
        return target
    if isinstance(target, str) and target.strip().startswith("{"):
        import json

        try:
            spec: dict = json.loads(target)
        except json.JSONDecodeError:
            raise AutoTVMError(f"target {target!r} is not valid JSON") from None
    elif isinstance(target, str):
        spec = {"kind": target.strip()}
    elif isinstance(target, dict):
        spec = dict(target)
    else:
        raise AutoTVMError(f"target must be a kind name or a dict, got {type(target).__name__}")
    kind = spec.get("kind")
    if kind not in SUPPORTED_TARGET_KINDS:
        raise AutoTVMError(
            f"unknown target kind {kind!r}; allowed: {', '.join(SUPPORTED_TARGET_KINDS)} "
            "(or a dict such as {\"kind\": \"llvm\", \"num-cores\": 2})"
        )
    if kind == "llvm":
        spec = _host_defaults(spec)
        _check_mcpu(spec)
    elif kind == "cuda":
        spec = _cuda_defaults(spec)
    try:
        return tvm.target.Target(spec)
    except Exception as err:  # TVM's message is long; keep its first line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise AutoTVMError(f"invalid target {spec!r}: {first}") from None


def _check_mcpu(spec: dict) -> None:
    """LLVM takes an unknown ``mcpu`` with a warning and emits generic code: a tune for a CPU that
    was misspelt would run at a fraction of the speed, with exit code 0."""
    from tvm.target import codegen

    mcpu = spec.get("mcpu")
    if mcpu is None:
        return
    probe = tvm.target.Target({key: spec[key] for key in ("kind", "mtriple") if key in spec})
    known = list(codegen.llvm_get_cpu_archlist(probe))
    if known and mcpu not in known:
        close = [name for name in known if name.startswith(str(mcpu)[:4])][:6]
        raise AutoTVMError(f"target mcpu {mcpu!r} is not a CPU LLVM knows for this triple; leave mcpu out for this "
                           f"machine's ({codegen.llvm_get_system_cpu()}), or name one such as "
                           f"{', '.join(close or known[:6])}")


@functools.lru_cache(maxsize=None)
def host_cores() -> int:
    """The cores this process may use, as a cluster's job or a container gets them: the CPUs its
    affinity allows (a cpuset: Slurm, Kubernetes, ``taskset``), capped by a cgroup CPU quota
    (``docker --cpus``); ``os.cpu_count()`` counts the whole machine's."""
    quota = cgroup_cpu_quota()
    cores = len(allowed_cpus())
    return max(1, min(cores, quota) if quota else cores)


def _read_allowed_cpus() -> frozenset:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return frozenset(range(os.cpu_count() or 1))


_ALLOWED_CPUS = _read_allowed_cpus()


def allowed_cpus() -> frozenset:
    """The CPUs this process's affinity allows (every CPU where the platform cannot say), as read
    when this module was imported: TVM's CPU thread pool pins the thread that starts it (to one
    core, when it has one thread), which changes what that thread reads later."""
    return _ALLOWED_CPUS


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> int | None:
    """The CPUs the container's cgroup quota allows, rounded up (cgroup v2's ``cpu.max``, v1's
    ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``, under ``root``), or None without a quota."""
    def read(path: str) -> list[str] | None:
        try:
            with open(os.path.join(root, path)) as handle:
                return handle.read().split()
        except OSError:
            return None

    fields = read("cpu.max")  # v2: "<quota> <period>" or "max <period>"
    if fields is None:
        for folder in ("cpu", "cpu,cpuacct"):  # v1
            quota, period = read(f"{folder}/cpu.cfs_quota_us"), read(f"{folder}/cpu.cfs_period_us")
            if quota and period:
                fields = quota + period
                break
    try:
        quota_us, period_us = int(fields[0]), int(fields[1])  # "max" (v2) raises: no quota
    except (TypeError, IndexError, ValueError):
        return None
    return math.ceil(quota_us / period_us) if quota_us > 0 and period_us > 0 else None  # v1: -1, no quota


def _host_defaults(spec: dict) -> dict:
    """Fill an LLVM target in for this machine: the cores this process may use (``host_cores``)
    and, unless the target names a CPU or a triple (cross-compiling), this CPU's name. Without
    ``mcpu`` LLVM emits generic x86-64 code (SSE2, no FMA), at about half the speed of the host's
    vector units."""
    from tvm.target import codegen

    spec = dict(spec)
    spec.setdefault("num-cores", host_cores())
    if "mcpu" not in spec and "mtriple" not in spec:
        host = codegen.llvm_get_system_cpu()
        if host and host != "generic":
            spec["mcpu"] = host
            if "mattr" not in spec and (mattr := _host_mattr(host)):
                spec["mattr"] = list(mattr)
    return spec


# The vector extensions the kernels use: their names in /proc/cpuinfo and in LLVM.
_VECTOR_EXTENSIONS = {
    "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "avx_vnni": "avxvnni",
    "avx512f": "avx512f", "avx512dq": "avx512dq", "avx512cd": "avx512cd", "avx512bw": "avx512bw",
    "avx512vl": "avx512vl", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi",
    "avx512_vbmi2": "avx512vbmi2", "avx512_vnni": "avx512vnni", "avx512_bitalg": "avx512bitalg",
    "avx512_vpopcntdq": "avx512vpopcntdq", "avx512_bf16": "avx512bf16", "avx512_fp16": "avx512fp16",
    "amx_tile": "amx-tile", "amx_bf16": "amx-bf16", "amx_int8": "amx-int8",
}


def host_cpu_flags(path: str = "/proc/cpuinfo") -> frozenset | None:
    """The x86 CPU's feature flags as the kernel reports them (``flags`` in /proc/cpuinfo), or
    None where there are none to read (another OS, another architecture)."""
    try:
        with open(path, encoding="utf-8") as handle:
            line = next((line for line in handle if line.startswith("flags")), None)
    except OSError:
        return None
    return frozenset(line.split(":", 1)[1].split()) if line and ":" in line else None


def host_mattr(mcpu: str, flags: frozenset | None) -> list[str]:
    """The vector extensions to add to (``+``) or take from (``-``) the CPU LLVM names ``mcpu``
    so that code built for it uses what this CPU has and nothing it has not. A hypervisor may
    report a CPU model older than the CPU it passes through (a KVM guest with AMX and AVX512-BF16
    that LLVM names Rocket Lake, which has neither), or hide extensions the model has."""
    if not flags:
        return []
    named = cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})) or frozenset()
    add = [f"+{llvm}" for flag, llvm in _VECTOR_EXTENSIONS.items() if flag in flags and llvm not in named]
    drop = [f"-{llvm}" for flag, llvm in _VECTOR_EXTENSIONS.items() if flag not in flags and llvm in named]
    return sorted(add) + sorted(drop)


@functools.lru_cache(maxsize=None)
def _host_mattr(mcpu: str) -> tuple[str, ...]:
    """``host_mattr`` for this machine's CPU, read once a process."""
    return tuple(host_mattr(mcpu, host_cpu_flags()))


def _cuda_defaults(spec: dict) -> dict:
    """Fill a CUDA target in with the limits MetaSchedule's GPU rules read: this machine's GPU's,
    or without one (building for a GPU reached through RPC) the limits every NVIDIA GPU since
    Kepler has, 1024 threads and 48 KiB of shared memory per block, and ``NO_GPU_ARCH``. A bare
    ``Target("cuda")`` lacks ``max_threads_per_block``, and the design space of any task fails
    without it."""
    spec = dict(spec)
    device = tvm.cuda(0)
    if device.exist:
        spec.setdefault("arch", "sm_" + device.compute_version.replace(".", ""))
        spec.setdefault("max_threads_per_block", device.max_threads_per_block)
        spec.setdefault("max_shared_memory_per_block", device.max_shared_memory_per_block)
    else:
        spec.setdefault("arch", NO_GPU_ARCH)
        spec.setdefault("max_threads_per_block", 1024)
        spec.setdefault("max_shared_memory_per_block", 48 * 1024)
    return spec


# the architecture a CUDA target is built for where no GPU tells (name "arch" for yours): the
# oldest that CUDA 13's nvcc compiles for, with tensor cores (TVM's own default, sm_50, is older)
NO_GPU_ARCH = "sm_75"


def runtime_threads(target: tvm.target.Target) -> int:
    """The threads code built for ``target`` runs with: the target's ``num-cores`` (``make_target``
    fills in this machine's), else the cores this process may use (``host_cores``)."""
    return int(target.attrs.get("num-cores", 0) or host_cores())


def private_cache_bytes(default: int = 2 << 20) -> int:
    """The largest cache a core has to itself (on most CPUs its L2), from Linux's sysfs: the
    largest cache of CPU 0 below the last level; ``default`` where sysfs does not say."""
    sizes: dict[int, int] = {}
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "level"), encoding="utf-8") as handle:
                level = int(handle.read())
            with open(os.path.join(index, "size"), encoding="utf-8") as handle:
                size = handle.read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        if size.rstrip("KMG").isdigit():
            sizes[level] = max(sizes.get(level, 0), int(size.rstrip("KMG")) * scale)
    below_last = [size for level, size in sizes.items() if level < max(sizes, default=0)]
    return max(below_last, default=default)


def use_runtime_threads(threads: Any) -> None:
    """Make TVM's CPU thread pool in this process use ``threads`` threads (an int, or a target:
    its cores), unless ``TVM_NUM_THREADS`` or ``OMP_NUM_THREADS`` is set (TVM reads those, in that
    order). Call it before the first TVM kernel runs: the pool reads the variable once. A process
    given some of the machine's CPUs keeps TVM's threads on them (``TVM_BIND_THREADS=0``).

    Without it TVM's runtime takes half the logical CPUs of an x86-64 machine (it counts them as
    hyper-threaded pairs): one thread on a 2-core machine. Kernels tuned that way come out serial
    (a parallel loop cannot win with one thread), and a model built from them leaves a core idle:
    a model's matmuls then run at about half the speed the cores allow."""
    if isinstance(threads, (tvm.target.Target, dict, str)):
        threads = runtime_threads(make_target(threads))
    threads = check_int("threads", threads)
    if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(threads)
    if len(allowed_cpus()) < (os.cpu_count() or 1):
        # TVM pins its threads across the whole machine, whatever this process was given
        # (``taskset``, ``numactl``): two jobs pinned apart would time kernels on the same cores
        os.environ.setdefault("TVM_BIND_THREADS", "0")


# per core and cycle, the most operations a CPU's widest units can do (AMX int8 tiles, AVX-512
# VNNI int8, AVX2 VNNI-less int8 through FMA-wide units, scalar-ish): a ceiling, not an estimate
_OPS_PER_CYCLE = (("amx-tile", 2048), ("avx512f", 256), ("avx2", 128))
_MAX_CLOCK_HZ = 6e9  # above any CPU's boost clock
_GPU_PEAK = 4e15  # above any GPU's dense tensor-core peak (FLOP/s)


def cpu_features(target: tvm.target.Target) -> frozenset | None:
    """The CPU features LLVM gives an LLVM target (``avx512bf16``, ``amx-bf16``, ...), or None
    where it cannot describe the target."""
    from tvm.target import codegen

    try:
        return frozenset(codegen.llvm_get_cpu_features(target))
    except Exception:
        return None


def peak_flops(target: Any) -> float:
    """A generous ceiling on what code built for ``target`` can compute per second: its cores x
    the widest units its CPU has x a clock no CPU reaches, doubled (for a GPU, more than any GPU's
    tensor cores). A measured cost above it is no measurement (a forged or damaged record)."""
    target = make_target(target)
    if target.kind.name == "cuda":
        return _GPU_PEAK
    features = cpu_features(target)
    if features is None:  # a target LLVM cannot describe: assume the widest units
        features = frozenset({"amx-tile"})
    per_cycle = next((ops for feature, ops in _OPS_PER_CYCLE if feature in features), 64)
    cores = int(target.attrs.get("num-cores", 0) or host_cores())
    return 2.0 * cores * per_cycle * _MAX_CLOCK_HZ


_BYTES_PER_CORE_S = 2.5e12  # above any core's L1 bandwidth (about 200 bytes a cycle at 6 GHz), doubled
_GPU_BYTES_S = 5e13  # above any GPU's memory and L2 bandwidth


def peak_bandwidth(target: Any) -> float:
    """A generous ceiling on the bytes a second code built for ``target`` can read and write: the
    bound of a kernel that computes nothing (a transpose, a copy), as ``peak_flops`` is of one that does."""
    target = make_target(target)
    if target.kind.name == "cuda":
        return _GPU_BYTES_S
    return _BYTES_PER_CORE_S * int(target.attrs.get("num-cores", 0) or host_cores())


def device_of(target: tvm.target.Target) -> str:
    """The runtime device name ("cpu" or "cuda") that executes code built for ``target``."""
    return "cuda" if target.kind.name == "cuda" else "cpu"


def device_exists(target: tvm.target.Target) -> bool:
    """Whether this machine can run code built for ``target`` (a CUDA target needs a GPU here)."""
    return bool(tvm.device(device_of(target), 0).exist)


def find_nvcc() -> str | None:
    """nvcc: ``find_cuda_tool("nvcc")``."""
    return find_cuda_tool("nvcc")


def find_cuda_tool(name: str) -> str | None:
    """A CUDA toolkit program (nvcc, cuobjdump, ...) on the PATH, in a CUDA toolkit where TVM
    looks for one (``CUDA_PATH``, ``CUDA_HOME``, ``/usr/local/cuda``: a toolkit often stays off the
    PATH), or from NVIDIA's wheels (the project's extra ``cuda``: ``nvidia/cu*/bin``, the newest)."""
    import glob

    found = shutil.which(name)
    if found:
        return found
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    for root in filter(None, roots):
        path = os.path.join(root, "bin", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    try:
        import nvidia  # the wheels' namespace package
    except ImportError:
        return None
    candidates = [path for root in nvidia.__path__ for path in sorted(glob.glob(os.path.join(root, "cu*", "bin", name)))]
    return next((path for path in reversed(candidates) if os.access(path, os.X_OK)), None)


def cuda_compiler() -> str:
    """The compiler TVM compiles this project's CUDA kernels with ("nvcc" or "NVRTC"): the one
    ``TVM_CUDA_COMPILE_MODE`` names, else NVRTC where it compiles with a precompiled header
    (``nvrtc_precompiles``: it builds faster than nvcc, and its kernels ran as fast; finding 11),
    else nvcc where ``find_nvcc`` finds it, else NVRTC (TVM's default)."""
    mode = os.environ.get("TVM_CUDA_COMPILE_MODE")
    if mode:
        return "nvcc" if mode == "nvcc" else "NVRTC"
    if nvrtc_precompiles():
        return "NVRTC"
    return "nvcc" if find_nvcc() is not None else "NVRTC"


def use_cuda_compiler() -> str:
    """Make this process's TVM compile CUDA kernels with ``cuda_compiler()``; returns its name.

    Every process that compiles the kernels a tune measures or a model ships calls it: the build
    workers, the process that builds the model (``build_program``) and MetaSchedule's peer before
    its workers start. The model then runs the machine code its tune measured: nvcc and NVRTC
    compile the same kernel to different code (registers, sums kept in local memory; finding 11).
    A ``TVM_CUDA_COMPILE_MODE`` of the user's stands. NVRTC compiles with a precompiled header
    (``use_nvrtc_precompiled_header``)."""
    compiler = cuda_compiler()
    nvcc = find_nvcc() if compiler == "nvcc" else None
    if nvcc is not None and shutil.which("nvcc") != nvcc:  # TVM runs the nvcc on the PATH
        os.environ["PATH"] = os.path.dirname(nvcc) + os.pathsep + os.environ.get("PATH", "")
    if not os.environ.get("TVM_CUDA_COMPILE_MODE"):
        os.environ["TVM_CUDA_COMPILE_MODE"] = compiler.lower()
    if compiler == "NVRTC":
        use_nvrtc_precompiled_header()
    return compiler


# NVRTC's automatic precompiled header covers the headers a program includes before any of its
# code. TVM's CUDA kernels include these (its float16 kernels cuda_fp16.h and mma.h too), so they
# are included first, in this order, for every kernel: each process that compiles parses them once,
# not once a kernel. The machine code is plain NVRTC's (finding 11).
NVRTC_PRECOMPILED_HEADER = ("-pch --pre-include=cuda/std/cstdint --pre-include=cuda/std/limits "
                            "--pre-include=cuda/std/type_traits --pre-include=cuda_fp16.h --pre-include=mma.h")


def nvrtc_version() -> tuple[int, int] | None:
    """The NVRTC that TVM compiles with (through ``cuda-bindings``), as (major, minor); None where
    it cannot be loaded."""
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # not installed, or its library missing: TVM cannot compile with NVRTC either
        return None
    return int(major), int(minor)


def _nvrtc_has_precompiled_headers() -> bool:
    """Whether the NVRTC TVM compiles with makes precompiled headers (12.8 and later)."""
    return (nvrtc_version() or (0, 0)) >= (12, 8)


def nvrtc_precompiles() -> bool:
    """Whether TVM can compile CUDA kernels here with NVRTC and a precompiled header: NVRTC 12.8
    or later (``nvrtc_version``) and the CUDA headers where TVM's NVRTC path looks for them."""
    if not _nvrtc_has_precompiled_headers():
        return False
    import glob

    from tvm.support.nvcc import find_cuda_path

    try:
        root = find_cuda_path()
    except RuntimeError:  # no CUDA toolkit found
        return False
    includes = [os.path.join(root, "include"), *glob.glob(os.path.join(root, "targets", "*", "include"))]
    return any(os.path.isfile(os.path.join(include, "cuda_runtime.h")) for include in includes)


def use_nvrtc_precompiled_header() -> bool:
    """Make TVM's NVRTC compiles in this process (and the workers it starts) use
    ``NVRTC_PRECOMPILED_HEADER``, where NVRTC has precompiled headers (12.8 and later); returns
    whether they do. The user's own ``TVM_CUDA_NVRTC_EXTRA_OPTS`` (empty included) stands."""
    if "TVM_CUDA_NVRTC_EXTRA_OPTS" in os.environ:
        return "-pch" in os.environ["TVM_CUDA_NVRTC_EXTRA_OPTS"].split()
    if not _nvrtc_has_precompiled_headers():
        return False
    os.environ["TVM_CUDA_NVRTC_EXTRA_OPTS"] = NVRTC_PRECOMPILED_HEADER
    return True


def _cheap_stack(context: int = 1) -> list:
    """``inspect.stack`` without reading source lines: TVMScript only needs the frames."""
    frame = sys._getframe(1)
    frames = []
    while frame is not None:
        frames.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None, None))
        frame = frame.f_back
    return frames


INTRINSICS = "tvm.s_tir.tensor_intrin"  # TVM's tensor intrinsics: the package imports its CUDA module, then the CPUs'
CPU_INTRINSICS = ("arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu")  # what its ``__init__`` imports where LLVM is on


def load_tensor_intrinsics(target: Any = None) -> None:
    """Import TVM's tensor intrinsics once per process, cheaply: for an LLVM ``target`` only its
    CPU architecture's (``_cpu_intrinsics``: no CPU sketch uses another's, and the CUDA ones are
    the costliest to import); for any other target (or none given) all of them.

    MetaSchedule's ``TuneContext`` imports the package in its constructor; done naively that
    takes most of a minute on a small machine because TVMScript's decorator calls
    ``inspect.stack()`` (which reads source files) for every intrinsic; a frame-only stack does the
    same in seconds. For a CPU the package is registered as imported without running its
    ``__init__`` (so ``TuneContext``'s import finds it) and the architecture's module is imported;
    a later target imports what it needs beside them. Never call this from a build worker: builds
    do not need the intrinsics.
    """
    target = None if target is None else make_target(target)
    _load_intrinsics(_cpu_intrinsics(target) if target is not None and target.kind.name == "llvm" else None)


def _cpu_intrinsics(target: tvm.target.Target) -> tuple[str, ...]:
    """The modules of TVM's CPU tensor intrinsics that an LLVM target's sketches can use: its
    architecture's, by its ``mtriple`` or else this machine's (all of them for an architecture
    not named here)."""
    arch = (str(target.attrs.get("mtriple", "")) or platform.machine()).split("-")[0].lower()
    for prefixes, module in ((("x86", "amd64", "i386", "i686"), "x86"), (("aarch64", "arm"), "arm_cpu"),
                             (("riscv",), "riscv_cpu")):
        if arch.startswith(prefixes):
            return (module,)
    return CPU_INTRINSICS


@functools.lru_cache(maxsize=None)
def _load_intrinsics(cpu: tuple[str, ...] | None) -> None:
    """``cpu``: the CPU modules to import, the package's ``__init__`` left out; None: all of it."""
    if f"{INTRINSICS}.cuda" in sys.modules:  # all of them: the package's own import, or a GPU target's
        return
    original = inspect.stack
    inspect.stack = _cheap_stack
    try:
        if INTRINSICS not in sys.modules:
            if cpu is None:
                importlib.import_module(INTRINSICS)
                return
            package = importlib.util.module_from_spec(importlib.util.find_spec(INTRINSICS))
            sys.modules[INTRINSICS] = package
            setattr(importlib.import_module("tvm.s_tir"), "tensor_intrin", package)
        for name in (CPU_INTRINSICS if cpu is None else cpu) if tvm.runtime.enabled("llvm") else ():
            importlib.import_module(f"{INTRINSICS}.{name}")
        if cpu is None:
            importlib.import_module(f"{INTRINSICS}.cuda")
    finally:
        inspect.stack = original

