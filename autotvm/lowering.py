"""How a tuned function is lowered: TVM's own TIR pipeline, plus one pass for the CPU kernels.

TVM lowers a buffer a function allocates on the CPU to the stack only under 1 KB
(``LowerTVMBuiltin``); a larger one it takes from the runtime's workspace pool, a call to allocate
and one to free each time its scope runs. The micro-kernels of ``task.x86_bf16`` keep a tile's
float32 sums in such a buffer, one a tile (an AMX tile of 16 rows by 16 columns is 1 KB already),
and after each of those calls LLVM configures AMX's tiles again (``ldtilecfg``).
``tir_pipeline(target)`` names the pipeline every build here uses (the builder's trials and
``build_program``): on a CPU TVM's with ``sums_on_stack`` before that lowering, which keeps those
buffers on the stack; elsewhere TVM's own. Imports only TVM (the build workers import it).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi

KERNEL_ATTR = "pragma_import_llvm"  # what a function whose loops carry the micro-kernels' LLVM IR holds
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


def _cpu_pipeline() -> tuple:
    lower, host, device = tvm.tirx.get_tir_pipeline("default")
    return lower, lambda: tvm.transform.Sequential([sums_on_stack, host()]), device


tvm.tirx.compilation_pipeline.register_tir_pipeline(PIPELINE, _cpu_pipeline)


def tir_pipeline(target: Any) -> str:
    """The TIR pipeline to build for ``target`` with (``tvm.compile``'s and ``relax.build``'s
    ``tir_pipeline``): ``PIPELINE`` for a CPU, TVM's default for a GPU."""
    return PIPELINE if target.kind.name == "llvm" else "default"
