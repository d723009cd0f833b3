"""Relax programs: extract one task per tunable TIR function, and build with the best records.

The module is fused exactly as MetaSchedule's ``compile_relax`` fuses it, so the functions we
tune are the functions it later looks up; the best config of each task is handed to it as a
MetaSchedule database record; a function with a single config gets that config's schedule.
Without an ``apply_history_best`` context every function keeps TVM's default lowering.
"""

from __future__ import annotations

import warnings
from typing import Any

import tvm

from ..checks import AutoTVMError, check, choice
from ..env import load_tensor_intrinsics, make_target, use_cuda_compiler
from ..lowering import tir_pipeline
from .float16_casts import casts_where_computed
from .layout_pads import nhwc_pads
from .matmul_fusion import combine_parallel_matmuls, epilogues_before_reshapes
from .matmul_views import matmuls_read_views
from .norm_prologues import norms_compute_their_inputs
from .relax_calls import clip_bounds, is_op, rewrite_bindings, sblocks
from .safe_softmax import one_function_safe_softmax
from .split_k import split_k_matmuls
from .space import InstantiationError
from . import x86_bf16, x86_softmax
from .bfloat16 import casts_in_their_producers, to_bfloat16
from .task import Task, create
from .trace_task import TraceTask
from .winograd import winograd_conv2d


CONV_LAYOUTS = ("auto", "NHWC", "NCHW")
CONV_ALGORITHMS = ("direct", "winograd")
# what the model computes in: float16 is for GPUs (tensor cores), bfloat16 for CPUs with AVX512-BF16
PRECISIONS = ("float32", "float16", "bfloat16")


def prepare_program(mod: tvm.IRModule, params: dict | None = None, conv_layout: str = "auto",
                    conv_algorithm: str = "direct", precision: str = "float32") -> tvm.IRModule:
    """Bind params, rewrite inference-only ops (batch norm becomes a scale and a shift that
    fold into constants and fuse into the preceding convolution) and set the layout of 2-D
    convolutions. With the weights bound, matmuls that read one input (a transformer's query, key
    and value projections) become one; elementwise ops on a reshaped matmul output (residual adds,
    GELU, attention masks) move before the reshape, into the matmul's kernel
    (``autotvm.task.matmul_fusion``); PyTorch's attention softmax becomes one function
    (``autotvm.task.safe_softmax``).

    ``conv_layout="NHWC"`` converts convolutions to NHWC activations (OHWI weights), with one
    transpose where the model's own layout meets it: channels become the innermost axis, so a
    kernel can vectorise over output channels even where the image is small (7x7 in ResNet's last
    stage). ``"NCHW"`` keeps the layout the frontend produced. ``"auto"`` (default) is NHWC when
    the weights are bound constants (their transpose is folded at compile time) and NCHW when
    they are run-time inputs (where it would cost a transpose per call).

    ``conv_algorithm="winograd"`` computes NHWC 3x3 stride-1 convolutions with constant weights by
    Winograd (F(4x4, 3x3), or F(2x2, 3x3) on small maps: ``autotvm.task.winograd``), with the
    weights transformed here, once; other convolutions, and those on maps at most 7 wide (bound by
    reading a weight Winograd makes 1.8x larger), stay direct.

    ``precision="bfloat16"`` (CPUs with AVX512-BF16) computes every matmul and NHWC convolution
    with a constant weight in bfloat16 with float32 accumulation, on the micro-kernel of
    ``autotvm.task.x86_bf16`` (``autotvm.task.bfloat16``): its input is read as bfloat16, its
    weight converted and packed in pairs here, once, a convolution's bias, ReLU and residual go
    into its kernel, and its tile is a knob its task is tuned over; attention's matmuls of two
    activations too, their operands cast where they are computed. A depthwise convolution between
    two convolutions reads and writes bfloat16 and sums in float32. Attention's softmax computes
    in float32, row by row, on its own template (``autotvm.task.x86_softmax``), and writes
    bfloat16 for the product that reads it. Everything else (normalization, other convolutions
    the micro-kernel does not tile) stays float32.

    ``precision="float16"`` runs the model in half precision (Relax's ``ToMixedPrecision``):
    matmuls and convolutions read float16 and accumulate in float32, as PyTorch's and cuBLAS's
    half-precision kernels do, and their outputs go on in float16; on a GPU they run on its tensor
    cores (``autotvm.task.trace_task.tensor_core_rules``), and the constant weights are converted
    here, once. A float32 value cast to float16 is cast where it is computed, once for all its
    readers (``autotvm.task.float16_casts``). The model's inputs and outputs stay float32."""
    from tvm import relax

    check("conv_layout", conv_layout, choice(CONV_LAYOUTS))
    check("conv_algorithm", conv_algorithm, choice(CONV_ALGORITHMS))
    check("precision", precision, choice(PRECISIONS))
    if conv_algorithm == "winograd" and conv_layout == "NCHW":
        raise AutoTVMError("conv_algorithm 'winograd' needs conv_layout 'NHWC' or 'auto'")
    mod = clamped_takes(mod)
    if params:
        mod = combine_parallel_matmuls(mod, set(params))
        mod = relax.transform.BindParams("main", params)(mod)
    mod = one_function_safe_softmax(epilogues_before_reshapes(mod))
    if conv_layout == "auto":
        conv_layout = "NHWC" if _weights_are_constants(mod) else "NCHW"
    # batch norm folds into the weights and bias of the convolution before it (TVM's own pass, on
    # the bound constants); what is left decomposes into a scale and shift, and the tuple batch norm
    # returned is taken apart, so that the activation after it fuses into the convolution's kernel
    passes = [relax.transform.FoldBatchnormToConv2D(), relax.transform.FoldConstant(),
              relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings(),
              relax.transform.FoldConstant()]
    if conv_layout == "NHWC" and _has_conv2d(mod):  # ConvertLayout fails (bad_alloc) on some conv-free models
        passes += [relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]}),
                   relax.transform.FoldConstant(),  # transposes the constant weights once
                   nhwc_pads, relax.transform.CanonicalizeBindings()]
        if conv_algorithm == "winograd":
            passes.append(winograd_conv2d)
    if precision == "float16":
        passes += [clips_of_constants, relax.transform.ConvertToDataflow(),
                   relax.transform.ToMixedPrecision(out_dtype="float32"),
                   relax.transform.FoldConstant(),  # the weights converted once
                   casts_where_computed]
    elif precision == "bfloat16":  # its casts and blocked layouts leave reshapes of reshapes
        passes += [to_bfloat16, relax.transform.RemoveRedundantReshape()]
    with tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def clamped_takes(mod: tvm.IRModule) -> tvm.IRModule:
    """``take(mode="fast")`` (PyTorch's embedding lookups) becomes ``take(mode="clip")``: an index
    out of range is clamped instead of read out of bounds, and TVM no longer warns of it at every
    legalization (``FoldConstant``'s included). Indices in range give the same values, as fast."""
    from tvm import relax

    def clamp(_rewriter: Any, call: Any) -> Any:
        if is_op(call, "take") and call.attrs.mode == "fast":
            return relax.op.take(call.args[0], call.args[1], call.attrs.axis, mode="clip")
        return None

    return rewrite_bindings(mod, clamp)


@tvm.transform.module_pass(opt_level=0, name="ClipsOfConstants")
def clips_of_constants(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """``clip(x, min, max)`` with scalar bounds (PyTorch's ReLU6, in MobileNetV2) becomes
    ``minimum(maximum(x, min), max)`` of constants in ``x``'s dtype, the same values: Relax's
    ``ToMixedPrecision`` stops on a clip's scalar bounds."""
    from tvm import relax

    def bounded(_rewriter: Any, call: Any) -> Any:
        bounds = clip_bounds(call)
        data = call.args[0] if bounds else None
        dtype = str(getattr(getattr(data, "ty", None), "dtype", ""))
        if "float" not in dtype or not all(isinstance(b, (int, float)) for b in bounds):
            return None
        low, high = (relax.const(float(bound), dtype) for bound in bounds)
        return relax.op.minimum(relax.op.maximum(data, low), high)

    return rewrite_bindings(mod, bounded)


def _has_conv2d(mod: tvm.IRModule) -> bool:
    """Whether a Relax function of the module calls ``relax.nn.conv2d``."""
    from tvm import relax

    found = []

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d":
            found.append(expr)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


def _weights_are_constants(mod: tvm.IRModule) -> bool:
    """True when the model's weights are bound constants (no ``num_input`` split of ``main``'s
    parameters into inputs and weights), so their layout can be rewritten once at compile time."""
    main = mod["main"] if "main" in [g.name_hint for g in mod.get_global_vars()] else None
    if main is None:
        return False
    num_input = main.attrs.get("num_input") if main.attrs else None
    return num_input is None or int(num_input) >= len(main.params)


def fuse_program(mod: tvm.IRModule, target: Any, precision: str = "float32") -> tvm.IRModule:
    """Legalize and fuse a prepared Relax module into calls of fused PrimFuncs, as
    MetaSchedule's ``compile_relax`` does (so task keys match at build time).

    exp, erf, tanh, softmax and GELU become TVM's fast-math forms (``FastMathTransform``: polynomial
    approximations that vectorise: erf and tanh within 7 float32 ulps, exp within 4e-6 relative
    error), as ONNX Runtime, OpenVINO and PyTorch compute them, instead of a libm call per value.

    When the weights are constants, their buffers are marked layout-free (TVM's CPU weight
    prepack, as in ``static_shape_tuning_pipeline(cpu_weight_prepack=True)``): a tuned kernel may
    then read its weights in a blocked layout, which ``build_program`` computes once at compile
    time. Tuning times kernels under the same convention (rewrite block removed).

    On a GPU, a deep matmul or convolution with few outputs sums its K in parts
    (``autotvm.task.split_k``), and a matmul of two activations (attention's) reads them through
    their views in place (``autotvm.task.matmul_views``), and a layer norm computes its input
    in its own kernel (``autotvm.task.norm_prologues``). On a CPU, in float32 or bfloat16 (the
    ``precision`` the module was prepared in), attention's softmax computes row by row on its
    template (``autotvm.task.x86_softmax``)."""
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline

    target = make_target(target)
    try:
        dispatch = list(relax_pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):
        dispatch = []
    gpu = relax_pipeline.BackendDispatcher.is_gpu_target(target)
    if gpu:
        mod = matmuls_read_views(split_k_matmuls(mod))
    elif target.kind.name == "llvm" and precision != "float16":
        mod = x86_softmax.softmax_rows(mod)
    seq = tvm.transform.Sequential([
        *dispatch,
        _float16_erf_in_float32,
        relax.transform.FastMathTransform(),
        relax.transform.LegalizeOps(customize_legalize_map={"relax.nn.gelu": _fast_gelu}),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        *([norms_compute_their_inputs] if gpu else []),
        relax.transform.FuseTIR(),
        casts_in_their_producers,
        *([relax.transform.AttachAttrLayoutFreeBuffers()] if _weights_are_constants(mod) else []),
        _without_unknown_schedule_rules,
    ])
    with target, tvm.transform.PassContext(opt_level=3):
        return seq(mod)


@tvm.transform.module_pass(opt_level=0, name="WithoutUnknownScheduleRules")
def _without_unknown_schedule_rules(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """Drop a block's ``schedule_rule`` annotation where MetaSchedule has no such rule for the
    target (legalized max pooling names ``meta_schedule.pool_max``, which no target registers):
    MetaSchedule would warn on every design space and use its generic rules anyway. Tasks and
    builds both see the functions without it."""
    from tvm.s_tir import Schedule

    target = tvm.target.Target.current()
    for gvar, func in list(mod.functions_items()):
        if not isinstance(func, tvm.tirx.PrimFunc) or "schedule_rule" not in func.script():
            continue
        sch = Schedule(func)
        changed = False
        for block in sblocks(sch):
            rule = sch.get(block).annotations.get("schedule_rule")
            if rule is None or str(rule) == "None":
                continue
            names = [f"s_tir.meta_schedule.{key}.{rule}" for key in target.keys]
            if not any(tvm.get_global_func(name, allow_missing=True) for name in names):
                sch.unannotate(block, "schedule_rule")
                changed = True
        if changed:
            mod[gvar] = sch.mod["main"].with_attrs(func.attrs) if func.attrs else sch.mod["main"]
    return mod


@tvm.transform.module_pass(opt_level=0, name="Float16ErfInFloat32")
def _float16_erf_in_float32(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """A float16 erf or GELU computes in float32 and rounds once: TVM's float16 fast erf, which
    ``FastMathTransform`` and ``_fast_gelu`` put in place of erf, strays past 1 near |x| = 4
    (-1.041 at x = -3.99), which scales the largest activations by up to 2%, an error a
    transformer's layers compound. The casts fuse into the kernel of the op."""
    from tvm import relax

    ops = {"erf": relax.op.erf, "nn.gelu": relax.op.nn.gelu}

    def widen(rewriter: Any, call: Any) -> Any:
        name = next((name for name in ops if is_op(call, name)), None)
        if name and str(getattr(call.args[0].ty, "dtype", "")) == "float16":
            wide = rewriter.builder_.emit(relax.op.astype(call.args[0], "float32"))
            return relax.op.astype(rewriter.builder_.emit(ops[name](wide)), "float16")
        return None

    return rewrite_bindings(mod, widen)


def _fast_gelu(bb: Any, call: Any) -> Any:
    """GELU as TVM legalizes it, with ``topi.fast_erf`` (the polynomial that ``FastMathTransform``
    puts in place of a bare erf) instead of ``erf``. LLVM lowers ``erf`` to a call of libm's
    ``erff`` per value, which does not vectorise and slows down on real activations (docs/findings.md,
    finding 8)."""
    from tvm import te, tirx, topi

    def gelu(x: te.Tensor) -> te.Tensor:
        half = tirx.const(0.5, x.dtype)
        return x * (half + topi.fast_erf(x * tirx.const(0.5**0.5, x.dtype)) * half)

    return bb.call_te(gelu, call.args[0], primfunc_name_hint="gelu")


def extract_from_program(mod: tvm.IRModule, target: Any, params: dict | None = None,
                         conv_layout: str = "auto", conv_algorithm: str = "direct",
                         precision: str = "float32") -> list[TraceTask]:
    """One ``TraceTask`` per distinct tunable PrimFunc of a Relax module, weighted by its call count.

    ``mod`` is a Relax IRModule, e.g. from ``tvm.relax.frontend.torch.from_exported_program``;
    ``params`` (name -> tensor) are bound first, as ``compile_relax`` does; ``conv_layout``,
    ``conv_algorithm`` and ``precision`` as in ``prepare_program`` (build with the same ones: the
    tasks, and so the records, differ).
    """
    check_program(mod, params)
    target = make_target(target)
    load_tensor_intrinsics(target)
    check_precision(precision, target)
    return _tasks_of(fuse_program(prepare_program(mod, params, conv_layout, conv_algorithm, precision), target,
                                  precision),
                     target)


def check_precision(precision: str, target: tvm.target.Target) -> None:
    """A precision the target can compute in: float16 on a GPU, bfloat16 on a CPU with AVX512-BF16."""
    check("precision", precision, choice(PRECISIONS))
    if precision == "bfloat16" and (target.kind.name != "llvm" or not x86_bf16.cpu_has_bf16(target)):
        raise AutoTVMError(f"precision 'bfloat16' needs a CPU with AVX512-BF16 (vdpbf16ps); the target's "
                           f"{target.attrs.get('mcpu', target.kind.name)!r} has none: use 'float32'")


def check_program(mod: Any, params: Any) -> None:
    """A Relax module with a ``main`` function, and its parameters by name (or None)."""
    from tvm import relax

    if not isinstance(mod, tvm.IRModule) or not any(
            g.name_hint == "main" and isinstance(f, relax.Function) for g, f in mod.functions_items()):
        raise AutoTVMError(f"mod must be a Relax IRModule with a function 'main' (e.g. from "
                           f"tvm.relax.frontend.torch.from_exported_program), got {type(mod).__name__}")
    if params is not None and (not isinstance(params, dict) or not all(isinstance(k, str) for k in params)):
        raise AutoTVMError(f"params must be a dict of parameter name -> tensor, or None, got {type(params).__name__}")


def _tasks_of(fused: tvm.IRModule, target: tvm.target.Target) -> list[Task]:
    """The tunable functions of a module already prepared and fused by ``fuse_program``: a
    ``TraceTask`` each, or, for a function made from a template (``autotvm.template``, e.g. the
    bfloat16 matmuls and convolutions), that template's task. A function that only reshapes is
    none: the build makes it a view, no kernel (Relax's ``RewriteDataflowReshape``)."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    tasks: list[Task] = []
    for extracted in ms.relax_integration.extract_tasks(fused, target):
        if relax.analysis.has_reshape_pattern(extracted.dispatched[0]["main"]):
            continue
        task = _template_task(extracted.dispatched[0]["main"], target)
        if task is None:
            task = TraceTask(extracted.task_name, extracted.dispatched[0], target)
        task.weight = int(extracted.weight)
        tasks.append(task)
    return tasks


def _template_task(func: Any, target: tvm.target.Target) -> Task | None:
    """The task of a function made from a template (its ``autotvm.template`` and ``autotvm.args``)."""
    if not isinstance(func, tvm.tirx.PrimFunc) or func.attrs is None or "autotvm.template" not in func.attrs:
        return None
    return create(str(func.attrs["autotvm.template"]), [int(a) for a in func.attrs["autotvm.args"]], target)


def _schedule_templates(fused: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """``fused`` with each function made from a template replaced by its schedule: the best config
    of the active ``apply_history_best``, else the template's first."""
    from ..dispatcher import DispatchContext

    for gvar, func in list(fused.functions_items()):
        task = _template_task(func, target)
        if task is None:
            continue
        config = DispatchContext.current_config(task, function=gvar.name_hint) or task.config_space.get(0)
        scheduled = task.instantiate(config)["main"]
        fused[gvar] = scheduled.without_attr("global_symbol").with_attrs(
            {key: value for key, value in func.attrs.items() if key != "global_symbol"})
    return fused


def fused_program(mod: tvm.IRModule, target: Any, params: dict | None = None, conv_layout: str = "auto",
                  conv_algorithm: str = "direct", precision: str = "float32") -> tvm.IRModule:
    """The module as tuned and built: ``prepare_program`` then ``fuse_program``. MetaSchedule's own
    ``tune_relax`` on it tunes the same functions as ``extract_from_program``'s tasks."""
    target = make_target(target)
    return fuse_program(prepare_program(mod, params, conv_layout, conv_algorithm, precision), target, precision)


def build_program(mod: tvm.IRModule, target: Any, params: dict | None = None, conv_layout: str = "auto",
                  conv_algorithm: str = "direct", database: Any = None, precision: str = "float32",
                  cuda_graph: bool = True) -> Any:
    """Compile a Relax module, applying the best config of the current ``apply_history_best``.

    Returns a ``relax.VMExecutable``. Without a context (or records) this is TVM's default build.
    ``conv_layout``, ``conv_algorithm`` and ``precision`` must be the ones the tasks were extracted with.
    ``database``: a MetaSchedule database to build with instead (MetaSchedule's own tuning of
    ``fused_program``'s module), so both searches' results are built the same way. ``cuda_graph``:
    on a GPU, replay the model's kernels as one CUDA graph (off: each kernel is launched from the
    host, so that a profile sees each one).
    """
    check_program(mod, params)
    target = make_target(target)
    load_tensor_intrinsics(target)
    check_precision(precision, target)
    # prepared and fused once: the task lookup and the build share it
    fused = fused_program(mod, target, params, conv_layout, conv_algorithm, precision)
    database = database if database is not None else _records_database(fused, target)
    return _compile_with_database(database, _schedule_templates(fused, target), target, cuda_graph)


def _records_database(fused: tvm.IRModule, target: tvm.target.Target) -> Any:
    """The best configs of the active ``apply_history_best`` as a MetaSchedule database."""
    from tvm.s_tir import meta_schedule as ms

    from ..dispatcher import DispatchContext, warn_stale_records

    database = ms.database.MemoryDatabase()
    if not DispatchContext.stack():
        return database
    tasks = _tasks_of(fused, target)
    missing = []  # the tunable tasks without a record
    for task in tasks:
        if not isinstance(task, TraceTask):  # a template's function is scheduled in place (_schedule_templates)
            cfg = DispatchContext.current_config(task)
        else:
            cfg = DispatchContext.current_config(task, function=task.name)
            sch = task.schedule_of(cfg) if cfg is not None else _single_config_schedule(task)
            if sch is not None:
                workload = database.commit_workload(task.mod)
                database.commit_tuning_record(ms.database.TuningRecord(
                    sch.trace, workload, [1.0], target, ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])))
        if cfg is None and len(task.config_space) > 1:
            missing.append(task)
    warn_stale_records()
    tunable = [task for task in tasks if len(task.config_space) > 1]
    if tunable and len(missing) == len(tunable):
        warnings.warn("build_program: no record of the active apply_history_best matches a task of this program "
                      "(tuned for another target, model, precision, conv_layout or conv_algorithm?); building it untuned")
    elif missing:
        share = sum(t.flop * t.weight for t in missing) / (sum(t.flop * t.weight for t in tasks) or 1.0)
        warnings.warn(f"build_program: {len(missing)} of the program's {len(tunable)} tunable functions have no "
                      f"record in the active apply_history_best ({share:.0%} of its FLOPs; e.g. {missing[0].name}) "
                      "and are built untuned: tune them for the same model, target, precision and conv options")
    return database


def _single_config_schedule(task: TraceTask) -> Any:
    """The schedule of a task whose space has one config (``None`` for a larger space, or one the
    postprocessors reject). Such a function is never measured, since the task scheduler gives it no
    trials; its one schedule is threaded and vectorised by the postprocessors, where TVM's default
    lowering of it runs on one core without vectors."""
    if len(task.config_space) != 1:
        return None
    try:
        return task.schedule_of(task.config_space.get(0))
    except InstantiationError:
        return None


def _compile_with_database(database: Any, fused: tvm.IRModule, target: tvm.target.Target,
                           cuda_graph: bool = True) -> Any:
    """MetaSchedule's ``compile_relax`` on an already fused module, plus the CPU weight prepack:
    apply the tuned schedules, split each kernel's weight-layout rewrite into its own function and fold it on the
    constant weights, so the blocked weights are computed once, at compile time."""
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline
    from tvm.s_tir import dlight as dl

    gpu = relax_pipeline.BackendDispatcher.is_gpu_target(target)
    # the backend's own lowering (TVM 0.27's backend packages do not export these passes at the top)
    if gpu:
        use_cuda_compiler()  # the kernels' machine code as the tune measured it
        from tvm.relax.backend.cuda import pipeline as backend
    else:
        from tvm.relax.backend.cpu_generic import pipeline as backend
    late = [*backend.dataflow_lower_passes(target), *backend.finalize_passes(target)]

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
        mod = relax.transform.SplitLayoutRewritePreproc()(mod)
        mod = relax.transform.FoldConstant()(mod)
        if gpu:
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                          dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
        return tvm.transform.Sequential(late)(mod)

    # on a GPU the whole model is captured once as a CUDA graph and replayed as one launch
    # (TVM's RewriteCUDAGraph, in the CUDA backend's finalize passes): a batch-1 model of a few
    # dozen kernels is otherwise bound by the host's launches
    config = {"relax.backend.use_cuda_graph": True} if gpu and cuda_graph else {}
    with target, database, tvm.transform.PassContext(opt_level=3, config=config):
        return relax.build(fused, target=target, relax_pipeline=pipeline, tir_pipeline=tir_pipeline(target))
