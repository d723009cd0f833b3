"""Relax programs: extract one task per tunable TIR function, and build with the best records.

The module is fused exactly as MetaSchedule's ``compile_relax`` fuses it, so the functions we
tune are the functions it later looks up; the best config of each task is handed to it as a
MetaSchedule database record. Functions without a record keep TVM's default lowering.
"""

from __future__ import annotations

from typing import Any

import tvm

from ..env import load_tensor_intrinsics, make_target
from .trace_task import TraceTask


def prepare_program(mod: tvm.IRModule, params: dict | None = None) -> tvm.IRModule:
    """Bind params and rewrite inference-only ops (batch norm becomes a scale and a shift that
    fold into constants and fuse into the preceding convolution)."""
    from tvm import relax

    if params:
        mod = relax.transform.BindParams("main", params)(mod)
    seq = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(), relax.transform.FoldConstant()])
    with tvm.transform.PassContext(opt_level=3):
        return seq(mod)


def _weights_are_constants(mod: tvm.IRModule) -> bool:
    """True when the model's weights are bound constants (no ``num_input`` split of ``main``'s
    parameters into inputs and weights), so their layout can be rewritten once at compile time."""
    main = mod["main"] if "main" in [g.name_hint for g in mod.get_global_vars()] else None
    if main is None:
        return False
    num_input = main.attrs.get("num_input") if main.attrs else None
    return num_input is None or int(num_input) >= len(main.params)


def fuse_program(mod: tvm.IRModule, target: Any) -> tvm.IRModule:
    """Legalize and fuse a prepared Relax module into calls of fused PrimFuncs, as
    MetaSchedule's ``compile_relax`` does (so task keys match at build time).

    When the weights are constants, their buffers are marked layout-free (TVM's CPU weight
    prepack, as in ``static_shape_tuning_pipeline(cpu_weight_prepack=True)``): a tuned kernel may
    then read its weights in a blocked layout, which ``build_program`` computes once at compile
    time. Tuning times kernels under the same convention (rewrite block removed)."""
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline

    target = make_target(target)
    try:
        dispatch = list(relax_pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):
        dispatch = []
    seq = tvm.transform.Sequential([
        *dispatch,
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        *([relax.transform.AttachAttrLayoutFreeBuffers()] if _weights_are_constants(mod) else []),
    ])
    with target, tvm.transform.PassContext(opt_level=3):
        return seq(mod)


def extract_from_program(mod: tvm.IRModule, target: Any, params: dict | None = None) -> list[TraceTask]:
    """One ``TraceTask`` per distinct tunable PrimFunc of a Relax module, weighted by its call count.

    ``mod`` is a Relax IRModule, e.g. from ``tvm.relax.frontend.torch.from_exported_program``;
    ``params`` (name -> tensor) are bound first, as ``compile_relax`` does.
    """
    load_tensor_intrinsics()
    target = make_target(target)
    return _tasks_of(fuse_program(prepare_program(mod, params), target), target)


def _tasks_of(fused: tvm.IRModule, target: tvm.target.Target) -> list[TraceTask]:
    """The tunable functions of a module already prepared and fused by ``fuse_program``."""
    from tvm.s_tir import meta_schedule as ms

    extracted = ms.relax_integration.extract_tasks(fused, target)
    return [TraceTask(t.task_name, t.dispatched[0], target, weight=int(t.weight)) for t in extracted]


def build_program(mod: tvm.IRModule, target: Any, params: dict | None = None) -> Any:
    """Compile a Relax module, applying the best config of the current ``apply_history_best``.

    Returns a ``relax.VMExecutable``. Without a context (or records) this is TVM's default build.
    """
    load_tensor_intrinsics()
    from tvm.s_tir import meta_schedule as ms

    from ..dispatcher import DispatchContext

    target = make_target(target)
    fused = fuse_program(prepare_program(mod, params), target)  # once: the tasks and the build share it
    database = ms.database.MemoryDatabase()
    for task in _tasks_of(fused, target):
        cfg = DispatchContext.current_config(task)
        if cfg is None:
            continue
        sch = task.schedule_of(cfg)
        workload = database.commit_workload(task.mod)
        database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, workload, [1.0], target, ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])))
    return _compile_with_database(database, fused, target)


def _compile_with_database(database: Any, fused: tvm.IRModule, target: tvm.target.Target) -> Any:
    """MetaSchedule's ``compile_relax`` on an already fused module, plus the CPU weight prepack:
    apply the tuned schedules, split each kernel's weight-layout rewrite into its own function and fold it on the
    constant weights, so the blocked weights are computed once, at compile time."""
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline
    from tvm.s_tir import dlight as dl

    try:
        late = [*relax_pipeline.dataflow_lower_passes(target), *relax_pipeline.finalize_passes(target)]
    except AttributeError:  # TVM 0.27's CPU backend does not export its dataflow_lower_passes
        from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

        late = [*cpu_pipeline.dataflow_lower_passes(target), *cpu_pipeline.finalize_passes(target)]
    gpu = relax_pipeline.BackendDispatcher.is_gpu_target(target)

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
        mod = relax.transform.SplitLayoutRewritePreproc()(mod)
        mod = relax.transform.FoldConstant()(mod)
        if gpu:
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                          dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
        return tvm.transform.Sequential(late)(mod)

    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.build(fused, target=target, relax_pipeline=pipeline)
