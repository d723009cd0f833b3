"""bfloat16 matmuls and convolutions on x86 CPUs with AVX512-BF16: a register-blocked
micro-kernel around ``vdpbf16ps`` (16 float32 lanes, each += the dot product of a pair of
bfloat16), as a TVM tensor intrinsic, and the two templates that use it.

TVM 0.27 legalizes bfloat16 to float32 arithmetic and uint16 storage before LLVM sees it, and
has no LLVM ``bfloat`` vector type to pass to ``llvm.x86.avx512bf16.dpbf16ps.512``; so the
intrinsic's implementation calls a small function written in LLVM IR, which the kernel carries
along (``pragma_import_llvm``) and LLVM inlines. The micro-kernel keeps an ``mr`` x ``16 nv``
block of C in registers over ``kt`` pairs of K, reading A's pairs broadcast and B's in pairs: the
two bfloat16 of a pair side by side, the layout ``vdpbf16ps`` reads. A matmul's B is packed in
panels of 16 columns, ``(N/16, K/2, 16, 2)`` (``pack_matmul_weight``; a weight's packing, done
once), so that a tile reads each 16 columns of B over K from contiguous memory, which the CPU
fetches ahead (a weight comes from memory on every run of a model). C accumulates in float32.

A convolution (NHWC) is the same product, one filter tap at a time: for a tap, ``mr`` adjacent
output pixels of a row read ``mr`` input pixels ``stride`` apart, a matrix with row stride
``stride * C`` once the padded input is laid out as ``(H, stride, W / stride, C)``. Both
templates take what follows the product into the same kernel (``EPILOGUES``: a bias, a ReLU or
GELU, a residual), applied to each tile while it is in cache.

On a CPU with AMX (``cpu_has_amx_bf16``) the templates' tiles are those of the same product on
AMX's tile registers (``x86_amx``), B in the same pairs: the target in scope when a template runs
(``tvm.target.Target.current()``, as in AutoTVM) picks which. There a convolution's knob ``taps``
also chooses whether one call of the kernel sums one of the filter's rows or all of them (its
sums stay in the tiles across them). An AMX instruction costs the same for 7 rows as for 16, so on
small maps a stride-1 convolution's tiles may also run flat (``Conv2D.flat``): 16 to 64 pixels
taken in turn through the padded input's rows, whose last ``kw - 1`` pixels are computed and
dropped.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import tvm
from tvm import te
from tvm.script import tirx as T

from ..checks import AutoTVMError
from ..env import cpu_features
from ..lowering import KERNEL_ATTR
from . import x86_amx
from .task import get_config, template


def cpu_has_bf16(target: Any) -> bool:
    """Whether an LLVM target's CPU has AVX512-BF16 (``vdpbf16ps``)."""
    return "avx512bf16" in (cpu_features(target) or ())


def cpu_has_amx_bf16(target: Any) -> bool:
    """Whether an LLVM target's CPU has AMX's bfloat16 tiles (``tdpbf16ps``), where the templates
    compute on them (``x86_amx``)."""
    return "amx-bf16" in (cpu_features(target) or ())


def _kernel_ir(name: str, mr: int, nv: int, panels: bool = False, zeroed: bool = False) -> str:
    """LLVM IR of ``name(c, c_offset, ldc, a, a_offset, lda, b, b_offset, ldb, kt)``: C[mr, 16 nv]
    (float32, row stride ldc) += A[mr, 2 kt] (bfloat16, row stride lda) x B[kt, 16 nv, 2]
    (bfloat16 pairs, stride ldb per pair of K; with ``panels``, B[nv, kt, 16, 2], stride ldb per
    panel of 16 columns), accumulators in registers across the K loop; with ``zeroed`` they start
    at zero, not from C (a tile whose whole K is one call)."""
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
                      f"  %cp{r}_{j} = getelementptr float, ptr %c, i64 %coff{r}_{j}"]
            lines += [] if zeroed else [f"  %init{r}_{j} = load <16 x float>, ptr %cp{r}_{j}, align 4"]
    lines += ["  br label %loop", "loop:", "  %k = phi i64 [0, %entry], [%k1, %loop]"]
    lines += [f"  %acc{r}_{j} = phi <16 x float> [{'zeroinitializer' if zeroed else f'%init{r}_{j}'}, %entry], "
              f"[%new{r}_{j}, %loop]" for r in range(mr) for j in range(nv)]
    lines.append("  %kb = shl i64 %k, 5" if panels else "  %kb = mul i64 %k, %ldb")
    for j in range(nv):
        lines += [f"  %bj{j} = mul i64 %ldb, {j}" if panels else f"  %bj{j} = add i64 0, {32 * j}",
                  f"  %boff{j} = add i64 %kb, %bj{j}", f"  %bp{j} = getelementptr i16, ptr %b, i64 %boff{j}",
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


def _fits_registers(mr: int, nv: int) -> bool:
    """32 vector registers hold the mr x nv accumulators, nv vectors of B and A's broadcast."""
    return mr * nv + nv + 1 <= 32


class Tile(NamedTuple):
    """A micro-kernel's block: ``mr`` rows by ``16 nv`` columns of C over ``kt`` pairs of K, on
    AVX-512's registers or AMX's tiles; as a knob's value "8x3x64" or "amx-32x2x64"."""

    mr: int
    nv: int
    kt: int
    amx: bool = False

    def __str__(self) -> str:
        return ("amx-" if self.amx else "") + f"{self.mr}x{self.nv}x{self.kt}"

    @classmethod
    def parse(cls, value: str) -> "Tile":
        amx = value.startswith("amx-")
        mr, nv, kt = (int(part) for part in value.removeprefix("amx-").split("x"))
        return cls(mr, nv, kt, amx)


@functools.lru_cache(maxsize=None)  # once per shape and process: TVMScript parses slowly, and a tune instantiates often
def intrinsic(mr: int, nv: int, kt: int, amx: bool = False, taps: int = 1, width: int = 0,
              panels: bool = False, zeroed: bool = False) -> tuple[str, str]:
    """Register the micro-kernel C[mr, 16 nv] += A[mr, 2 kt] B[kt, 16 nv, 2] (on AMX's tiles if
    ``amx``) as a tensor intrinsic; returns (its name, the LLVM IR its kernels must carry). With
    ``panels`` B is read as a matmul's, ``nv`` panels of 16 columns (``pack_matmul_weight``). With
    ``taps`` > 1 (AMX's only, ``_taps_intrinsic``) it sums a convolution's filter rows, ``width``
    pixels apart where its pixels run flat (``Conv2D.flat``). With ``zeroed`` its sums start at
    zero, not from C: for a tile whose whole K is this one call, C's zeros never written
    (``_zero_intrinsic``'s ``skip``)."""
    if amx and not x86_amx.fits(mr, nv, kt):
        raise AutoTVMError(f"AMX bf16 micro-kernel {mr}x{nv}x{kt}: more tiles than AMX's 8 registers, or rows not "
                           "in equal tiles of at most 16")
    if taps > 1:
        if not amx:
            raise AutoTVMError("only AMX's micro-kernel sums a convolution's filter rows in one call (taps > 1)")
        return _taps_intrinsic(mr, nv, kt, taps, width, zeroed)
    if not amx and not _fits_registers(mr, nv):
        raise AutoTVMError(f"bf16 micro-kernel {mr}x{nv}: more accumulators than AVX-512 has registers")
    name, n = (f"tvm_amx_bf16_gemm_{mr}x{nv}x{kt}" if amx else f"tvm_bf16_gemm_{mr}x{nv}"), 16 * nv
    name += "_panels" * panels + "_zeroed" * zeroed
    # B's region and where pair vk of column vj is in it: (kt, 16 nv, 2), or panels (nv, kt, 16, 2)
    b_shape, b_strides = ((nv, kt, 16, 2), [T.int32(), 32, 2, 1]) if panels else ((kt, n, 2), [T.int32(), 2, 1])
    b_all = tuple(slice(0, d) for d in b_shape)

    def b_at(k: Any, j: Any, p: Any) -> tuple:
        return (j // 16, k, j % 16, p) if panels else (k, j, p)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (mr, 2 * kt), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, b_shape, "bfloat16", offset_factor=1, strides=b_strides)
        C = T.match_buffer(c, (mr, n), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:mr, 0:n], A[0:mr, 0:2 * kt], B[b_all])
            T.writes(C[0:mr, 0:n])
            for i, j, k, p in T.grid(mr, n, kt, 2):
                with T.sblock("update"):
                    vi, vj, vk, vp = T.axis.remap("SSRR", [i, j, k, p])
                    C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk * 2 + vp], "float32") * \
                        T.cast(B[b_at(vk, vj, vp)], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (mr, 2 * kt), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, b_shape, "bfloat16", offset_factor=1, strides=b_strides)
        C = T.match_buffer(c, (mr, n), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:mr, 0:n], A[0:mr, 0:2 * kt], B[b_all])
            T.writes(C[0:mr, 0:n])
            T.evaluate(T.call_extern("int32", name, C.data, T.Cast("int64", C.elem_offset), T.Cast("int64", C.strides[0]),
                                     A.data, T.Cast("int64", A.elem_offset), T.Cast("int64", A.strides[0]),
                                     B.data, T.Cast("int64", B.elem_offset), T.Cast("int64", B.strides[0]),
                                     T.int64(kt)))

    intrin = f"{'amx' if amx else 'avx512'}bf16_gemm_{mr}x{nv}x{kt}" + "_panels" * panels + "_zeroed" * zeroed
    tvm.s_tir.TensorIntrin.register(intrin, desc, impl, override=True)
    return intrin, (x86_amx.kernel_ir(name, mr, nv, kt, panels=panels, zeroed=zeroed) if amx
                    else _kernel_ir(name, mr, nv, panels, zeroed) + "\n" + _DECLARATIONS)


def _taps_intrinsic(mr: int, nv: int, kt: int, taps: int, width: int = 0, zeroed: bool = False) -> tuple[str, str]:
    """The AMX micro-kernel over ``taps`` filter rows of ``conv2d``: C[mr, 16 nv] += the sum over r
    of A[r, mr, 2 kt] B[r, kt, 16 nv, 2], A's rows of the padded input P (its unit axis the
    column phase) and B's of the weight W (its unit axis the filter column), so that the sums
    stay in the tiles across the filter's rows. Where the pixels run flat (``width``, the padded
    row's pixels), filter row r's A starts ``r * width`` pixels on in one flat matrix of P."""
    name, n, any_, flat = f"tvm_amx_bf16_conv_{taps}x{mr}x{nv}x{kt}" + "_zeroed" * zeroed, 16 * nv, T.int32, width > 0
    # A's region: taps matrices of mr pixels (rows), or one flat run that holds all taps' pixels
    a_shape = (1, 1, (taps - 1) * width + mr, 2 * kt) if flat else (taps, 1, mr, 2 * kt)

    def a_at(r: Any, i: Any, k: Any) -> tuple:
        return (0, 0, r * width + i, k) if flat else (r, 0, i, k)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, a_shape, "bfloat16", offset_factor=1, strides=[any_(), any_(), any_(), 1])
        B = T.match_buffer(b, (taps, 1, kt, n, 2), "bfloat16", offset_factor=1, strides=[any_(), any_(), any_(), 2, 1])
        C = T.match_buffer(c, (mr, n), "float32", offset_factor=1, strides=[any_(), 1])
        with T.sblock("root"):
            T.reads(C[0:mr, 0:n], A[0:a_shape[0], 0:1, 0:a_shape[2], 0:2 * kt], B[0:taps, 0:1, 0:kt, 0:n, 0:2])
            T.writes(C[0:mr, 0:n])
            for r, i, j, k, p in T.grid(taps, mr, n, kt, 2):
                with T.sblock("update"):
                    vi, vj, vr, vk, vp = T.axis.remap("SSRRR", [i, j, r, k, p])  # the convolution's order of axes
                    C[vi, vj] = C[vi, vj] + T.cast(A[a_at(vr, vi, vk * 2 + vp)], "float32") * \
                        T.cast(B[vr, 0, vk, vj, vp], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, a_shape, "bfloat16", offset_factor=1, strides=[any_(), any_(), any_(), 1])
        B = T.match_buffer(b, (taps, 1, kt, n, 2), "bfloat16", offset_factor=1, strides=[any_(), any_(), any_(), 2, 1])
        C = T.match_buffer(c, (mr, n), "float32", offset_factor=1, strides=[any_(), 1])
        with T.sblock("root"):
            T.reads(C[0:mr, 0:n], A[0:a_shape[0], 0:1, 0:a_shape[2], 0:2 * kt], B[0:taps, 0:1, 0:kt, 0:n, 0:2])
            T.writes(C[0:mr, 0:n])
            T.evaluate(T.call_extern("int32", name, C.data, T.Cast("int64", C.elem_offset), T.Cast("int64", C.strides[0]),
                                     A.data, T.Cast("int64", A.elem_offset), T.Cast("int64", A.strides[2]),
                                     B.data, T.Cast("int64", B.elem_offset), T.Cast("int64", B.strides[2]),
                                     T.int64(kt), T.Cast("int64", A.strides[2] * width if flat else A.strides[0]),
                                     T.Cast("int64", B.strides[0])))

    intrin = f"amxbf16_conv_{taps}x{mr}x{nv}x{kt}" + (f"_flat{width}" if width else "") + "_zeroed" * zeroed
    tvm.s_tir.TensorIntrin.register(intrin, desc, impl, override=True)
    return intrin, x86_amx.kernel_ir(name, mr, nv, kt, taps, zeroed=zeroed)


# what a kernel applies to its sums before it writes them: a bias per output channel, then a ReLU,
# GELU or ReLU6 (a clip to [0, 6]), or a residual added (before the ReLU for a convolution); the
# index is a template argument
EPILOGUES = ("none", "bias", "bias_relu", "bias_add_relu", "bias_gelu", "bias_add", "bias_relu6")


def _with_epilogue(inputs: list, sums: Any, epilogue: int, out_dtype: str = "float32",
                   residual_dtype: str = "float32") -> Any:
    """The function of ``inputs`` and the float32 ``sums`` (its last axis the output channels),
    with ``EPILOGUES[epilogue]`` applied in a stage ``Z``: its bias and residual (of
    ``residual_dtype``) inputs follow. The output is cast to ``out_dtype`` in the last stage."""
    from tvm import topi

    kind = EPILOGUES[epilogue]
    shape = [int(d) for d in sums.shape]
    if kind == "none":
        return te.create_prim_func([*inputs, _cast(sums, out_dtype)])
    bias = te.placeholder((shape[-1],), "float32", name="bias")
    residual = te.placeholder(shape, residual_dtype, name="residual")

    def biased(*index: Any) -> Any:
        value = sums(*index) + bias[index[-1]]
        return value + residual(*index).astype("float32") if kind in ("bias_add_relu", "bias_add") else value

    z = te.compute(shape, biased, name="Z")
    if kind in ("bias_relu", "bias_add_relu"):
        z = topi.nn.relu(z)
    elif kind == "bias_relu6":
        z = topi.clip(z, 0.0, 6.0)
    elif kind == "bias_gelu":  # with TVM's fast erf, as the model's other GELUs
        erf = topi.fast_erf(topi.multiply(z, tvm.tirx.const(0.5**0.5, "float32")))
        z = topi.multiply(z, topi.add(tvm.tirx.const(0.5, "float32"), topi.multiply(erf, tvm.tirx.const(0.5, "float32"))))
    return te.create_prim_func([*inputs, bias, *([residual] if "add" in kind else []), _cast(z, out_dtype)])


def _cast(tensor: Any, dtype: str) -> Any:
    """``tensor`` in ``dtype``: itself, or a stage that casts it."""
    return tensor if dtype == tensor.dtype else te.compute(tensor.shape, lambda *i: tensor(*i).astype(dtype),
                                                           name="Z_cast")


# what a matmul writes: float32, or bfloat16 where the next matmul reads nothing else (a template argument)
OUT_DTYPES = ("float32", "bfloat16")


def _check_pairs(k: int) -> None:
    """A bfloat16 matmul reads K in pairs."""
    if k % 2:
        raise AutoTVMError(f"a bfloat16 matmul reads K in pairs: K must be even, got {k}")


def matmul(m: int, k: int, n: int, epilogue: int = 0, out: int = 0) -> Any:
    """C[m, n] = A[m, k] (bfloat16) x B, B given packed by ``pack_matmul_weight`` (panels of 16
    columns, (n/16, k/2, 16, 2) bfloat16 pairs), then ``EPILOGUES[epilogue]``, written in
    ``OUT_DTYPES[out]``."""
    _check_pairs(k)
    a = te.placeholder((m, k), "bfloat16", name="A")
    b = te.placeholder((n // 16, k // 2, 16, 2), "bfloat16", name="B")
    kk, kp = te.reduce_axis((0, k // 2), name="kk"), te.reduce_axis((0, 2), name="kp")
    c = te.compute((m, n), lambda i, j: te.sum(
        a[i, kk * 2 + kp].astype("float32") * b[j // 16, kk, j % 16, kp].astype("float32"), axis=[kk, kp]), name="C")
    return _with_epilogue([a, b], c, epilogue, OUT_DTYPES[out])


# what a batched product (attention's, both operands activations) adds to its sums: nothing, or a
# float32 addend of the output's rows and columns (an attention mask), one for the whole batch or
# one for each of its matrices; the index is a template argument
BATCH_EPILOGUES = ("none", "add_broadcast", "add")


def batch_matmul(b: int, m: int, k: int, n: int, epilogue: int = 0) -> Any:
    """C[b, m, n] (float32) = A[b, m, k] (bfloat16) x B[b], each B given packed as ``matmul``'s
    (b, n/16, k/2, 16, 2; an activation packed at run time), then ``BATCH_EPILOGUES[epilogue]``:
    R (1 or b, m, n) added."""
    _check_pairs(k)
    a = te.placeholder((b, m, k), "bfloat16", name="A")
    packed = te.placeholder((b, n // 16, k // 2, 16, 2), "bfloat16", name="B")
    kk, kp = te.reduce_axis((0, k // 2), name="kk"), te.reduce_axis((0, 2), name="kp")
    c = te.compute((b, m, n), lambda h, i, j: te.sum(
        a[h, i, kk * 2 + kp].astype("float32") * packed[h, j // 16, kk, j % 16, kp].astype("float32"),
        axis=[kk, kp]), name="C")
    kind = BATCH_EPILOGUES[epilogue]
    if kind == "none":
        return te.create_prim_func([a, packed, c])
    r = te.placeholder((1 if kind == "add_broadcast" else b, m, n), "float32", name="R")
    z = te.compute((b, m, n), lambda h, i, j: c[h, i, j] + r[0 if kind == "add_broadcast" else h, i, j], name="Z")
    return te.create_prim_func([a, packed, r, z])


def _epilogue_at(sch: tvm.s_tir.Schedule, outer: Any) -> None:
    """The epilogue, if any, as one stage on each tile of ``outer`` once its sums are done (in
    cache), or with ``outer`` None once all are, its rows in parallel: its steps inlined into
    the last."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    steps = [b for b in blocks if sch.get(b).name_hint not in ("P", "C", "Y")]
    if not steps:
        return
    for step in steps[:-1]:
        sch.compute_inline(step)
    if outer is None:
        sch.parallel(sch.fuse(*sch.get_loops(steps[-1])[:-1]))
    else:
        sch.reverse_compute_at(steps[-1], outer)
    sch.vectorize(sch.get_loops(steps[-1])[-1])


def schedule(func: Any, mr: int, nv: int, kt: int, amx: bool = False) -> tvm.s_tir.Schedule:
    """``matmul``'s or ``batch_matmul``'s function tiled for the micro-kernel (on AMX if
    ``amx``): rows by ``mr``, columns by ``16 nv``, K by ``kt`` pairs; the (matrix,) row and
    column tiles run in parallel on the cores, and the outer loop carries the micro-kernel's LLVM
    IR (a ``pragma_import_llvm`` the code generator links in)."""
    sch = tvm.s_tir.Schedule(func)
    block = sch.get_sblock("C")
    *batch, i, j, k, p = sch.get_loops(block)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, 16 * nv])
    ko, ki = sch.split(k, [None, kt])
    sch.reorder(*batch, io, jo, ko, ii, ji, ki, p)
    outer = sch.fuse(*batch, io, jo)
    sch.parallel(outer)
    _epilogue_at(sch, outer)
    once = int(sch.get(ko).extent) == 1  # all of K in one call of the kernel
    init = sch.decompose_reduction(block, ko)
    _tensorize(sch, ii, outer, Tile(mr, nv, kt, amx), init, panels=True, once=once)
    return sch


AMX_STEPS = (16, 32, 48, 64, 96, 128, 192, 256, 384)  # the pairs of K a call of a matmul's AMX kernel may take


def tiles(m: int, k: int, n: int, amx: bool = False) -> list[Tile]:
    """The tiles of an m x k x n matmul: exact, and fitting AVX-512's registers (or AMX's tiles);
    the first is the untuned build's. On AMX, rows from 8 (or all of them, at least 2) to 64, and
    up to 384 pairs of K a call (fewer trips of the sums through memory)."""
    if amx:
        steps = [kt for kt in AMX_STEPS if (k // 2) % kt == 0] or [k // 2] * (k // 2 < 16)
        rows = [mr for mr in range(max(2, min(8, m)), 65) if m % mr == 0]
        return _amx_tiles(rows, n // 16 if n % 16 == 0 else 0, steps)
    found = [Tile(mr, nv, kt) for mr in (2, 4, 6, 8, 12, 14) for nv in (1, 2, 3, 4)
             for kt in (16, 32, 48, 64, 96, 128, 192, 256) if _fits_registers(mr, nv) and m % mr == 0 and n % (16 * nv) == 0
             and (k // 2) % kt == 0]
    return sorted(found, key=lambda tile: (-tile.mr * tile.nv, -tile.kt))


def _amx_tiles(rows: list[int], vectors: int, steps: list[int]) -> list[Tile]:
    """The AMX tiles of ``rows`` x up to ``vectors`` of 16 columns (those that divide them) x
    ``steps`` pairs of K; the one nearest 16 x 32 over 96 pairs first."""
    found = [Tile(mr, nv, kt, True) for mr in rows for nv in (1, 2, 3) for kt in steps
             if vectors and vectors % nv == 0 and x86_amx.fits(mr, nv, kt)]
    return sorted(found, key=lambda t: (abs(t.mr - 16), abs(t.nv - 2), abs(t.kt - 96)))


def pack_matmul_weight(w: Any) -> Any:
    """A (K, N) weight (or a stack of them, (..., K, N)) as ``matmul`` reads it: panels of 16
    columns, each its bfloat16 pairs of K, (N/16, K/2, 16, 2)."""
    import ml_dtypes

    *lead, k, n = w.shape
    pairs = w.astype(ml_dtypes.bfloat16).reshape(*lead, k // 2, 2, n // 16, 16)
    return pairs.transpose(*range(len(lead)), len(lead) + 2, len(lead), len(lead) + 3, len(lead) + 1).copy()


def fits(m: int, k: int, n: int) -> bool:
    """Whether the micro-kernel can compute an m x k x n matmul (K in pairs, N in vectors of 16)."""
    return k % 2 == 0 and bool(tiles(m, k, n) or tiles(m, k, n, amx=True))


def _tensorize(sch: tvm.s_tir.Schedule, inner: Any, outer: Any, tile: Tile, init: Any, taps: int = 1,
               width: int = 0, panels: bool = False, once: bool = False) -> None:
    """The loop ``inner`` (an mr x 16 nv x kt-pair tile, or ``taps`` of them, ``width`` pixels
    apart where they run flat; B in panels where ``panels``) becomes the micro-kernel, and
    ``outer`` carries its LLVM IR. The block ``init`` zeroes the tile's sums: on AMX from zeroed
    tiles (``x86_amx.zero_ir``), else in vectors; where the kernel is called ``once`` a tile (all
    of K in one call), its sums start at zero in the tiles or registers, and C is neither zeroed
    nor read."""
    intrin, ir = intrinsic(*tile, taps, width if taps > 1 else 0, panels, once)
    sch.tensorize(inner, intrin)
    if tile.amx or once:
        zero, zero_ir = _zero_intrinsic(tile.mr, tile.nv, skip=once)
        sch.tensorize(sch.get_loops(init)[-2], zero)
        if zero_ir:
            ir += "\n" + zero_ir
    else:
        sch.vectorize(sch.get_loops(init)[-1])
    sch.annotate(outer, KERNEL_ATTR, ir)


@functools.lru_cache(maxsize=None)
def _zero_intrinsic(mr: int, nv: int, skip: bool = False) -> tuple[str, str]:
    """Register C[mr, 16 nv] = 0 on AMX's tiles as a tensor intrinsic; returns (its name, its
    LLVM IR, which follows a kernel's). With ``skip`` it does nothing: the kernel that follows,
    the tile's only call, starts its sums at zero itself (``intrinsic``'s ``zeroed``)."""
    name, n = f"tvm_amx_zero_{mr}x{nv}", 16 * nv

    @T.prim_func(s_tir=True)
    def desc(c: T.handle) -> None:
        C = T.match_buffer(c, (mr, n), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:mr, 0:n])
            for i, j in T.grid(mr, n):
                with T.sblock("zero"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = T.float32(0)

    @T.prim_func(s_tir=True)
    def impl(c: T.handle) -> None:
        C = T.match_buffer(c, (mr, n), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:mr, 0:n])
            if skip:  # a Python bool: TVMScript keeps the branch taken
                T.evaluate(0)
            else:
                T.evaluate(T.call_extern("int32", name, C.data, T.Cast("int64", C.elem_offset),
                                         T.Cast("int64", C.strides[0])))

    intrin = f"bf16_no_zero_{mr}x{nv}" if skip else f"amx_zero_{mr}x{nv}"
    tvm.s_tir.TensorIntrin.register(intrin, desc, impl, override=True)
    return intrin, "" if skip else x86_amx.zero_ir(name, mr, nv)


TEMPLATE = "x86/matmul_bf16"


def uses_amx(target: Any) -> bool:
    """Whether kernels for ``target`` compute on AMX's tiles: its CPU has them, and this machine,
    if it has them too, lets a process use them (``x86_amx.refused_here``)."""
    return (target is not None and target.kind.name == "llvm" and cpu_has_amx_bf16(target)
            and not x86_amx.refused_here())


def _knob_tiles(amx: list[Tile], avx512: list[Tile]) -> list[str]:
    """A template's tiles: AMX's where the target in scope ``uses_amx`` and one fits, else AVX-512's."""
    return [str(tile) for tile in (uses_amx(tvm.target.Target.current(allow_none=True)) and amx or avx512)]


@template(TEMPLATE)
def matmul_template(m: int, k: int, n: int, epilogue: int = 0, out: int = 0) -> tuple[Any, list]:
    """The bfloat16 matmul as an AutoTVM template (and its epilogue, an index of ``EPILOGUES``;
    its output's type, of ``OUT_DTYPES``): its knob is the micro-kernel's tile (rows, columns,
    pairs of K per call; AMX's where the target has AMX and a tile fits), so every tuner searches
    them."""
    cfg = get_config()
    cfg.define_knob("tile", _knob_tiles(tiles(m, k, n, amx=True), tiles(m, k, n)))
    cfg.add_flop(2.0 * m * k * n)
    return schedule(matmul(m, k, n, epilogue, out), *Tile.parse(cfg["tile"].val)), []


BATCH_TEMPLATE = "x86/batch_matmul_bf16"


@template(BATCH_TEMPLATE)
def batch_matmul_template(b: int, m: int, k: int, n: int, epilogue: int = 0) -> tuple[Any, list]:
    """The batched bfloat16 matmul (and its epilogue, an index of ``BATCH_EPILOGUES``) as an
    AutoTVM template, its knob the micro-kernel's tile as ``matmul_template``'s."""
    cfg = get_config()
    cfg.define_knob("tile", _knob_tiles(tiles(m, k, n, amx=True), tiles(m, k, n)))
    cfg.add_flop(2.0 * b * m * k * n)
    return schedule(batch_matmul(b, m, k, n, epilogue), *Tile.parse(cfg["tile"].val)), []


# the activations of a convolution that may be bfloat16, a bit each in ``Conv2D.io``: where a
# convolution's output is only read by other convolutions' kernels, it is written in bfloat16
CONV_IO = ("input", "residual", "output")


class Conv2D(NamedTuple):
    """A 2-D convolution layer: input (1, h, w, c) NHWC, co filters of kh x kw, one stride, pads
    (top, left, bottom, right), its epilogue (an index of ``EPILOGUES``), and which of its
    activations are bfloat16 (``io``, a bit each of ``CONV_IO``; the others float32)."""

    h: int
    w: int
    c: int
    co: int
    kh: int
    kw: int
    stride: int
    pad_top: int
    pad_left: int
    pad_bottom: int
    pad_right: int
    epilogue: int = 0
    io: int = 0

    @property
    def args(self) -> list[int]:
        """Its convolution template's args: its fields, ``io`` left out where it is 0 (a float32
        convolution's task the same as one's without the field)."""
        return list(self)[:-1] + [self.io] * bool(self.io)

    def dtype(self, activation: str) -> str:
        """The type of one of ``CONV_IO``'s activations."""
        return "bfloat16" if self.io >> CONV_IO.index(activation) & 1 else "float32"

    @property
    def out(self) -> tuple[int, int]:
        """(output height, output width)."""
        return ((self.h + self.pad_top + self.pad_bottom - self.kh) // self.stride + 1,
                (self.w + self.pad_left + self.pad_right - self.kw) // self.stride + 1)

    @property
    def folded(self) -> bool:
        """Input channels that do not come in whole calls of the micro-kernel (their pairs not a
        multiple of ``MIN_KT``; the RGB image's first layer): a row's taps are folded into them."""
        return self.c % 2 == 1 or (self.c // 2) % MIN_KT != 0

    @property
    def pairs(self) -> int:
        """Pairs of K per filter tap: of the input channels, or of a row's taps x channels when
        folded (a zero added to make the last pair)."""
        return (self.kw * self.c + 1) // 2 if self.folded else self.c // 2

    @property
    def filters(self) -> int:
        """Filters computed: ``co`` up to a multiple of 16 (the micro-kernel's vectors), the added
        ones zeros in the packed weight, their sums never written."""
        return -(-self.co // 16) * 16

    @property
    def block(self) -> int:
        """Filters per block of the packed weight: the most of 64, 48, 32, 16 that divides
        ``filters`` and that the columns of one AVX-512 tile fill (as ``conv2d_tiles`` has them),
        so that a tile reads its weights from contiguous memory (with 7 pixels a row no tile fills
        64: one of 32 reading half of each row of a 64-block fetched the weights from memory
        slower); where no tile fills one, the most that divides ``filters``."""
        _, ow = self.out
        blocks = [b for b in (64, 48, 32, 16) if self.filters % b == 0]
        return next((b for b in blocks if any(_conv_tile_fits(ow, mr, b // 16) for mr in CONV_ROWS)), blocks[0])

    @property
    def width(self) -> int:
        """Pixels of a row of the padded input: a stride-1 convolution's output row and the
        filter's width less one."""
        return self.out[1] + self.kw - 1

    def flat(self, mr: int) -> bool:
        """Whether a tile of ``mr`` pixels runs flat: AMX tiles whose rows do not divide the output
        row (on 7 x 7 maps, more than 7) take the pixels of the padded input's rows in turn, its
        last ``kw - 1`` of each row computed and not written; only a stride-1 convolution whose
        channels are not folded has its taps a fixed distance apart in that order."""
        return self.stride == 1 and not self.folded and self.out[1] % mr != 0


CONV_ROWS = range(2, 15)  # the pixels of an output row an AVX-512 convolution tile may take


def _conv_tile_fits(ow: int, mr: int, nv: int) -> bool:
    """An AVX-512 convolution tile of ``mr`` pixels of a row of ``ow`` by ``16 nv`` filters: ``mr``
    divides the row, its accumulators fit the registers, and it has at least 8 of them."""
    return ow % mr == 0 and _fits_registers(mr, nv) and mr * nv >= 8


MIN_KT = 16  # the fewest pairs of K a call of the micro-kernel reads when it does not read them all


def conv2d(shape: Conv2D, flat_rows: int = 0) -> Any:
    """Y (1, oh, ow, co) = X (1, h, w, c), read as bfloat16, convolved with W given packed by
    ``pack_conv2d_weight`` (X, Y and the epilogue's residual float32, or bfloat16 as
    ``Conv2D.io`` has them; the sums float32). The padded input is laid out once, in bfloat16, as
    P (h + pads, stride, ow + (kw - 1) / stride, c): pixel ``x * stride + q`` of a row at
    ``P[.., q, x, :]``, so each filter tap reads a strided matrix. Folded (``Conv2D.folded``), P
    is (h + pads, 1, ow, 2 pairs): output pixel x's row of taps, its channels side by side, and
    the convolution has one tap per row of the filter. It sums ``Conv2D.filters`` filters (``co``
    up to a multiple of 16) and writes the first ``co``. With ``flat_rows`` (``Conv2D.flat``) P
    is the padded rows' pixels in one run, (1, 1, pixels, c), and the sums Y (1, 1, pixels, co)
    are taken for every pixel of the padded rows, in tiles of ``flat_rows`` (its last ones past
    the image zeros), a stage ``Y_pixels`` writing the output's."""
    s, (oh, ow) = shape.stride, shape.out
    x = te.placeholder((1, shape.h, shape.w, shape.c), shape.dtype("input"), name="X")
    kw, steps, width = (1, 1, ow) if shape.folded else (shape.kw, s, ow + (shape.kw - 1) // s)
    blk = shape.block
    w = te.placeholder((shape.filters // blk, shape.kh, kw, shape.pairs, blk, 2), "bfloat16", name="W")

    def padded(hh: Any, q: Any, ww: Any, ci: Any) -> Any:
        if shape.folded:
            col, ci, real = ww * s + ci // shape.c - shape.pad_left, ci % shape.c, ci < shape.kw * shape.c
        else:
            col, real = ww * s + q - shape.pad_left, True
        row = hh - shape.pad_top
        inside = tvm.tirx.all(real, row >= 0, row < shape.h, col >= 0, col < shape.w)
        if not shape.folded:
            return tvm.tirx.if_then_else(inside, x[0, row, col, ci].astype("bfloat16"), tvm.tirx.const(0, "bfloat16"))
        # folded, the condition varies along the vectorised channels, where TVM's vectoriser leaves an
        # if_then_else scalar: a select of a load clamped inside X stays in vectors
        value = x[0, te.max(te.min(row, shape.h - 1), 0), te.max(te.min(col, shape.w - 1), 0), ci]
        return tvm.tirx.Select(inside, value, tvm.tirx.const(0, x.dtype)).astype("bfloat16")

    r, t = te.reduce_axis((0, shape.kh), name="r"), te.reduce_axis((0, kw), name="t")
    cc, cp = te.reduce_axis((0, shape.pairs), name="cc"), te.reduce_axis((0, 2), name="cp")
    if flat_rows:
        if not shape.flat(flat_rows):
            raise AutoTVMError(f"a tile of {flat_rows} pixels does not run flat on {shape}")
        pw = shape.width
        pixels = -(-oh * pw // flat_rows) * flat_rows  # the padded rows' pixels, in whole tiles
        p = te.compute((1, 1, pixels + (shape.kh - 1) * pw + shape.kw - 1, 2 * shape.pairs),
                       lambda _, q, m, ci: padded(m // pw, q, m % pw, ci), name="P")
        y = te.compute((1, 1, pixels, shape.filters), lambda n, i, m, o: te.sum(
            p[0, 0, m + r * pw + t, cc * 2 + cp].astype("float32") * w[o // blk, r, t, cc, o % blk, cp].astype("float32"),
            axis=[r, t, cc, cp]), name="Y")
        y = te.compute((1, oh, ow, shape.co), lambda n, i, j, o: y[0, 0, i * pw + j, o], name="Y_pixels")
        return _with_epilogue([x, w], y, shape.epilogue, shape.dtype("output"), shape.dtype("residual"))
    p = te.compute((shape.h + shape.pad_top + shape.pad_bottom, steps, width, 2 * shape.pairs), padded, name="P")
    y = te.compute((1, oh, ow, shape.filters), lambda n, i, j, o: te.sum(
        p[i * s + r, t % steps, j + t // steps, cc * 2 + cp].astype("float32") * w[o // blk, r, t, cc, o % blk, cp].astype("float32"),
        axis=[r, t, cc, cp]), name="Y")
    if shape.filters != shape.co:  # the sums of the real filters
        y = te.compute((1, oh, ow, shape.co), lambda *index: y(*index), name="Y_real")
    return _with_epilogue([x, w], y, shape.epilogue, shape.dtype("output"), shape.dtype("residual"))


# the loops around the micro-kernel, outermost first, the parallel ones before the "|"
CONV_ORDERS = {"rows": "n i jo oo | r t cco", "channels": "oo n i jo | r t cco", "weights": "oo | r t cco n i jo"}


def conv2d_schedule(func: Any, mr: int, nv: int, kt: int, amx: bool = False,
                    order: str = "rows", taps: int = 1, width: int = 0) -> tvm.s_tir.Schedule:
    """``conv2d``'s function tiled for the micro-kernel (on AMX if ``amx``): ``mr`` pixels of an
    output row by ``16 nv`` output channels by ``kt`` pairs of input channels, for each filter
    tap. ``order="rows"`` runs the output rows in parallel with the channel blocks inside;
    ``"channels"`` the channel blocks outside, so a core keeps one block of the weights in cache
    across all rows (small images, many channels). ``taps`` > 1 (on AMX, the filter's height):
    one call of the kernel sums the filter's rows, its loop the innermost of the serial ones.
    ``width``: ``conv2d(shape, mr)``'s function, whose pixels run flat in rows of ``width``
    (``Conv2D.flat``); its epilogue a stage of its own after the sums."""
    sch = tvm.s_tir.Schedule(func)
    pad = sch.get_sblock("P")
    hh, _, ww, ci = sch.get_loops(pad)
    sch.parallel(ww if width else hh)
    sch.vectorize(ci)
    block = sch.get_sblock("Y")
    n, i, j, o, r, t, cc, cp = sch.get_loops(block)
    jo, ji = sch.split(j, [None, mr])
    oo, oi = sch.split(o, [None, 16 * nv])
    cco, cci = sch.split(cc, [None, kt])
    loops = {"n": n, "i": i, "jo": jo, "oo": oo, "r": r, "t": t, "cco": cco}
    parallel, serial = (names.split() for names in CONV_ORDERS[order].split("|"))
    if taps > 1:
        serial = [name for name in serial if name != "r"] + ["r"]
    sch.reorder(*[loops[name] for name in parallel + serial], ji, oi, cci, cp)
    outer = sch.fuse(*[loops[name] for name in parallel]) if len(parallel) > 1 else loops[parallel[0]]
    sch.parallel(outer)
    _epilogue_at(sch, None if width else outer)
    # all of a tile's K in one call of the kernel: every tap (or its filter rows in the call) and channel
    once = all(int(sch.get(loops[name]).extent) == 1 for name in ("r", "t", "cco") if not (taps > 1 and name == "r"))
    init = sch.decompose_reduction(block, loops[serial[0]])
    _tensorize(sch, loops["r"] if taps > 1 else ji, outer, Tile(mr, nv, kt, amx), init, taps, width, once=once)
    return sch


def conv2d_tiled(shape: Conv2D, tile: Tile, order: str = "rows", taps: int = 1) -> tvm.s_tir.Schedule:
    """The convolution ``shape`` tiled by ``tile`` (one of ``conv2d_tiles``): its pixels in rows,
    or flat where an AMX tile's rows do not divide the output row (``Conv2D.flat``)."""
    if tile.amx and shape.flat(tile.mr):
        return conv2d_schedule(conv2d(shape, tile.mr), *tile, order, taps, shape.width)
    return conv2d_schedule(conv2d(shape), *tile, order, taps)


def conv2d_tiles(shape: Conv2D, amx: bool = False) -> list[Tile]:
    """The tiles of a convolution: exact (mr divides the output width, 16 nv the filters, kt the
    pairs of K of a tap: from ``MIN_KT`` to 128, or all of them where fewer) and fitting AVX-512's
    registers, the most accumulators first (or AMX's tiles, and on a stride-1 convolution those of
    16 to 64 pixels that run flat, ``Conv2D.flat``)."""
    _, ow = shape.out
    steps = [kt for kt in range(MIN_KT, 129) if shape.pairs % kt == 0] or [shape.pairs]
    if amx:
        rows = [mr for mr in range(max(2, min(7, ow)), 65) if ow % mr == 0 or mr % 16 == 0 and shape.flat(mr)]
        return _amx_tiles(rows, shape.block // 16, steps)
    found = [Tile(mr, nv, kt) for mr in CONV_ROWS for nv in (1, 2, 3, 4) for kt in steps
             if _conv_tile_fits(ow, mr, nv) and shape.block % (16 * nv) == 0 and shape.pairs % kt == 0]
    return sorted(found, key=lambda tile: (-tile.mr * tile.nv, -tile.kt))


def conv2d_fits(shape: Conv2D) -> bool:
    """Whether the micro-kernel can compute a convolution (a tile that divides the output width)."""
    return bool(conv2d_tiles(shape) or conv2d_tiles(shape, amx=True))


def pack_conv2d_weight(w: Any, shape: Conv2D) -> Any:
    """A float32 OHWI weight (co, kh, kw, c) of the convolution ``shape`` as ``conv2d`` reads it,
    zero filters added up to ``Conv2D.filters``, in blocks of filters (``Conv2D.block``):
    (filters / block, kh, kw, c/2, block, 2) bfloat16 pairs of input channels, or folded (few
    channels), (filters / block, kh, 1, pairs, block, 2) pairs of a row's taps x channels."""
    import ml_dtypes
    import numpy as np

    co, kh, kw, c = w.shape
    if (co, kh, kw, c) != (shape.co, shape.kh, shape.kw, shape.c):
        raise AutoTVMError(f"a weight of shape {w.shape} is not the OHWI weight of {shape}")
    w = np.pad(w, [(0, shape.filters - co), (0, 0), (0, 0), (0, 0)])  # zero filters up to a multiple of 16
    if shape.folded:
        w = np.pad(w.reshape(shape.filters, kh, 1, kw * c), [(0, 0), (0, 0), (0, 0), (0, 2 * shape.pairs - kw * c)])
        kw = 1
    blocks = w.astype(ml_dtypes.bfloat16).reshape(shape.filters // shape.block, shape.block, kh, kw, shape.pairs, 2)
    return blocks.transpose(0, 2, 3, 4, 1, 5).copy()


CONV_TEMPLATE = "x86/conv2d_nhwc_bf16"


@template(CONV_TEMPLATE)
def conv2d_template(*args: int) -> tuple[Any, list]:
    """The bfloat16 convolution as an AutoTVM template (args: ``Conv2D.args``): its knobs are the
    micro-kernel's tile (AMX's where the target has AMX and a tile fits) and the parallel loop's
    order, so every tuner searches them."""
    fields = len(Conv2D._fields)
    if len(args) not in (fields - 1, fields) or not all(isinstance(a, int) and a >= 0 for a in args) \
            or len(args) == fields and args[-1] >= 2 ** len(CONV_IO):
        raise AutoTVMError(f"{CONV_TEMPLATE} takes {fields - 1} or {fields} integers ({', '.join(Conv2D._fields)}; "
                           f"io below {2 ** len(CONV_IO)}), got {args!r}")
    shape = Conv2D(*args)
    cfg = get_config()
    cfg.define_knob("tile", _knob_tiles(conv2d_tiles(shape, amx=True), conv2d_tiles(shape)))
    cfg.define_knob("order", list(CONV_ORDERS))
    tile = Tile.parse(cfg["tile"].val)
    # on AMX, whether a call of the kernel sums all the filter's rows (the untuned build's) or one
    taps = cfg.define_knob("taps", [shape.kh, 1]).val if tile.amx and shape.kh > 1 else 1
    oh, ow = shape.out
    cfg.add_flop(2.0 * oh * ow * shape.co * shape.kh * shape.kw * shape.c)
    return conv2d_tiled(shape, tile, cfg["order"].val, taps), []
