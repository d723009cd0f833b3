"""MetaSchedule's own search beside our tuners, under the same budget and measurement: on an
operator (``tune_tir``) and on a whole model (``tune_relax`` on the module our tasks come from),
with its progress read from its database as it grows.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Callable

import tvm

import autotvm
from autotvm.env import load_tensor_intrinsics, use_cuda_compiler, use_runtime_threads
from autotvm.measure.workers import run_evaluator_private

from .settings import TuningSettings
from .stats import trials_to_fraction
from .workloads import workload


def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build minus its import of the tensor intrinsics in every fresh build
    worker (which costs longer than its build timeout on a small machine)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def quiet() -> None:
    """Keep MetaSchedule's console output to warnings: it prints every task's table and its cost
    model's training; the whole log still goes to the ``logs/`` folder of its work dir."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


def _builder_and_runner(settings: TuningSettings, target: Any) -> tuple[Any, Any]:
    """MetaSchedule's local builder and runner, measuring as our runner does; on a GPU its build
    workers compile with our CUDA compiler (they start with this process's environment)."""
    from tvm.s_tir import meta_schedule as ms

    if autotvm.make_target(target).kind.name == "cuda":
        use_cuda_compiler()
    builder = ms.builder.LocalBuilder(max_workers=settings.n_parallel, f_build=fast_build)
    flush, evaluator = cache_flush(settings)
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
        number=settings.number, repeat=settings.repeat, min_repeat_ms=settings.min_repeat_ms,
        enable_cpu_cache_flush=flush), f_run_evaluator=evaluator)
    return builder, runner


def cache_flush(settings: TuningSettings) -> tuple[bool, Callable | None]:
    """MetaSchedule's runner's ``enable_cpu_cache_flush`` and run evaluator for ours: its flag
    knows TVM's flush only; ``"private"`` is our evaluator's (``workers.run_evaluator_private``)."""
    if settings.enable_cpu_cache_flush == "private":
        return False, run_evaluator_private
    return bool(settings.enable_cpu_cache_flush), None


def _space(target: Any) -> Any:
    """MetaSchedule's own space generator; on a GPU with tensor cores, with the rules our tasks
    search there (``autotvm.task.trace_task.tensor_core_rules``: MetaSchedule's, with float32 sums
    staged where TVM 0.27 compiles them), so that both search the same kernels."""
    from autotvm.task.trace_task import has_tensor_cores, tensor_core_space

    return tensor_core_space() if has_tensor_cores(target) else "post-order-apply"


def run_on_op(op: str, seed: int, trials: int, settings: TuningSettings, target: Any = "llvm") -> dict:
    """MetaSchedule's evolutionary search (``tune_tir``) on the operator workload ``op``, as a run
    record like ``tools.tuning.run_tuner``'s (no configs: its database does not name them)."""
    from tvm.s_tir import meta_schedule as ms

    target = autotvm.make_target(target)
    load_tensor_intrinsics(target)
    func = workload(op).tir()
    flop = float(tvm.s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": func})))
    use_runtime_threads(target)  # its runner's workers time with our runner's threads
    with tempfile.TemporaryDirectory(prefix="ms-") as work_dir:
        builder, runner = _builder_and_runner(settings, target)
        quiet()
        start = time.perf_counter()
        ms.tune_tir(func, target, work_dir, max_trials_global=trials, num_trials_per_iter=64, builder=builder,
                    runner=runner, seed=seed, num_tuning_cores=settings.n_parallel, space=_space(target))
        wall = time.perf_counter() - start
        curve, best, errors = [], 0.0, 0
        for line in open(os.path.join(work_dir, "database_tuning_record.json"), encoding="utf-8"):
            secs = json.loads(line)[1][1]
            ok = secs and all(0 < s < 1e9 for s in secs)
            errors += not ok
            best = max(best, flop / (sum(secs) / len(secs)) / 1e9 if ok else 0.0)
            curve.append(best)
    return {"op": op, "tuner": "metaschedule", "seed": seed, "trials": len(curve), "curve": curve,
            "best_gflops": best, "trials_to_90": trials_to_fraction(curve), "tuner_seconds": None,
            "wall_seconds": wall, "overhead": None, "errors": errors}


def tune_model(fused: Any, target: Any, where: str, trials: int, round_trials: int, seed: int,
               settings: TuningSettings, build: Callable[..., Any]) -> tuple[list, Callable[[int], Any]]:
    """MetaSchedule's ``tune_relax`` on a fused module (``autotvm.task.relax_integration.fused_program``)
    into the database folder ``where``, within ``trials`` (at most ``settings.trials`` a function,
    rounds of ``round_trials``, ``settings.task_scheduler``). Returns ([(trials, seconds)] as its
    database grew, a function that builds the model from its first N records with
    ``build(database=...)``)."""
    from tvm.s_tir import meta_schedule as ms

    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    builder, runner = _builder_and_runner(settings, target)
    record_file = os.path.join(where, "database_tuning_record.json")
    progress: list = []
    start = time.perf_counter()
    done = threading.Event()

    def watch() -> None:  # MetaSchedule appends a line per measured trial
        while not done.wait(1.0):
            _note_progress(progress, record_file, start)

    quiet()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        ms.relax_integration.tune_relax(fused, {}, target, where, max_trials_global=trials,
                                        max_trials_per_task=settings.trials, num_trials_per_iter=round_trials,
                                        builder=builder, runner=runner, seed=seed,
                                        task_scheduler=settings.task_scheduler, space=_space(target))
    finally:
        done.set()
        watcher.join()
    _note_progress(progress, record_file, start, final=True)
    with open(record_file, encoding="utf-8") as handle:
        lines = handle.readlines()

    def build_at(count: int) -> Any:
        with tempfile.TemporaryDirectory(prefix="ms-records-") as tmp:
            first = os.path.join(tmp, "records.json")
            with open(first, "w", encoding="utf-8") as handle:
                handle.writelines(lines[:count])
            return build(database=database(where, first))

    return progress, build_at


def database(where: str, records: str | None = None) -> Any:
    """The JSON database MetaSchedule wrote into the folder ``where`` (``records``: another
    tuning-record file to read instead of its own)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(path_workload=os.path.join(where, "database_workload.json"),
                                    path_tuning_record=records or os.path.join(where, "database_tuning_record.json"))


def _note_progress(progress: list, record_file: str, start: float, final: bool = False) -> None:
    """Add (trials recorded, seconds) when the count grew; ``final``: the run's end, whose time is
    that of its last trials (MetaSchedule writes a round's records when it collects them)."""
    if not os.path.exists(record_file):
        return
    with open(record_file, encoding="utf-8") as handle:
        count = sum(1 for line in handle if line.endswith("\n"))
    if progress and final and count == progress[-1][0]:
        progress.pop()
    if count and (not progress or count > progress[-1][0]):
        progress.append((count, time.perf_counter() - start))
