"""Tuner.tune contract on real measurements: budget, early stopping, logs, no duplicates."""

import json
import os

import pytest

import autotvm
from conftest import matmul_primfunc
from autotvm.tuner import GridSearchTuner, RandomTuner, XGBTuner


def _log_rows(path):
    return [json.loads(line) for line in open(path)]


@pytest.mark.parametrize("tuner_cls", [RandomTuner, GridSearchTuner, XGBTuner])
def test_budget_log_and_no_duplicates(tuner_cls, matmul_task, measure_opt, tmp_path):
    log = tmp_path / "log.json"
    kwargs = {"plan_size": 8} if tuner_cls is XGBTuner else {}
    tuner = tuner_cls(matmul_task, seed=0, **kwargs)
    batches = []
    tuner.tune(13, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log)),
                                          lambda t, i, r: batches.append(len(r))])
    rows = _log_rows(log)
    assert len(rows) == sum(batches) == 13  # never exceeds n_trial, every trial logged
    assert all(b <= 2 for b in batches) and batches[:-1] == [2] * (len(batches) - 1)
    indices = [row["config"]["index"] for row in rows]
    assert len(set(indices)) == len(indices)
    assert tuner.best_flops > 0 and tuner.best_config is not None
    best_row = min((r for r in rows if r["result"][1] == 0), key=lambda r: sum(r["result"][0]) / len(r["result"][0]))
    assert best_row["config"]["index"] == tuner.best_config.index


def test_early_stopping(measure_opt):
    from tvm import te
    from tvm.s_tir import Schedule

    @autotvm.template("test/flat")
    def flat(n):
        cfg = autotvm.get_config()
        cfg.define_knob("dummy", list(range(40)))
        a = te.placeholder((n,), name="a")
        b = te.compute((n,), lambda i: a[i] + 1.0, name="b")
        return Schedule(te.create_prim_func([a, b])), [a, b]

    task = autotvm.task.create("test/flat", (16,), "llvm")
    tuner = GridSearchTuner(task)
    tuner.tune(40, measure_opt, early_stopping=4)
    # all configs build the same program: stop soon after the best stops improving
    assert len(tuner.history) <= tuner.best_iter + 4 + 1
    assert len(tuner.history) < 40


def test_resume_never_remeasures(matmul_task, measure_opt, tmp_path):
    log = tmp_path / "log.json"
    first = RandomTuner(matmul_task, seed=1)
    first.tune(6, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    second = RandomTuner(matmul_task, seed=1)
    assert second.load_history(str(log)) == 6
    second.tune(6, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    indices = [row["config"]["index"] for row in _log_rows(log)]
    assert len(indices) == 12 and len(set(indices)) == 12


def test_seed_makes_proposals_deterministic(matmul_task):
    a, b = XGBTuner(matmul_task, seed=5), XGBTuner(matmul_task, seed=5)
    assert [c.index for c in a.next_batch(8)] == [c.index for c in b.next_batch(8)]
    r1, r2 = RandomTuner(matmul_task, seed=5), RandomTuner(matmul_task, seed=5)
    assert [c.index for c in r1.next_batch(8)] == [c.index for c in r2.next_batch(8)]


def test_xgb_program_features(matmul_task, measure_opt):
    tuner = XGBTuner(matmul_task, plan_size=6, feature_type="program", seed=0)
    tuner.tune(10, measure_opt)
    assert tuner.model is not None and len(tuner.ys) == 10
    assert len({row["index"] for row in tuner.history}) == 10


def _walk_task():
    """A kernel that walks a 256 KB table (in L2 on every CPU here) one dependent load after
    another, at positions no prefetcher can guess, so each line it reads waits for the cache or
    memory that holds it; a streaming kernel would not show where its data is, where prefetchers
    keep up."""
    from tvm.script import tirx as T

    lines = 4096  # cache lines of 64 bytes

    @T.prim_func
    def walk(out: T.Buffer((1,), "int64"), table: T.Buffer((lines * 16,), "int32")):
        # the flush spares the first argument (TVM's cache_flush_cpu_non_first_arg): the table is second
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        out[0] = T.int64(0)
        for k in range(lines):
            i = T.Cast("int64", k)
            out[0] = (T.Cast("int64", table[out[0] * 16]) + i * i * 7919 + i * 104729) % lines

    return autotvm.task.create_from_primfunc(walk, "llvm", name="walk256k")


def test_cpu_cache_flush_measures_cold_runs(builder):
    """``enable_cpu_cache_flush`` (from the config) times every repeat after a cache flush: the
    walk of ``_walk_task`` then waits for memory at each line. The fastest repeats are compared:
    another process on the cores only slows repeats down, so every cold repeat must be slower
    than the fastest warm one; a disturbed warm one is ignored."""
    from tools.config import load_config

    task = _walk_task()
    settings = {"n_parallel": 2, "timeout": 10, "number": 1, "repeat": 7, "min_repeat_ms": 0,
                "enable_cpu_cache_flush": True}
    cold_runner = load_config(json.dumps({"autotuner_settings": settings})).autotuner_settings.measure_option()["runner"]
    assert cold_runner.enable_cpu_cache_flush
    warm_runner = autotvm.LocalRunner(number=1, repeat=7, timeout=10)
    timings = []
    try:
        inputs = [autotvm.MeasureInput(task.target, task, task.config_space.get(0))]
        # another test's process can slow every warm repeat of a pass (its memory traffic evicting
        # the table), which only lowers the ratio: up to three passes, where a flush that did
        # nothing would read about 1x in each
        for _ in range(3):
            cold = cold_runner.run(inputs, builder.build(inputs))[0]  # a run consumes its build
            cold_runner.close()  # its worker's threads would spin on the cores the warm runs need
            warm = warm_runner.run(inputs, builder.build(inputs))[0]
            assert cold.error_no == 0 and warm.error_no == 0
            timings.append((cold.costs, warm.costs))
            if min(cold.costs) > 3 * min(warm.costs):
                break
    finally:
        cold_runner.close()
        warm_runner.close()
    assert min(cold.costs) > 3 * min(warm.costs), timings


def test_evicting_the_private_caches_times_runs_from_the_last_level_cache(builder):
    """``enable_cpu_cache_flush: "private"`` evicts each core's own caches before every repeat and
    leaves the shared last-level cache as it was: the walk of ``_walk_task`` then finds its table
    there, slower than in L2 (no eviction) and faster than in memory (``True``: every level
    flushed). Up to three passes, as above, each pass's fastest repeats compared."""
    task = _walk_task()
    inputs = [autotvm.MeasureInput(task.target, task, task.config_space.get(0))]
    timings = []
    for _ in range(3):
        fastest = {}
        for flush in (False, "private", True):
            runner = autotvm.LocalRunner(number=1, repeat=7, timeout=10, enable_cpu_cache_flush=flush)
            try:
                result = runner.run(inputs, builder.build(inputs))[0]
            finally:
                runner.close()  # its worker's threads would spin on the cores the next runs need
            assert result.error_no == 0, result
            fastest[flush] = min(result.costs)
        timings.append(fastest)
        if fastest["private"] > 1.5 * fastest[False] and fastest[True] > 1.5 * fastest["private"]:
            break
    assert fastest["private"] > 1.5 * fastest[False] and fastest[True] > 1.5 * fastest["private"], timings


def _worker_threads() -> int:
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def test_runner_times_kernels_with_the_targets_cores(builder, monkeypatch):
    """TVM's runtime takes half the logical CPUs of an x86-64 machine (one thread on 2 cores), so
    a parallel kernel could never win a tuning and models would run on one core: the runner's
    workers run kernels with the target's ``num-cores``, as the tuned model runs them."""
    import sys

    import cloudpickle

    for variable in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # the workers cannot import this file
    cores = os.cpu_count()  # TVM's own default on 2 cores would be 1
    task = autotvm.task.create_from_primfunc(matmul_primfunc(), {"kind": "llvm", "num-cores": cores}, name="mm64")
    runner = autotvm.LocalRunner(number=1, repeat=1, timeout=10)
    try:
        runner.set_task(task, builder)
        assert runner.executor.submit(_worker_threads).result() == cores
        inputs = [autotvm.MeasureInput(task.target, task, task.config_space.get(0))]
        assert runner.run(inputs, builder.build(inputs))[0].error_no == 0
    finally:
        runner.close()
        cloudpickle.unregister_pickle_by_value(module)


def _worker_pids(workers) -> set:
    """The processes of a pool of workers (``autotvm.measure.local._Workers``) started so far."""
    return {worker._proc.pid for worker in workers._executor._worker_map.values() if worker._proc is not None}


def test_a_tune_starts_its_workers_while_the_model_loads():
    """``tools.tune`` starts the build workers and opens the run worker's device before it loads
    the model and extracts its tasks: ``start`` returns at once, and the first round then waits
    for no worker to start (a worker imports TVM; on a GPU the run worker also opens its CUDA
    context), with the run worker sized for the task's threads."""
    import time

    task = autotvm.task.create_from_primfunc(matmul_primfunc(), {"kind": "llvm", "num-cores": 2}, name="mm64")
    builder = autotvm.LocalBuilder(n_parallel=2, timeout=20)
    runner = autotvm.LocalRunner(number=1, repeat=1, timeout=10)
    try:
        start = time.perf_counter()
        builder.start()
        runner.start(task.target)
        assert time.perf_counter() - start < 1.0
        pool = runner._pool
        # the model loads, its tasks are extracted: meanwhile the workers start on their own
        deadline = time.monotonic() + 120
        while not all(f.done() for f in builder._pool._starting + pool._starting) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert builder._pool._starting and pool._starting and all(f.exception() is None for f in pool._starting)
        runner.set_task(task, builder)
        assert runner._pool is pool  # the worker started for the target's threads is the one that runs
        workers = _worker_pids(builder._pool), _worker_pids(pool)
        assert all(len(pids) == n for pids, n in zip(workers, (2, 1))), workers
        inputs = [autotvm.MeasureInput(task.target, task, task.config_space.get(0))]
        assert runner.run(inputs, builder.build(inputs))[0].error_no == 0
        # nothing left to start: the workers started meanwhile built and ran it
        assert (_worker_pids(builder._pool), _worker_pids(pool)) == workers
    finally:
        runner.close()
        builder.close()


def test_the_workers_leave_pytorch_out(measure_opt):
    """Where TVM has no CUDA runtime (which may rest on the CUDA libraries PyTorch loads), a build
    or run worker never imports PyTorch (TVM's FFI would, where it can): half a worker's memory
    and most of its start."""
    import tvm.base

    cuda_runtime = "tvm_runtime_cuda" in tvm.base._LOADED_LIBS
    for pool in (measure_opt["builder"], measure_opt["runner"]):
        job = pool.executor.submit(lambda: __import__("sys").modules.get("torch") is not None)
        assert job.result() is cuda_runtime


def test_a_configs_cost_leaves_out_the_workers_start():
    """The workers' start (each imports TVM; 16 at once on a GPU host take longest) is not the
    cost of the config whose build and run happened to start them (the record's ``all_cost``)."""
    import time

    task = autotvm.task.create_from_primfunc(matmul_primfunc(), "llvm", name="mm64")
    builder = autotvm.LocalBuilder(n_parallel=2, timeout=20)
    runner = autotvm.LocalRunner(number=1, repeat=1, timeout=10)
    try:
        inputs = [autotvm.MeasureInput(task.target, task, task.config_space.get(i)) for i in range(2)]
        start = time.perf_counter()
        builds = builder.build(inputs)  # starts the build workers
        build_wall = time.perf_counter() - start
        assert all(b.error_no == 0 for b in builds)
        # a fraction of the call's wall time, however busy the machine is
        assert builds[0].time_cost < 0.5 * build_wall, ([b.time_cost for b in builds], build_wall)
        runner.set_task(task, builder)
        start = time.perf_counter()
        results = runner.run(inputs, builds)  # starts the run worker
        run_wall = time.perf_counter() - start
        assert all(r.error_no == 0 for r in results)
        run_cost = results[0].all_cost - builds[0].time_cost
        assert run_cost < 0.5 * run_wall, ([r.all_cost for r in results], run_wall)
    finally:
        runner.close()
        builder.close()


def _fails_to_open() -> None:
    raise RuntimeError("the device would not open")


def test_a_start_that_failed_is_left_to_the_next_job():
    """A start job that fails (a device that will not open) does not fail the pool's handing out:
    the next job meets the failure in its own worker, where it is reported as that job's."""
    import sys

    import cloudpickle

    from autotvm.measure.local import _Workers

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # the workers cannot import this file
    pool = _Workers(1, timeout=10, max_uses=10)
    try:
        pool.start(_fails_to_open)
        assert pool.executor.submit(_worker_threads).result() >= 1
    finally:
        pool.close()
        cloudpickle.unregister_pickle_by_value(module)


def test_a_ctrl_c_as_the_workers_start_leaves_ctrl_c_working(monkeypatch):
    """The pool blocks SIGINT in this thread while it starts the workers (they inherit the mask).
    Python runs a pending Ctrl-C's handler as ``pthread_sigmask`` returns: a KeyboardInterrupt
    raised as the block is set must still restore the mask, or the process stays deaf to Ctrl-C."""
    import signal

    from autotvm.measure.local import _Workers

    real = signal.pthread_sigmask

    def interrupted_as_it_blocks(how, mask):  # what CPython does when a SIGINT is pending
        old = real(how, mask)
        if how == signal.SIG_BLOCK and signal.SIGINT in set(mask):
            raise KeyboardInterrupt
        return old

    before = real(signal.SIG_BLOCK, ())
    monkeypatch.setattr(signal, "pthread_sigmask", interrupted_as_it_blocks)
    pool = _Workers(1, timeout=10, max_uses=10)
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.start()
        monkeypatch.setattr(signal, "pthread_sigmask", real)
        assert real(signal.SIG_BLOCK, ()) == before
    finally:
        real(signal.SIG_SETMASK, before)
        pool.close()


def test_no_worker_starts_once_the_process_exits(monkeypatch):
    """Once the exit has begun (``_end_at_exit``: a Ctrl-C in a tune's first second), a pool's
    thread that was about to start its worker does not: Python joins that thread, which would
    wait for the worker's import of TVM. A worker starting as the exit begins is already in its
    pool's map, and killed (the start and the exit take the same lock)."""
    import subprocess

    from autotvm.measure import local

    started = []

    def popen(*args, **kwargs):
        started.append(args)
        raise OSError("a worker started")

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(local, "_exiting", True)
    pool = local._Workers(1, timeout=10, max_uses=10)
    try:
        pool.start()
        with pytest.raises(ChildProcessError, match="exiting"):
            pool.executor.submit(_worker_threads).result()
        assert not started
    finally:
        pool.close()


def test_metaschedule_beside_our_tuners_times_with_the_same_private_eviction():
    """With ``"private"``, MetaSchedule's runner evicts the private caches through our evaluator
    (its own config flag knows only TVM's flush, which is left off)."""
    from autotvm.measure.workers import run_evaluator_private
    from tools.config import load_config
    from tools.metaschedule import cache_flush

    def flush(value):
        return cache_flush(load_config(json.dumps({"autotuner_settings": {"enable_cpu_cache_flush": value}}))
                           .autotuner_settings)

    assert flush("private") == (False, run_evaluator_private)
    assert flush(True) == (True, None) and flush(False) == (False, None)
