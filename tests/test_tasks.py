"""Tasks on real operators: every config computes what numpy computes, or is reported invalid."""

import numpy as np

import autotvm
from autotvm.task.space import InstantiationError

from conftest import c1_primfunc, matmul_primfunc, random_matmul_inputs, run_module


def test_template_task_every_config_is_correct(template_task):
    space = template_task.config_space
    assert [k.name for k in space.knobs] == ["tile_i", "tile_j", "vectorize"]
    assert template_task.flop == 2 * 32**3
    a, b, c = random_matmul_inputs(32, 32, 32)
    for index in range(len(space)):
        mod = template_task.instantiate(space.get(index))
        out = run_module(mod, template_task.target, [a, b, c])[2]
        np.testing.assert_allclose(out, a @ b, rtol=1e-4)


def test_trace_task_knobs_come_from_metaschedule(matmul_task):
    kinds = {k.meta.get("kind") for k in matmul_task.config_space.knobs if k.meta}
    assert "SamplePerfectTile" in kinds and "SampleCategorical" in kinds
    assert matmul_task.flop == 2 * 64**3
    assert matmul_task.args[0] == ["TENSOR", [64, 64], "float32"]


def _check_sampled_configs(task, count, rng, inputs, expected, output=2, **tolerance):
    """Instantiate ``count`` random configs; each must compute ``expected`` or be invalid.
    Returns how many were valid (and checked)."""
    valid = 0
    for index in task.config_space.sample_ints(count, rng):
        try:
            mod = task.instantiate(task.config_space.get(index))
        except InstantiationError:
            continue
        out = run_module(mod, task.target, [a.copy() for a in inputs])[output]
        np.testing.assert_allclose(out, expected, **tolerance)
        valid += 1
    return valid


def test_trace_task_configs_are_correct_or_invalid(matmul_task):
    a, b, c = random_matmul_inputs(64, 64, 64)
    valid = _check_sampled_configs(matmul_task, 12, np.random.default_rng(0), [a, b, c], a @ b, rtol=1e-4)
    assert valid >= 6


def test_conv_task_has_a_sketch_knob_and_a_cached_space():
    first = autotvm.task.create_from_primfunc(c1_primfunc(), "llvm", name="c1")
    second = autotvm.task.create_from_primfunc(c1_primfunc(), "llvm", name="c1")
    assert first.config_space.knobs[0].name == "sketch"
    assert first.config_space.dims == second.config_space.dims
    assert len(first.config_space) > 1_000_000


def test_compute_location_knob_on_a_padded_conv():
    from tvm import te, topi

    data = te.placeholder((1, 8, 14, 14), name="data")
    weight = te.placeholder((8, 8, 3, 3), name="weight")
    func = te.create_prim_func([data, weight, topi.nn.conv2d_nchw(data, weight, 1, 1, 1)])
    task = autotvm.task.create_from_primfunc(func, "llvm", name="conv3x3")
    loc = [k for k in task.config_space.knobs if k.meta.get("kind") == "SampleComputeLocation"]
    assert loc and all(len(k) >= 2 for k in loc)
    rng = np.random.default_rng(3)
    x = rng.random((1, 8, 14, 14), dtype=np.float32)
    w = rng.random((8, 8, 3, 3), dtype=np.float32)
    out0 = np.zeros((1, 8, 14, 14), np.float32)
    expected = run_module(task.default_module(), task.target, [x, w, out0])[2]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    direct = sum(np.einsum("nchw,oc->nohw", padded[:, :, dy:dy + 14, dx:dx + 14], w[:, :, dy, dx])
                 for dy in range(3) for dx in range(3))
    np.testing.assert_allclose(expected, direct, rtol=1e-4, atol=1e-4)
    checked = _check_sampled_configs(task, 6, rng, [x, w, np.zeros((1, 8, 14, 14), np.float32)], expected,
                                     rtol=1e-4, atol=1e-4)
    assert checked >= 2


def test_sibling_tasks_share_knobs_and_translate_into_correct_configs(matmul_task):
    """Two shapes of one operator have one signature; a tiling of one, translated (the task
    scheduler's transfer), is a config of the other that computes what numpy computes."""
    other = autotvm.task.create_from_primfunc(matmul_primfunc(48, 96, 80), "llvm", name="mm48")
    assert other.config_space.signature == matmul_task.config_space.signature
    a, b, c = random_matmul_inputs(48, 96, 80)
    checked = 0
    for index in matmul_task.config_space.sample_ints(6, np.random.default_rng(1)):
        config = other.config_space.translate(matmul_task.config_space.get(index))
        try:
            mod = other.instantiate(config)
        except InstantiationError:
            continue
        out = run_module(mod, other.target, [a, b, c.copy()])[2]
        np.testing.assert_allclose(out, a @ b, rtol=1e-4)
        checked += 1
    assert checked >= 3
