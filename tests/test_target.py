"""An LLVM target means this machine unless it says otherwise: its CPU, hence its vector units."""

import pytest
import tvm
from tvm import te
from tvm.target import codegen

import autotvm


def test_bare_llvm_gets_this_cpu_and_core_count():
    target = autotvm.make_target("llvm")
    assert str(target.attrs["mcpu"]) == codegen.llvm_get_system_cpu()
    assert int(target.attrs["num-cores"]) >= 1


def test_explicit_cpu_or_cross_triple_is_kept():
    assert str(autotvm.make_target({"kind": "llvm", "mcpu": "haswell"}).attrs["mcpu"]) == "haswell"
    cross = autotvm.make_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    assert "mcpu" not in cross.attrs


def test_host_target_emits_wide_fused_vector_code():
    """Without ``mcpu`` LLVM emits SSE2 only; with the host CPU a multiply-add uses AVX2 FMA
    (skipped on a CPU without AVX2)."""
    if "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("this CPU has no AVX2")
    n = 1024
    a = te.placeholder((n,), name="a")
    b = te.placeholder((n,), name="b")
    c = te.compute((n,), lambda i: a[i] * b[i] + a[i], name="c")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b, c]))
    (loop,) = sch.get_loops(sch.get_sblock("c"))
    _, inner = sch.split(loop, [None, 8])
    sch.vectorize(inner)
    asm = tvm.compile(sch.mod, target=autotvm.make_target("llvm")).mod.inspect_source("asm")
    assert "ymm" in asm and "vfmadd" in asm
