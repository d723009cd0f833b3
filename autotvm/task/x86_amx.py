"""The bfloat16 micro-kernel on AMX's tiles (Intel Xeon from Sapphire Rapids on), for the templates
of ``x86_bf16`` (its ``intrinsic(..., amx=True)``): the same product, C[mr, 16 nv] (float32) +=
A[mr, 2 kt] x B[kt, 16 nv, 2], B packed in pairs of K as ``vdpbf16ps`` reads it, which is also the
layout ``tdpbf16ps`` reads.

``tdpbf16ps`` multiplies a tile of A (up to 16 rows by 16 pairs of K, 64 bytes a row) by a tile of
B (16 pairs of K by 16 columns) into a tile of 16 x 16 float32 sums. The kernel keeps ``mt x nv``
such sum tiles in the 8 tile registers (``mr`` rows split into ``mt`` tiles of ``mr / mt`` rows),
beside ``nv`` tiles of B and one of A, and walks ``kt`` pairs of K in steps of 16 (the last one
shorter where 16 does not divide them), unrolled. It is written in LLVM IR with LLVM's AMX
intrinsics that carry their tile's shape (``*.internal``), so LLVM allocates the tile registers
and configures them (``ldtilecfg``) itself.

Linux lets a process use AMX's tile state only once it has asked for it
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); the kernel asks, once a process, so a
built library runs in any process that loads it.
"""

from __future__ import annotations

import functools
import platform
import sys

from ..env import cpu_features, make_target

ROWS, STEP, REGISTERS = 16, 16, 8  # a tile's most rows, pairs of K a step, tile registers


@functools.lru_cache(maxsize=None)
def refused_here() -> bool:
    """Whether this machine's CPU has AMX but the process cannot have its tile state (Linux before
    5.16, or not Linux), so that AMX's instructions would stop the process that runs them: asks
    once, as the kernels do."""
    if "amx-bf16" not in (cpu_features(make_target("llvm")) or ()):
        return False
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return True
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18) != 0  # arch_prctl(ARCH_REQ_XCOMP_PERM)


def split_rows(mr: int) -> tuple[int, int] | None:
    """(tiles, rows a tile) for ``mr`` rows: the fewest tiles of equal rows, or None where none."""
    mt = -(-mr // ROWS)
    return (mt, mr // mt) if mr > 0 and mr % mt == 0 else None


def fits(mr: int, nv: int, kt: int) -> bool:
    """Whether an mr x 16 nv block over kt pairs of K fits the tile registers: the sum tiles, nv of
    B and one of A; kt in steps of 16 pairs, where a last shorter step (72 pairs: 4 x 16 + 8) reads
    tiles of its own shape, nv of B and one of A more."""
    rows = split_rows(mr)
    shorter = nv + 1 if kt > STEP and kt % STEP else 0
    return rows is not None and nv >= 1 and kt > 0 and rows[0] * nv + nv + 1 + shorter <= REGISTERS


def kernel_ir(name: str, mr: int, nv: int, kt: int, taps: int = 1, panels: bool = False,
              zeroed: bool = False) -> str:
    """LLVM IR of ``name(c, c_offset, ldc, a, a_offset, lda, b, b_offset, ldb, kt)``, the same
    signature as ``x86_bf16``'s kernel: the sum tiles loaded from C, kt pairs of K added in steps
    of 16, stored back; with the declarations it needs. With ``panels`` each 16 columns of B are a
    panel (``ldb`` apart), its pairs of K 64 bytes apart. With ``taps`` > 1 the kernel adds the
    products of ``taps`` pairs of A and B, the next ``sa`` and ``sb`` elements on (two more
    arguments): a convolution's filter rows, summed while the sums stay in the tiles. With
    ``zeroed`` (a tile whose whole K is one call) the sums start from zeroed tiles, not from C."""
    mt, rows = split_rows(mr)
    steps = [(r, s, min(STEP, kt - s)) for r in range(taps) for s in range(0, kt, STEP)]
    lines = [f"define void @{name}(ptr %c0, i64 %co, i64 %ldc, ptr %a0, i64 %ao, i64 %lda, ptr %b0, i64 %bo, "
             f"i64 %ldb, i64 %kt{', i64 %sa, i64 %sb' if taps > 1 else ''}) #1 {{", "entry:",
             "  call void @tvm_amx_permit()",
             "  %c = getelementptr float, ptr %c0, i64 %co",
             "  %a = getelementptr i16, ptr %a0, i64 %ao",
             "  %b = getelementptr i16, ptr %b0, i64 %bo",
             "  %cs = shl i64 %ldc, 2", "  %as = shl i64 %lda, 1", "  %bs = shl i64 %ldb, 1"]

    def offset(name: str, base: str, stride: str, row: int, column: int, kind: str, tap: str = "",
               r: int = 0) -> list[str]:
        lines = [f"  %{name}.r = mul i64 {stride}, {row}", f"  %{name}.x = add i64 %{name}.r, {column}"]
        if r:  # the r-th tap: r times its stride further on
            lines += [f"  %{name}.t = mul i64 {tap}, {r}", f"  %{name}.y = add i64 %{name}.x, %{name}.t"]
        return lines + [f"  %{name} = getelementptr {kind}, ptr {base}, i64 %{name}.{'y' if r else 'x'}"]

    for i in range(mt):
        for j in range(nv):
            lines += offset(f"cp{i}_{j}", "%c", "%ldc", i * rows, 16 * j, "float")
            lines.append(f"  %acc{i}_{j}_0 = call x86_amx @llvm.x86.tilezero.internal(i16 {rows}, i16 64)" if zeroed
                         else f"  %acc{i}_{j}_0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 {rows}, i16 64, "
                         f"ptr %cp{i}_{j}, i64 %cs)")
    for s, (r, first, pairs) in enumerate(steps):
        for j in range(nv):
            row, column = (j, 32 * first) if panels else (first, 32 * j)
            lines += offset(f"bp{s}_{j}", "%b", "%ldb", row, column, "i16", "%sb", r)
            lines.append(f"  %bt{s}_{j} = call x86_amx @llvm.x86.tileloadd64.internal(i16 {pairs}, i16 64, "
                         f"ptr %bp{s}_{j}, i64 {64 if panels else '%bs'})")
        for i in range(mt):
            lines += offset(f"ap{s}_{i}", "%a", "%lda", i * rows, 2 * first, "i16", "%sa", r)
            lines.append(f"  %at{s}_{i} = call x86_amx @llvm.x86.tileloadd64.internal(i16 {rows}, i16 {4 * pairs}, "
                         f"ptr %ap{s}_{i}, i64 %as)")
            lines += [f"  %acc{i}_{j}_{s + 1} = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 {rows}, i16 64, "
                      f"i16 {4 * pairs}, x86_amx %acc{i}_{j}_{s}, x86_amx %at{s}_{i}, x86_amx %bt{s}_{j})"
                      for j in range(nv)]
    lines += [f"  call void @llvm.x86.tilestored64.internal(i16 {rows}, i16 64, ptr %cp{i}_{j}, i64 %cs, "
              f"x86_amx %acc{i}_{j}_{len(steps)})" for i in range(mt) for j in range(nv)]
    return "\n".join([*lines, "  ret void", "}", _DECLARATIONS])


def zero_ir(name: str, mr: int, nv: int) -> str:
    """LLVM IR of ``name(c, c_offset, ldc)``: C[mr, 16 nv] (float32) = 0, from zeroed tiles. A
    tile's sums start there before the kernel's first call; TVM's own loop of zeros would become a
    call of ``memset``, after which LLVM configures the tiles again (``ldtilecfg``) on every tile."""
    mt, rows = split_rows(mr)
    lines = [f"define linkonce_odr void @{name}(ptr %c0, i64 %co, i64 %ldc) #1 {{", "entry:",
             "  call void @tvm_amx_permit()", "  %c = getelementptr float, ptr %c0, i64 %co", "  %cs = shl i64 %ldc, 2",
             f"  %z = call x86_amx @llvm.x86.tilezero.internal(i16 {rows}, i16 64)"]
    for i in range(mt):
        for j in range(nv):
            lines += [f"  %r{i}_{j} = mul i64 %ldc, {i * rows}", f"  %x{i}_{j} = add i64 %r{i}_{j}, {16 * j}",
                      f"  %p{i}_{j} = getelementptr float, ptr %c, i64 %x{i}_{j}",
                      f"  call void @llvm.x86.tilestored64.internal(i16 {rows}, i16 64, ptr %p{i}_{j}, i64 %cs, x86_amx %z)"]
    return "\n".join([*lines, "  ret void", "}"])


# tvm_amx_permit: arch_prctl (syscall 158) ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA
# (18), the first time a process calls a kernel; asking twice (two threads at once) is harmless
_DECLARATIONS = """@tvm_amx_permitted = linkonce_odr global i32 0
define linkonce_odr void @tvm_amx_permit() #2 {
entry:
  %ok = load i32, ptr @tvm_amx_permitted, align 4
  %asked = icmp ne i32 %ok, 0
  br i1 %asked, label %done, label %ask
ask:
  %r = call i64 asm sideeffect "syscall", "={rax},{rax},{rdi},{rsi},~{rcx},~{r11},~{memory}"(i64 158, i64 4131, i64 18)
  store i32 1, ptr @tvm_amx_permitted, align 4
  br label %done
done:
  ret void
}
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)
declare x86_amx @llvm.x86.tdpbf16ps.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
attributes #1 = { alwaysinline nounwind "target-features"="+amx-tile,+amx-bf16" }
attributes #2 = { noinline nounwind }
"""
