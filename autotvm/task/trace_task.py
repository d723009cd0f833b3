"""Tasks whose knobs are the random decisions of MetaSchedule's design space.

No template is written by hand: MetaSchedule's space generator produces one or more design
spaces (sketches) for the target; every sampling instruction of a sketch becomes a knob over
the decisions it could take. A config is replayed onto the sketch's trace and the target's
postprocessors are applied; a config they reject is invalid (``InstantiationError``).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import diskcache
import tvm
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import transform as s_tir_transform
from tvm.s_tir.analysis import calculate_allocated_bytes
from tvm.s_tir.schedule import Trace

from ..checks import AutoTVMError, check, integer, text
from ..env import load_tensor_intrinsics, make_target
from .space import ConfigEntity, ConfigSpace, InstantiationError, Knob, OtherOptionEntity, SplitEntity, factorizations
from .task import Task, buffer_signature

logger = logging.getLogger("autotvm")

SAMPLING_KINDS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")
MAX_LOCATION_PROBE = 48
CHECKED_KEPT = 64  # programs of accepted configs kept from ``check`` for ``instantiate`` (a batch or two)
REGISTERS_PER_THREAD = 255  # the most 32-bit registers a CUDA thread can hold (every architecture since sm_35)


def cache_dir() -> Path:
    """Where design spaces are cached; override with ``$AUTOTVM_CACHE_DIR``."""
    root = os.environ.get("AUTOTVM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "gadqn-autotvm")
    return Path(root) / "design_spaces"


def _design_space_cache() -> diskcache.Cache:
    """The on-disk cache of design spaces (``diskcache``: safe for the parallel build workers)."""
    return diskcache.Cache(str(cache_dir()))


def _normalise(func_or_mod: Any) -> tvm.IRModule:
    if isinstance(func_or_mod, tvm.IRModule):
        funcs = list(func_or_mod.functions.items())
        if len(funcs) != 1:
            raise InstantiationError("a tunable module must hold exactly one PrimFunc")
        return tvm.IRModule({"main": funcs[0][1].with_attr("global_symbol", "main")})
    return tvm.IRModule({"main": func_or_mod.with_attr("global_symbol", "main")})


def has_tensor_cores(target: Any) -> bool:
    """Whether the target is a CUDA GPU with tensor cores (sm_70 and newer)."""
    target = make_target(target)
    if target.kind.name != "cuda":
        return False
    arch = str(target.attrs.get("arch", "sm_50"))
    digits = "".join(ch for ch in arch[3:] if ch.isdigit())
    return bool(digits) and int(digits) >= 70


def rules_kind(mod: tvm.IRModule, target: tvm.target.Target) -> str | None:
    """The set of MetaSchedule rules a task's design space comes from: ``cuda-tensorcore`` for a
    function that reads float16 on a GPU with tensor cores, so that its sketches compute on them
    (WMMA; ``tensor_core_rules``); None for the target's own set otherwise."""
    if not has_tensor_cores(target):
        return None
    return "cuda-tensorcore" if any(dtype == "float16" for _, _, dtype in buffer_signature(mod)) else None


TENSOR_CORE_RULES = ":f32-sums-in-shared,no-3-vectors"  # in the design-space cache's key: changes with them


def tensor_core_rules() -> list:
    """MetaSchedule's CUDA tensor-core schedule rules (``cuda-tensorcore``: WMMA tiles, then the
    CUDA rules) with one change: a float32 accumulator is staged in static shared memory on its
    way out, where TVM's default stages it in the dynamic shared memory that also holds the
    float16 inputs: TVM 0.27's code generator stops on most kernels of the default's (the merged
    allocation is float16: ``tvm_access_ptr``'s type check). Its copies move 1, 2, 4, 8 or 16
    elements at a time, not the default's 3 too (a vector of 3 meets the float16 cast on the way
    out, which TVM's CUDA code generator refuses). Float16 and int8 tiles keep the default's
    rule; the default's MMA rule, which adds no sketch after the WMMA rule, is left out. The
    tensor intrinsics must be loaded first (``load_tensor_intrinsics``)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.schedule_rule import MultiLevelTilingTensorCore, ReuseType
    from tvm.s_tir.tensor_intrin.cuda import get_wmma_intrin_group

    def wmma(groups: list, store: str, vector_lens: list) -> Any:
        return MultiLevelTilingTensorCore(
            intrin_groups=[get_wmma_intrin_group("shared.dyn", store, in_dtype, out_dtype, trans_b)
                           for in_dtype, out_dtype in groups for trans_b in (False, True)],
            structure="SSSRRSRS", tile_binds=["blockIdx.y", "blockIdx.x", "threadIdx.y"], max_innermost_factor=4,
            vector_load_lens=vector_lens, reuse_read=ReuseType("must", [4], "shared.dyn"),
            reuse_write=ReuseType("must", [2], store), use_software_pipeline=False)

    cuda = list(ms.ScheduleRule.create("cuda"))  # ApplyCustomRule, MultiLevelTiling, ...
    return [cuda[0], wmma([("float16", "float32")], "shared", [1, 2, 4, 8, 16]),
            wmma([("float16", "float16"), ("int8", "int32")], "shared.dyn", [1, 2, 3, 4, 8, 16]), *cuda[1:]]


def tensor_core_space() -> Any:
    """MetaSchedule's space generator with ``tensor_core_rules`` and the tensor-core postprocessors
    and mutators (``cuda-tensorcore``)."""
    load_tensor_intrinsics()
    from tvm.s_tir import meta_schedule as ms

    return ms.space_generator.PostOrderApply(sch_rules=tensor_core_rules(), postprocs="cuda-tensorcore",
                                             mutator_probs="cuda-tensorcore")


def _tune_context(mod: tvm.IRModule, target: tvm.target.Target) -> Any:
    load_tensor_intrinsics(target)
    from tvm.s_tir import meta_schedule as ms

    generator = "post-order-apply" if rules_kind(mod, target) is None else tensor_core_space()
    return ms.TuneContext(mod=mod, target=target, space_generator=generator, task_name="main", num_threads=1)


def _design_space_traces(mod: tvm.IRModule, target: tvm.target.Target, ctx: Any) -> list[Trace]:
    """The sketches of ``mod`` for ``target``, simplified; cached on disk as trace JSON. A cache
    that cannot be read or written (a full disk, a read-only home) only costs the regeneration."""
    rules = rules_kind(mod, target) or ""
    rules += TENSOR_CORE_RULES if rules == "cuda-tensorcore" else ""
    key = hashlib.sha256((mod.script() + json.dumps(str(target)) + tvm.__version__ + rules).encode()).hexdigest()[:32]
    cached = _cache_call(lambda cache: cache.get(key))
    if cached is not None:
        try:
            traces = []
            for trace_json in json.loads(cached):
                sch = Schedule(mod)
                Trace.apply_json_to_schedule(trace_json, sch)
                traces.append(sch.trace.simplified(remove_postproc=True))
            return traces
        except Exception:  # an entry that no longer applies is regenerated
            pass
    traces = [s.trace.simplified(remove_postproc=True) for s in ctx.generate_design_space()]
    text = json.dumps([t.as_json(remove_postproc=True) for t in traces], default=_plain)
    _cache_call(lambda cache: cache.set(key, text))
    return traces


_cache_warned = False


def _cache_call(action: Any) -> Any:
    """``action(cache)``, or None with one warning per process when the cache fails."""
    global _cache_warned
    try:
        with _design_space_cache() as cache:
            return action(cache)
    except (OSError, sqlite3.Error) as err:
        if not _cache_warned:
            _cache_warned = True
            logger.warning("the design-space cache at %s is not usable (%s); design spaces are generated anew",
                           cache_dir(), err)
        return None


def _plain(obj: Any) -> Any:
    """JSON encoder fallback for the TVM values inside a trace's JSON form."""
    if hasattr(obj, "value"):
        return obj.value
    if isinstance(obj, str) or type(obj).__name__ == "String":
        return str(obj)
    try:
        return list(obj)
    except TypeError:
        return str(obj)


def _sampling_insts(trace: Trace) -> list:
    return [inst for inst in trace.insts if inst.kind.name in SAMPLING_KINDS]


class TraceTask(Task):
    """A task over MetaSchedule's design space of one PrimFunc (see module docstring)."""

    def __init__(self, name: str, mod: tvm.IRModule, target: Any, weight: int = 1) -> None:
        target = make_target(target)
        mod = _normalise(mod)
        self.mod = mod
        self._ctx = _tune_context(mod, target)
        self.postprocs = list(self._ctx.space_generator.postprocs)
        # programs of configs ``check`` accepted, kept for ``instantiate`` (the builder's first step)
        self._checked: collections.OrderedDict[int, tvm.IRModule] = collections.OrderedDict()
        self._checked_lock = threading.Lock()
        self.sketches = _design_space_traces(mod, target, self._ctx)
        self._reads_float16 = any(dtype == "float16" for _, _, dtype in buffer_signature(mod))
        if not self.sketches:
            raise InstantiationError(f"MetaSchedule produced no design space for {name!r}")
        space, self._bindings = self._build_space()
        self._thread_limits = [_thread_limits(trace, target) for trace in self.sketches]
        flop = float(tvm.s_tir.analysis.estimate_tir_flops(mod))
        super().__init__(name, buffer_signature(mod), target, space, flop, weight)

    # -- space construction
    def _build_space(self) -> tuple[ConfigSpace, list[list[tuple]]]:
        """Knobs shared by sketches whose sampling instruction at a position has the same signature."""
        space = ConfigSpace()
        if len(self.sketches) > 1:
            space._add(Knob("sketch", [OtherOptionEntity(i) for i in range(len(self.sketches))]))
        by_signature: dict[tuple, int] = {}
        bindings: list[list[tuple]] = []
        for s, trace in enumerate(self.sketches):
            binding = []
            for pos, inst in enumerate(_sampling_insts(trace)):
                entities, signature = self._knob_entities(trace, inst, pos)
                key = (pos, inst.kind.name, signature)
                if key not in by_signature:
                    if len(entities) <= 1:
                        continue  # a decision with one choice is not a knob
                    short = {"SamplePerfectTile": "tile", "SampleCategorical": "cat",
                             "SampleComputeLocation": "loc"}[inst.kind.name]
                    by_signature[key] = len(space.knobs)
                    name = f"{short}_{pos}"
                    if name in space._by_name:
                        name = f"{name}_s{s}"
                    space._add(Knob(name, entities, {"kind": inst.kind.name}))
                binding.append((inst, by_signature[key]))
            bindings.append(binding)
        if not space.knobs:
            space._add(Knob("sketch", [OtherOptionEntity(0)]))
        return space, bindings

    def _knob_entities(self, trace: Trace, inst: Any, pos: int) -> tuple[list, tuple]:
        kind = inst.kind.name
        decision = trace.decisions[inst]
        if kind == "SamplePerfectTile":
            n, max_inner = int(inst.attrs[0]), int(inst.attrs[1])
            extent = 1
            for f in decision:
                extent *= int(f)
            cands = factorizations(extent, n, max_inner if max_inner > 0 else None)
            return [SplitEntity(c) for c in cands], (n, max_inner, extent)
        if kind == "SampleCategorical":
            cands = [c.value if hasattr(c, "value") else int(c) for c in inst.attrs[0]]
            return [OtherOptionEntity(c) for c in cands], tuple(cands)
        locations = self._valid_locations(trace, inst)
        return [OtherOptionEntity(loc) for loc in locations], tuple(locations)

    def _valid_locations(self, trace: Trace, inst: Any) -> list[int]:
        """Compute-location decisions that replay as themselves (invalid ones snap to another)."""
        position = [i for i in trace.insts if i.kind.name == "SampleComputeLocation"].index(inst)
        valid = []
        for loc in range(-2, MAX_LOCATION_PROBE):
            decisions = dict(trace.decisions)
            decisions[inst] = loc
            sch = Schedule(self.mod)
            try:
                Trace(trace.insts, decisions).apply_to_schedule(sch, remove_postproc=True)
            except Exception:
                continue
            applied = [i for i in sch.trace.insts if i.kind.name == "SampleComputeLocation"][position]
            got = int(sch.trace.decisions[applied])
            if got == loc:
                valid.append(loc)
            elif loc > 0 and got < loc and loc - got > 8:
                break
        return valid or [int(trace.decisions[inst])]

    # -- instantiation
    def trace_of(self, config: ConfigEntity) -> Trace:
        """The sketch's trace with this config's decisions (before postprocessing)."""
        sketch, decisions = self._decisions(config)
        return Trace(self.sketches[sketch].insts, decisions)

    def _decisions(self, config: ConfigEntity) -> tuple[int, dict]:
        """The sketch a config takes and its decisions, by sampling instruction."""
        knob = config.knob
        sketch = knob[0] if self.config_space.knobs[0].name == "sketch" and len(self.sketches) > 1 else 0
        trace = self.sketches[sketch]
        decisions = dict(trace.decisions)
        for inst, k in self._bindings[sketch]:
            entity = self.config_space.knobs[k].entities[knob[k]]
            if inst.kind.name == "SamplePerfectTile":
                decisions[inst] = list(entity.size)
            elif inst.kind.name == "SampleCategorical":
                cands = [c.value if hasattr(c, "value") else int(c) for c in inst.attrs[0]]
                decisions[inst] = cands.index(entity.val)
            else:
                decisions[inst] = int(entity.val)
        return sketch, decisions

    def schedule_of(self, config: ConfigEntity) -> Schedule:
        """Replay the config and run the postprocessors; a rejected config raises ``InstantiationError``."""
        return self._postprocessed(self._replayed(config))

    def _replayed(self, config: ConfigEntity) -> Schedule:
        sch = Schedule(self.mod)
        try:
            self.trace_of(config).apply_to_schedule(sch, remove_postproc=True)
        except Exception as err:
            raise InstantiationError(f"replaying the config failed: {str(err).strip().splitlines()[-1]}") from None
        return sch

    def _postprocessed(self, sch: Schedule) -> Schedule:
        sch.enter_postproc()
        for postproc in self.postprocs:
            try:
                ok = postproc.apply(sch)
            except Exception:
                ok = False
            if not ok:
                raise InstantiationError(f"postprocessor {type(postproc).__name__} rejected the config")
        return sch

    def instantiate(self, config: ConfigEntity) -> tvm.IRModule:
        with self._checked_lock:
            mod = self._checked.pop(config.index, None)
        return mod if mod is not None else self.schedule_of(config).mod

    @property
    def checks_before_build(self) -> bool:
        """Whether tuners check configs with ``check`` before they are built. On a GPU the
        postprocessors (``VerifyGPUCode``: threads per block, shared memory) reject most of a
        space; rejected in the tuner, in milliseconds each, they cost no build and no trial. On
        LLVM the same postprocessors accept nearly every config, so the check would only add time."""
        return self.target.kind.name == "cuda"

    def check(self, config: ConfigEntity) -> str | None:
        """Why the target's postprocessors reject ``config`` (``None`` if they accept it): the
        builder's first step, run in the tuner's process without building (safe to call from
        several threads at once: TVM releases the GIL while it schedules). The threads per block
        are read from the tile sizes first, then the shared memory from the replayed loops; only
        a config within both goes through the postprocessors. On a GPU a config they accept is
        rejected still where a thread's own buffers outgrow its registers
        (``_local_memory_over_registers``) or where it gathers 8 float16 values at once
        (``_float16_gathers``)."""
        why = self._threads_out_of_limits(config)
        if why is not None:
            return why
        try:
            sch = self._replayed(config)
            why = _shared_memory_over_limit(sch, self.target)
            if why is not None:
                return why
            mod = self._postprocessed(sch).mod
        except InstantiationError as err:
            return str(err)
        why = _lowered_code_rejected(mod, self._reads_float16) if self.target.kind.name == "cuda" else None
        if why is not None:
            return why
        with self._checked_lock:
            self._checked[config.index] = mod
            while len(self._checked) > CHECKED_KEPT:
                self._checked.popitem(last=False)
        return None

    def _threads_out_of_limits(self, config: ConfigEntity) -> str | None:
        """Why the config's threads per block break the GPU's limits, read from its tile sizes
        alone (microseconds; ``VerifyGPUCode`` would reject it after a replay of milliseconds),
        or None when they do not or cannot be read (``_thread_limits``)."""
        sketch, decisions = self._decisions(config)
        for factors, low, high in self._thread_limits[sketch]:
            threads = 1
            for factor in factors:
                threads *= factor if isinstance(factor, int) else int(decisions[factor[0]][factor[1]])
            if not low <= threads <= high:
                return f"{threads} threads per block; the target and the sketch allow {low} to {high}"
        return None

    def default_module(self) -> tvm.IRModule:
        return self.mod


def _thread_limits(trace: Trace, target: tvm.target.Target) -> list[tuple[list, int, int]]:
    """For each loop of ``trace`` bound to a ``threadIdx`` axis whose extent follows from tile
    sizes: (its factors, each ``(SamplePerfectTile instruction, output position)`` or a constant
    such as a warp's lanes in a tensor-core sketch; the fewest threads allowed; the most). The
    most: the target's ``max_threads_per_block`` (and the sketch's
    ``meta_schedule.thread_extent_high_inclusive``); the fewest: the sketch's
    ``thread_extent_low_inclusive`` where one loop is the block's only thread axis, else 1. A
    config outside them is one ``VerifyGPUCode`` rejects; nothing inside them is rejected here."""
    producer = {}
    for inst in trace.insts:
        for position, out in enumerate(inst.outputs):
            producer[out] = (inst, position)

    def factors_of(loop: Any) -> list | None:
        if loop not in producer:
            return None
        inst, position = producer[loop]
        if inst.kind.name == "Split":
            factor = inst.inputs[1 + position]
            if factor in producer and producer[factor][0].kind.name == "SamplePerfectTile":
                return [producer[factor]]
            try:
                return [int(factor)]
            except (TypeError, ValueError):
                return None
        if inst.kind.name == "Fuse":
            found: list = []
            for part in inst.inputs:
                part_factors = factors_of(part)
                if part_factors is None:
                    return None
                found += part_factors
            return found
        return None

    annotations = {}
    for inst in trace.insts:
        key = str(inst.attrs[0]) if inst.kind.name == "Annotate" else ""
        if key.startswith("meta_schedule.thread_extent_") or key == "warp_execution":
            try:
                annotations[key] = int(inst.inputs[1])
            except (TypeError, ValueError):
                pass
    binds = [inst for inst in trace.insts if inst.kind.name == "Bind" and str(inst.attrs[0]).startswith("threadIdx")]
    high = int(target.attrs.get("max_threads_per_block", 1024))
    high = min(high, annotations.get("meta_schedule.thread_extent_high_inclusive", high))
    low = annotations.get("meta_schedule.thread_extent_low_inclusive", 1) if len(binds) == 1 else 1
    # a tensor-core sketch runs a warp per threadIdx.y (``warp_execution``): threadIdx.x is its lanes
    lanes = int(target.attrs.get("thread_warp_size", 32)) if annotations.get("warp_execution") else 1
    limits = []
    for inst in binds:
        factors = factors_of(inst.inputs[0])
        if factors:
            per_lane = lanes if str(inst.attrs[0]) != "threadIdx.x" else 1
            limits.append((factors + ([per_lane] if per_lane > 1 else []), low, high))
    return limits


def _shared_memory_over_limit(sch: Schedule, target: tvm.target.Target) -> str | None:
    """Why a replayed schedule needs more shared memory per block than the target has, read from
    its loops before any postprocessor (about a millisecond; ``VerifyGPUCode`` would reject it
    after lowering it, tens of milliseconds), or None. What is counted is a lower bound of what
    the kernel allocates: the tiles that blocks copy from global memory into shared memory under
    one loop (a reduction step's inputs, all live at once), each the product of the extents of
    the loops that hold its block alone (its region of the buffer). Padding, pipelining's extra
    copies and staged outputs are left out: a config under the bound goes on to the
    postprocessors, which have the last word."""
    limit = target.attrs.get("max_shared_memory_per_block")
    if limit is None:
        return None
    under: dict[Any, int] = {}  # bytes copied under each loop (None: at the function's top)
    for gvar in sch.mod.get_global_vars():
        sch.work_on(gvar.name_hint)
        blocks = [sch.get_sblock("root")]
        while blocks:
            block = blocks.pop()
            blocks.extend(sch.get_child_blocks(block))
            node = sch.get(block)
            if not any(read.source.scope() == "global" for read in node.reads):
                continue
            for write in node.writes:
                if write.source.scope() not in ("shared", "shared.dyn"):
                    continue
                elements, at = 1, None
                for loop in reversed(sch.get_loops(block)):
                    if len(sch.get_child_blocks(loop)) != 1:
                        at = sch.get(loop)  # this loop and those above it hold other blocks too
                        break
                    elements *= int(sch.get(loop).extent)
                under[at] = under.get(at, 0) + elements * write.source.dtype.bits // 8
    total = max(under.values(), default=0)
    if total > int(limit):
        return f"at least {total} bytes of shared memory per block; the target allows {int(limit)}"
    return None


@functools.lru_cache(maxsize=None)
def _loop_lowering() -> tvm.transform.Pass:
    """TVM's lowering as far as loops over buffers of their own shape, each compacted to what a
    thread or block uses (no blocks, not flattened; built once, applied per config)."""
    return tvm.transform.Sequential([
        s_tir_transform.LowerInitBlock(), s_tir_transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir_transform.ConvertBlocksToOpaque(), s_tir_transform.CompactBufferAllocation(),
        s_tir_transform.LowerOpaqueBlock(),
    ])


@functools.lru_cache(maxsize=None)
def _thread_buffer_lowering() -> tvm.transform.Pass:
    """After ``_loop_lowering``, as far as a thread's buffers are allocated."""
    return tvm.transform.Sequential([tvm.tirx.transform.FlattenBuffer(), s_tir_transform.InjectVirtualThread()])


def _lowered_code_rejected(mod: tvm.IRModule, reads_float16: bool) -> str | None:
    """Why a postprocessed GPU program, lowered once to loops, cannot run or build as it is
    (``_local_memory_over_registers``; ``_float16_gathers`` where it reads float16), or None."""
    try:
        loops = _loop_lowering()(mod)
    except Exception:  # TVM's lowering stops on it: the build says why, as a failed trial
        return None
    return _local_memory_over_registers(loops) or (_float16_gathers(loops) if reads_float16 else None)


def _local_memory_over_registers(loops: tvm.IRModule) -> str | None:
    """Why a GPU program (lowered to loops) cannot keep its threads' own buffers (scope ``local``:
    a multi-level tiling's sums, once per virtual thread) in registers, or None: more 32-bit words
    a thread than ``REGISTERS_PER_THREAD``. Such a buffer lives in local memory (ptxas reports a
    stack frame for it), where every sum is a load and a store; nvcc also takes longest over
    such kernels. The buffers are counted as TVM's lowering allocates them (compacted to a
    thread's region, virtual threads injected), which is what the CUDA source declares."""
    try:
        lowered = _thread_buffer_lowering()(loops)
    except Exception:  # TVM's lowering stops on it: the build says why, as a failed trial
        return None
    words = sum(int(scopes.get("local", 0)) for scopes in calculate_allocated_bytes(lowered).values()) // 4
    if words > REGISTERS_PER_THREAD:
        return (f"{words} 32-bit words of local memory per thread; a thread holds at most {REGISTERS_PER_THREAD} "
                "in registers")
    return None


def _float16_gathers(loops: tvm.IRModule) -> str | None:
    """Why a GPU program (lowered to loops) cannot build, or None: a vectorized loop of 8 or more lanes
    reads float16 values that are not side by side in memory (a tile of a transposed weight copied
    to shared memory). TVM 0.27's CUDA code generator writes 8 such values as one ``make_uint4`` of
    8 arguments, which nvcc refuses, and stops on 16; 2 and 4 lanes build. Each read's addresses are
    evaluated for the loop's lanes with every other variable at 0."""
    analyzer = tvm.sym.Analyzer()
    found: list[str] = []

    def address(load: Any, lane_var: Any, lane: int) -> int:
        def value(var: Any) -> Any:
            if not isinstance(var.ty, tvm.ir.PrimType):
                return var
            return tvm.tirx.IntImm(var.ty.dtype, lane if var.same_as(lane_var) else 0)

        offset = 0
        for index, extent in zip(load.indices, load.source.shape):
            at_lane = analyzer.simplify(tvm_ffi.structural_map(index, [(tvm.tirx.Var, value)]))
            offset = offset * int(extent) + int(at_lane)
        return offset

    def vector_loop(loop: Any) -> None:
        if found or loop.kind != tvm.tirx.ForKind.VECTORIZED or not isinstance(loop.extent, tvm.tirx.IntImm) \
                or loop.extent.value < 8:
            return
        lanes = int(loop.extent.value)

        def read(load: Any) -> None:
            if found or str(load.source.dtype) != "float16" or \
                    not all(isinstance(d, tvm.tirx.IntImm) for d in load.source.shape):
                return
            addresses = [address(load, loop.loop_var, lane) for lane in range(lanes)]
            if len(set(addresses)) > 1 and any(b - a != 1 for a, b in zip(addresses, addresses[1:])):
                found.append(f"{lanes} float16 values of {load.source.name} {addresses[1] - addresses[0]} apart")

        tvm_ffi.structural_walk(loop.body, [(tvm.ir.TensorLoad, read)])

    for func in loops.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, [(tvm.tirx.For, vector_loop)])
    if found:
        return f"a vector load of {found[0]}: TVM's CUDA code generator cannot gather 8 or more float16 values"
    return None


def create_from_primfunc(func: Any, target: Any, name: str = "main", weight: int = 1) -> TraceTask:
    """A task whose knobs are MetaSchedule's design-space decisions for ``func`` on ``target``.

    ``func`` is a ``tvm.tirx.PrimFunc`` (e.g. from ``te.create_prim_func``) or an IRModule with
    one PrimFunc. No template is needed.
    """
    funcs = list(func.functions.values()) if isinstance(func, tvm.IRModule) else [func]
    if len(funcs) != 1 or not isinstance(funcs[0], tvm.tirx.PrimFunc):
        raise AutoTVMError(f"func must be a TIR PrimFunc (e.g. from te.create_prim_func) or an IRModule holding "
                           f"exactly one, got {_what(func)}")
    check("name", name, text())
    check("weight", weight, integer(1))
    return TraceTask(name, func, target, weight)


def _what(value: Any) -> str:
    """A value in a few words for an error message."""
    if isinstance(value, tvm.IRModule):
        return f"an IRModule of {len(value.functions)} functions ({', '.join(type(f).__name__ for f in value.functions.values())})"
    text_ = repr(value)
    return f"{type(value).__name__} {text_[:60]}{'...' if len(text_) > 60 else ''}"
