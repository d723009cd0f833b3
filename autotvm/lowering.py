"""How a tuned function is lowered: TVM's own TIR pipeline, plus two passes for the CPU and one
pass skipped where it only costs build time (``_lowering``).

TVM lowers a buffer a function allocates on the CPU to the stack only under 1 KB
(``LowerTVMBuiltin``); a larger one it takes from the runtime's workspace pool, a call to allocate
and one to free each time its scope runs. The micro-kernels of ``task.x86_bf16`` keep a tile's
float32 sums in such a buffer, one a tile (an AMX tile of 16 rows by 16 columns is 1 KB already),
and after each of those calls LLVM configures AMX's tiles again (``ldtilecfg``).
TVM also writes each float32 -> bfloat16 cast as integer arithmetic (round to nearest even: five
vector operations and a narrowing), where a CPU with AVX512-BF16 has one instruction for it
(``vcvtneps2bf16``, the same rounding with subnormals flushed to zero); ``one_instruction_casts``
hands those casts to LLVM as casts.
``tir_pipeline(target)`` names the pipeline every build here uses (the builder's trials and
``build_program``): on a CPU TVM's with both passes before its host lowering; elsewhere TVM's own.
Imports only TVM and ``env`` (the build workers import it).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi

from .env import cpu_features

KERNEL_ATTR = "pragma_import_llvm"  # the mark task.x86_bf16 sets on loops that carry the micro-kernels' LLVM IR
STACK_BYTES = 16384  # the largest buffer kept on the stack: a tile's sums are at most 8 AMX tiles (8 KB)
PIPELINE = "autotvm-cpu"


def _constant_bytes(buffer: Any) -> int | None:
    size = buffer.dtype.bits * buffer.dtype.lanes // 8
    for extent in buffer.shape:
        if not isinstance(extent, tvm.tirx.IntImm):
            return None
        size *= int(extent)
    return size


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="autotvm.SumsOnStack")
def sums_on_stack(func: Any, mod: Any, ctx: Any) -> Any:
    """In a function that carries micro-kernels (``KERNEL_ATTR``), mark each allocation of a
    constant size up to ``STACK_BYTES`` to stay on the stack (TVM's ``disable_lower_builtin``)."""
    def kernels(attr: Any) -> Any:
        return tvm_ffi.VisitInterrupt() if attr.attr_key == KERNEL_ATTR else None

    if tvm_ffi.structural_walk(func.body, (tvm.tirx.AttrStmt, kernels), order="pre") is None:
        return func

    def on_stack(alloc: Any) -> Any:
        size = _constant_bytes(alloc.buffer)
        if size is None or size > STACK_BYTES:
            return alloc
        return tvm.tirx.AllocBuffer(alloc.buffer, {**alloc.annotations,
                                                   "disable_lower_builtin": tvm.tirx.IntImm("bool", 1)})

    return func.with_body(tvm_ffi.structural_map(func.body, (tvm.tirx.AllocBuffer, on_stack)))


def _uint(expr: Any, value: int) -> bool:
    expr = expr.value if isinstance(expr, tvm.tirx.Broadcast) else expr
    return isinstance(expr, tvm.tirx.IntImm) and int(expr.value) == value


def _rounded(cast: Any) -> Any:
    """X where ``cast`` is TVM's legalized float32 -> bfloat16 cast of X, as it writes it:
    ``uint16((bits + ((bits >> 16) & 1) + 0x7fff) >> 16)``, ``bits`` X's reinterpreted as uint32;
    else None."""
    dtype = cast.ty.dtype
    if dtype.type_code != 1 or dtype.bits != 16 or not isinstance(cast.value, tvm.tirx.RShift):
        return None
    shifted = cast.value
    total = shifted.a
    if not _uint(shifted.b, 16) or not isinstance(total, tvm.tirx.Add) or not isinstance(total.b, tvm.tirx.Add):
        return None
    bits, (parity, half) = total.a, (total.b.a, total.b.b)
    if not (isinstance(bits, tvm.ir.expr.Call) and bits.op.same_as(tvm.ir.Op.get("tirx.reinterpret"))):
        return None
    x = bits.args[0]
    if x.ty.dtype.type_code != 2 or x.ty.dtype.bits != 32 or not _uint(half, 0x7FFF):
        return None
    if not (isinstance(parity, tvm.tirx.BitwiseAnd) and _uint(parity.b, 1) and isinstance(parity.a, tvm.tirx.RShift)
            and _uint(parity.a.b, 16) and tvm_ffi.structural_equal(parity.a.a, bits)):
        return None
    return x


def _cast_ir(lanes: int) -> str:
    """LLVM IR of ``autotvm_bf16_<lanes>(<lanes x float>) -> <lanes x i16>``: LLVM's cast to
    bfloat16, its bits."""
    f32, bf16, i16 = (f"<{lanes} x {t}>" for t in ("float", "bfloat", "i16"))
    return "\n".join([f"define {i16} @autotvm_bf16_{lanes}({f32} %x) #0 {{",
                      f"  %b = fptrunc {f32} %x to {bf16}", f"  %i = bitcast {bf16} %b to {i16}",
                      f"  ret {i16} %i", "}"])


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="autotvm.OneInstructionCasts")
def one_instruction_casts(func: Any, mod: Any, ctx: Any) -> Any:
    """For a CPU with AVX512-BF16: each vector float32 -> bfloat16 cast that TVM's legalization
    wrote as integer rounding (``_rounded``) becomes a call of an LLVM function that casts, which
    the function carries (``KERNEL_ATTR``) and LLVM inlines as ``vcvtneps2bf16``. Scalar casts keep
    TVM's form (LLVM's loop vectorizer does better with it)."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "llvm" or "avx512bf16" not in (cpu_features(target) or ()):
        return func
    widths = set()

    def one_instruction(cast: Any) -> Any:
        x = _rounded(cast)
        lanes = cast.ty.dtype.lanes
        if x is None or lanes == 1:
            return cast
        widths.add(lanes)
        return tvm.tirx.call_extern(str(cast.ty.dtype), f"autotvm_bf16_{lanes}", x)

    body = tvm_ffi.structural_map(func.body, (tvm.tirx.Cast, one_instruction))
    if not widths:
        return func
    ir = [_cast_ir(lanes) for lanes in sorted(widths)]
    ir.append('attributes #0 = { alwaysinline nounwind "target-features"="+avx512f,+avx512bf16" }')
    return func.with_body(tvm.tirx.AttrStmt(tvm.tirx.const(0, "int32"), KERNEL_ATTR, tvm.ir.StringImm("\n".join(ir)),
                                            body))


# the blocks of a Winograd transform (task.winograd), which MetaSchedule's rules unroll whole
UNROLLED_TRANSFORMS = ("conv2d_nhwc_winograd_data_pack", "conv2d_nhwc_winograd_inverse")
RENORMALIZE = "s_tir.RenormalizeSplitPattern"


def _unrolled_transform(func: Any) -> bool:
    def transform(block: Any) -> Any:
        rule = block.annotations.get("schedule_rule")
        return tvm_ffi.VisitInterrupt() if rule is not None and str(rule) in UNROLLED_TRANSFORMS else None

    return tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlock, transform), order="pre") is not None


def _lowering(lower: Any) -> Any:
    """TVM's lowering, which skips ``RENORMALIZE`` on a module whose every function holds a
    Winograd transform: a trial of a Winograd task. Unrolled, the transform is a term per pair of
    entries of a constant matrix, and the pass (index arithmetic for GPUs) spends a good part of
    the build on them, where it mostly leaves the assembly as it is and otherwise changes the
    kernel's time by no more than timing noise (docs/findings.md, 7). A build that holds other
    functions too (a model's) keeps the pass."""

    @tvm.transform.module_pass(opt_level=0, name="autotvm.Lower")
    def lowered(mod: Any, ctx: Any) -> Any:
        funcs = [func for _, func in mod.functions_items() if isinstance(func, tvm.tirx.PrimFunc)]
        if not funcs or not all(_unrolled_transform(func) for func in funcs):
            return lower(mod)
        with tvm.transform.PassContext(opt_level=ctx.opt_level, config=ctx.config, instruments=list(ctx.instruments),
                                       disabled_pass=[*ctx.disabled_pass, RENORMALIZE]):
            return lower(mod)

    return lowered


def _cpu_pipeline() -> tuple:
    lower, host, device = tvm.tirx.get_tir_pipeline("default")
    # the casts' LLVM carries KERNEL_ATTR too: sums_on_stack, which looks for the kernels by it, goes first
    return _lowering(lower), lambda: tvm.transform.Sequential([sums_on_stack, one_instruction_casts, host()]), device


tvm.tirx.compilation_pipeline.register_tir_pipeline(PIPELINE, _cpu_pipeline)


def tir_pipeline(target: Any) -> str:
    """The TIR pipeline to build for ``target`` with (``tvm.compile``'s and ``relax.build``'s
    ``tir_pipeline``): ``PIPELINE`` for a CPU, TVM's default for a GPU."""
    return PIPELINE if target.kind.name == "llvm" else "default"
