"""A bfloat16 matmul on x86 CPUs with AVX512-BF16: a register-blocked micro-kernel around
``vdpbf16ps`` (16 float32 lanes, each += the dot product of a pair of bfloat16), as a TVM tensor
intrinsic.

TVM 0.27 legalizes bfloat16 to float32 arithmetic and uint16 storage before LLVM sees it, and
has no LLVM ``bfloat`` vector type to pass to ``llvm.x86.avx512bf16.dpbf16ps.512``; so the
intrinsic's implementation calls a small function written in LLVM IR, which the kernel carries
along (``pragma_import_llvm``) and LLVM inlines. The micro-kernel keeps an ``mr`` x ``16 nv``
block of C in registers over ``kt`` pairs of K, reading A's pairs broadcast and B packed as
``(K/2, N, 2)``: the two bfloat16 of a pair side by side, the layout ``vdpbf16ps`` reads (a
weight's packing, done once). C accumulates in float32.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import te
from tvm.script import tirx as T

from ..checks import AutoTVMError
from .task import get_config, template

PRAGMA = "pragma_import_llvm"


def cpu_has_bf16(target: Any) -> bool:
    """Whether an LLVM target's CPU has AVX512-BF16 (``vdpbf16ps``)."""
    from tvm.target import codegen

    try:
        return "avx512bf16" in set(codegen.llvm_get_cpu_features(target))
    except Exception:
        return False


def _kernel_ir(name: str, mr: int, nv: int) -> str:
    """LLVM IR of ``name(c, c_offset, ldc, a, a_offset, lda, b, b_offset, ldb, kt)``: C[mr, 16 nv]
    (float32, row stride ldc) += A[mr, 2 kt] (bfloat16, row stride lda) x B[kt, 16 nv, 2]
    (bfloat16 pairs, stride ldb per pair of K), accumulators in registers across the K loop."""
    lines = [f"define void @{name}(ptr %c0, i64 %co, i64 %ldc, ptr %a0, i64 %ao, i64 %lda, ptr %b0, i64 %bo, "
             "i64 %ldb, i64 %kt) #0 {", "entry:",
             "  %c = getelementptr float, ptr %c0, i64 %co",
             "  %a = getelementptr i16, ptr %a0, i64 %ao",
             "  %b = getelementptr i16, ptr %b0, i64 %bo"]
    for r in range(mr):
        lines += [f"  %crow{r} = mul i64 %ldc, {r}", f"  %arow{r} = mul i64 %lda, {r}",
                  f"  %ap{r} = getelementptr i16, ptr %a, i64 %arow{r}"]
        for j in range(nv):
            lines += [f"  %coff{r}_{j} = add i64 %crow{r}, {16 * j}",
                      f"  %cp{r}_{j} = getelementptr float, ptr %c, i64 %coff{r}_{j}",
                      f"  %init{r}_{j} = load <16 x float>, ptr %cp{r}_{j}, align 4"]
    lines += ["  br label %loop", "loop:", "  %k = phi i64 [0, %entry], [%k1, %loop]"]
    lines += [f"  %acc{r}_{j} = phi <16 x float> [%init{r}_{j}, %entry], [%new{r}_{j}, %loop]"
              for r in range(mr) for j in range(nv)]
    lines.append("  %kb = mul i64 %k, %ldb")
    for j in range(nv):
        lines += [f"  %boff{j} = add i64 %kb, {32 * j}", f"  %bp{j} = getelementptr i16, ptr %b, i64 %boff{j}",
                  f"  %bv{j} = load <32 x bfloat>, ptr %bp{j}, align 2"]
    lines.append("  %k2 = shl i64 %k, 1")
    for r in range(mr):
        lines += [f"  %aq{r} = getelementptr i16, ptr %ap{r}, i64 %k2",
                  f"  %apair{r} = load i32, ptr %aq{r}, align 2",
                  f"  %ains{r} = insertelement <16 x i32> poison, i32 %apair{r}, i32 0",
                  f"  %abc{r} = shufflevector <16 x i32> %ains{r}, <16 x i32> poison, <16 x i32> zeroinitializer",
                  f"  %av{r} = bitcast <16 x i32> %abc{r} to <32 x bfloat>"]
        lines += [f"  %new{r}_{j} = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc{r}_{j}, "
                  f"<32 x bfloat> %av{r}, <32 x bfloat> %bv{j})" for j in range(nv)]
    lines += ["  %k1 = add i64 %k, 1", "  %done = icmp eq i64 %k1, %kt", "  br i1 %done, label %exit, label %loop",
              "exit:"]
    lines += [f"  store <16 x float> %new{r}_{j}, ptr %cp{r}_{j}, align 4" for r in range(mr) for j in range(nv)]
    lines += ["  ret void", "}"]
    return "\n".join(lines)


_DECLARATIONS = """declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
attributes #0 = { alwaysinline nounwind "target-features"="+avx512f,+avx512bf16" }
"""


def intrinsic(mr: int, nv: int, kt: int) -> tuple[str, str]:
    """Register the micro-kernel C[mr, 16 nv] += A[mr, 2 kt] B[kt, 16 nv, 2] as a tensor intrinsic;
    returns (its name, the LLVM IR its kernels must carry: ``with_kernel_ir``)."""
    if mr * nv > 28:  # 32 vector registers: the accumulators, nv B vectors and A's broadcast
        raise AutoTVMError(f"bf16 micro-kernel {mr}x{nv}: more accumulators than AVX-512 has registers")
    name, n = f"tvm_bf16_gemm_{mr}x{nv}", 16 * nv

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (mr, 2 * kt), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (kt, n, 2), "bfloat16", offset_factor=1, strides=[T.int32(), 2, 1])
        C = T.match_buffer(c, (mr, n), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:mr, 0:n], A[0:mr, 0:2 * kt], B[0:kt, 0:n, 0:2])
            T.writes(C[0:mr, 0:n])
            for i, j, k, p in T.grid(mr, n, kt, 2):
                with T.sblock("update"):
                    vi, vj, vk, vp = T.axis.remap("SSRR", [i, j, k, p])
                    C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk * 2 + vp], "float32") * T.cast(B[vk, vj, vp], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (mr, 2 * kt), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (kt, n, 2), "bfloat16", offset_factor=1, strides=[T.int32(), 2, 1])
        C = T.match_buffer(c, (mr, n), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:mr, 0:n], A[0:mr, 0:2 * kt], B[0:kt, 0:n, 0:2])
            T.writes(C[0:mr, 0:n])
            T.evaluate(T.call_extern("int32", name, C.data, T.Cast("int64", C.elem_offset), T.Cast("int64", C.strides[0]),
                                     A.data, T.Cast("int64", A.elem_offset), T.Cast("int64", A.strides[0]),
                                     B.data, T.Cast("int64", B.elem_offset), T.Cast("int64", B.strides[0]),
                                     T.int64(kt)))

    intrin = f"avx512bf16_gemm_{mr}x{nv}x{kt}"
    tvm.s_tir.TensorIntrin.register(intrin, desc, impl, override=True)
    return intrin, _kernel_ir(name, mr, nv) + "\n" + _DECLARATIONS


def matmul(m: int, k: int, n: int) -> Any:
    """C[m, n] (float32) = A[m, k] (bfloat16) x B, B given packed as (k/2, n, 2) bfloat16 pairs."""
    if k % 2:
        raise AutoTVMError(f"a bfloat16 matmul reads K in pairs: K must be even, got {k}")
    a = te.placeholder((m, k), "bfloat16", name="A")
    b = te.placeholder((k // 2, n, 2), "bfloat16", name="B")
    kk, kp = te.reduce_axis((0, k // 2), name="kk"), te.reduce_axis((0, 2), name="kp")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, kk * 2 + kp].astype("float32") * b[kk, j, kp].astype("float32"),
                                               axis=[kk, kp]), name="C")
    return te.create_prim_func([a, b, c])


def schedule(func: Any, mr: int, nv: int, kt: int) -> tvm.s_tir.Schedule:
    """``matmul``'s function tiled for the micro-kernel: rows by ``mr``, columns by ``16 nv``, K by
    ``kt`` pairs; the row-and-column tiles run in parallel on the cores, and the outer loop carries
    the micro-kernel's LLVM IR (a ``pragma_import_llvm`` the code generator links in)."""
    intrin, ir = intrinsic(mr, nv, kt)
    sch = tvm.s_tir.Schedule(func)
    block = sch.get_sblock("C")
    i, j, k, p = sch.get_loops(block)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, 16 * nv])
    ko, ki = sch.split(k, [None, kt])
    sch.reorder(io, jo, ko, ii, ji, ki, p)
    outer = sch.fuse(io, jo)
    sch.parallel(outer)
    init = sch.decompose_reduction(block, ko)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(ii, intrin)
    sch.annotate(outer, PRAGMA, ir)
    return sch


def tiles(m: int, k: int, n: int) -> list[tuple[int, int, int]]:
    """The (mr, nv, kt) that tile an m x k x n matmul exactly, with at most 28 accumulators; the
    most accumulators and the longest K loop first (the first is the untuned build's)."""
    found = [(mr, nv, kt) for mr in (2, 4, 6, 8, 12, 14) for nv in (1, 2, 3, 4)
             for kt in (16, 32, 48, 64, 96, 128, 192, 256) if mr * nv <= 28 and m % mr == 0 and n % (16 * nv) == 0
             and (k // 2) % kt == 0]
    return sorted(found, key=lambda tile: (-tile[0] * tile[1], -tile[2]))


def fits(m: int, k: int, n: int) -> bool:
    """Whether the micro-kernel can compute an m x k x n matmul (K in pairs, N in vectors of 16)."""
    return k % 2 == 0 and bool(tiles(m, k, n))


TEMPLATE = "x86/matmul_bf16"


@template(TEMPLATE)
def matmul_template(m: int, k: int, n: int) -> tuple[Any, list]:
    """The bfloat16 matmul as an AutoTVM template: its knob is the micro-kernel's tile (rows,
    columns, pairs of K per call), so every tuner searches them."""
    cfg = get_config()
    cfg.define_knob("tile", [f"{mr}x{nv}x{kt}" for mr, nv, kt in tiles(m, k, n)])
    cfg.add_flop(2.0 * m * k * n)
    mr, nv, kt = (int(part) for part in cfg["tile"].val.split("x"))
    return schedule(matmul(m, k, n), mr, nv, kt), []
