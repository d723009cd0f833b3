"""Shared fixtures: tiny real operators and one measurement setup reused across tests.

Worker processes import TVM once (~3 s); sharing the builder and runner keeps the suite fast.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile

import numpy as np
import pytest
import tvm
from tvm import te, topi
from tvm.s_tir import Schedule

import autotvm

os.environ.setdefault("AUTOTVM_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "autotvm"))


@pytest.fixture(autouse=True)
def metaschedule_logger_propagates():
    """pytest attaches its log-capture handlers to every logger that does not propagate, and
    MetaSchedule's logger stops propagating once a tuning in this process has configured it; the
    next tuning would then fail on those unnamed handlers (MetaSchedule's ``create_loggers`` lists
    its logger's handlers by name). Propagating between tests keeps them on the root logger."""
    logging.getLogger("tvm.s_tir.meta_schedule").propagate = True


@pytest.fixture(autouse=True)
def machine_to_itself(request):
    """A test marked ``alone`` runs while no other test does (another worker's, or another run's
    on this machine): it compares a time measured now with one measured earlier (a benchmark
    against its tune's records), which another worker's tuning on the same cores can make several
    times slower for many seconds. Every test holds a shared lock while it runs; an ``alone`` test
    takes it exclusively, first closing a gate that keeps the other workers from starting their
    next test. The lock files are this user's, so the tests of another run on the machine wait too."""
    alone = request.node.get_closest_marker("alone") is not None
    base = os.path.join(tempfile.gettempdir(), f"autotvm-tests-{os.getuid()}")
    with open(base + ".gate", "a") as gate, open(base + ".running", "a") as running:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(running, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield  # closing the files releases the locks


@pytest.fixture(autouse=True)
def every_cpu():
    """Each test starts on every CPU this process was given (``autotvm.env.allowed_cpus``): TVM's
    thread pool, of one thread (its default on 2 cores), pins the thread that starts it to one
    core, and the processes a later test starts would inherit that core (a benchmark's
    ``host_cores`` read 1)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, autotvm.env.allowed_cpus())


@autotvm.template("test/matmul")
def matmul_template(n: int, m: int, k: int):
    """A 2-level tiled matmul whose knobs are the tiles of i and j and an unroll choice."""
    cfg = autotvm.get_config()
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    sch = Schedule(te.create_prim_func([a, b, c]))
    block = sch.get_sblock("C")
    i, j, kk = sch.get_loops(block)
    cfg.define_split("tile_i", n, num_outputs=2)
    cfg.define_split("tile_j", m, num_outputs=2)
    cfg.define_knob("vectorize", [False, True])
    cfg.add_flop(2 * n * m * k)
    io, ii = cfg["tile_i"].apply(sch, i)
    jo, ji = cfg["tile_j"].apply(sch, j)
    sch.reorder(io, jo, kk, ii, ji)
    if cfg["vectorize"].val:
        sch.vectorize(ji)
    return sch, [a, b, c]


def matmul_primfunc(n: int = 64, m: int = 64, k: int = 64):
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


def c1_primfunc():
    data = te.placeholder((1, 144, 28, 28), name="data")
    weight = te.placeholder((32, 144, 1, 1), name="weight")
    return te.create_prim_func([data, weight, topi.nn.conv2d_nchw(data, weight, 1, 0, 1)])


@pytest.fixture(scope="session")
def builder():
    b = autotvm.LocalBuilder(n_parallel=2, timeout=20)
    yield b
    b.close()


@pytest.fixture(scope="session")
def runner():
    r = autotvm.LocalRunner(number=2, repeat=1, timeout=10)
    yield r
    r.close()


@pytest.fixture(scope="session")
def measure_opt(builder, runner):
    return autotvm.measure_option(builder, runner)


@pytest.fixture(scope="session")
def matmul_task():
    return autotvm.task.create_from_primfunc(matmul_primfunc(), "llvm", name="mm64")


@pytest.fixture(scope="session")
def template_task():
    return autotvm.task.create("test/matmul", (32, 32, 32), "llvm")


@contextlib.contextmanager
def one_runtime_thread():
    """TVM's CPU thread pool in this process at one thread, then back to what it was. A parallel
    kernel waits for all its threads, and TVM pins them to cores: where another process runs TVM's
    threads on the same cores (the other test worker's tuning), each kernel can wait a scheduler
    time slice for a thread, and a parallel model times many times slower than a serial one."""
    threads = tvm.get_global_func("runtime.NumThreads")()
    configure = tvm.get_global_func("runtime.config_threadpool")
    configure(1, 1)  # 1: TVM's default affinity (the big cores)
    try:
        yield
    finally:
        configure(1, threads)


def run_module(mod, target, arrays):
    """Build and run a module in-process; returns the arrays after the call."""
    lib = tvm.compile(mod, target=target)
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors]


def random_matmul_inputs(n, m, k, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.random((n, k), dtype=np.float32), rng.random((k, m), dtype=np.float32),
            np.zeros((n, m), dtype=np.float32)]
