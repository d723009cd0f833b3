"""bfloat16 on x86: the micro-kernel on AVX512-BF16 and on AMX as a tensor intrinsic (run where
the CPU has it)."""

import re

import numpy as np
import pytest
import tvm

import autotvm
from autotvm.lowering import tir_pipeline
from autotvm.task import x86_bf16, x86_softmax

HOST = autotvm.make_target("llvm")
HAS_BF16 = x86_bf16.cpu_has_bf16(HOST)
HAS_AMX = x86_bf16.cpu_has_amx_bf16(HOST)


def _build(mod):
    """A kernel's module built for this CPU as the tune and the model's build do."""
    return tvm.compile(mod, target=HOST, tir_pipeline=tir_pipeline(HOST))


def test_which_cpus_have_avx512_bf16():
    assert x86_bf16.cpu_has_bf16(autotvm.make_target({"kind": "llvm", "mcpu": "znver4"}))
    assert x86_bf16.cpu_has_bf16(autotvm.make_target({"kind": "llvm", "mcpu": "sapphirerapids"}))
    assert not x86_bf16.cpu_has_bf16(autotvm.make_target({"kind": "llvm", "mcpu": "znver3"}))
    assert not x86_bf16.cpu_has_bf16(autotvm.make_target({"kind": "llvm", "mcpu": "skylake-avx512"}))
    # AMX's bfloat16 tiles, which the templates compute on where the target has them
    assert x86_bf16.cpu_has_amx_bf16(autotvm.make_target({"kind": "llvm", "mcpu": "sapphirerapids"}))
    assert not x86_bf16.cpu_has_amx_bf16(autotvm.make_target({"kind": "llvm", "mcpu": "znver5"}))


def test_tiles_fit_the_shape_and_the_registers():
    tiles = x86_bf16.tiles(128, 384, 1536)
    assert tiles and all(128 % mr == 0 and 1536 % (16 * nv) == 0 and 192 % kt == 0 and mr * nv <= 28
                         for mr, nv, kt, _ in tiles)
    with pytest.raises(autotvm.AutoTVMError, match="registers"):
        x86_bf16.intrinsic(8, 4, 16)
    # AMX: at most 16 rows a tile, sum tiles + B tiles + one A tile <= 8 registers, K in steps of 16
    amx = x86_bf16.tiles(128, 384, 1536, amx=True)
    assert amx[0] == (16, 2, 96, True) and {"amx-32x2x64", "amx-64x1x64"} <= set(map(str, amx))
    assert all(128 % mr == 0 and 1536 % (16 * nv) == 0 and kt % 16 == 0 and -(-mr // 16) * nv + nv + 1 <= 8
               for mr, nv, kt, _ in amx)
    assert "amx-64x2x64" not in map(str, amx) and x86_bf16.Tile.parse("amx-32x2x64") == (32, 2, 64, True)
    assert "amx-32x2x192" in map(str, amx)  # a call over the whole K: its sums through memory once
    assert not x86_bf16.tiles(1, 384, 384, amx=True)  # one row: no tile (its loop would vanish), stays float32
    with pytest.raises(autotvm.AutoTVMError, match="8 registers"):
        x86_bf16.intrinsic(48, 2, 64, amx=True)
    # 72 pairs: 4 steps of 16 and one of 8, whose tiles of their own shape take nv + 1 registers more
    from autotvm.task import x86_amx

    assert x86_amx.fits(16, 2, 72) and not x86_amx.fits(32, 2, 72) and x86_amx.fits(32, 2, 64)
    assert x86_bf16.conv2d_tiles(x86_bf16.Conv2D(56, 56, 144, 24, 1, 1, 1, 0, 0, 0, 0), amx=True)
    with pytest.raises(autotvm.AutoTVMError, match="only AMX's"):  # a call summing a filter's 3 rows
        x86_bf16.intrinsic(4, 2, 16, taps=3)


def test_the_templates_search_amx_tiles_where_the_target_has_amx():
    def tiles(template, args, mcpu):
        task = autotvm.task.create(template, args, autotvm.make_target({"kind": "llvm", "mcpu": mcpu}))
        return [entity.val for entity in task.config_space.knobs[0].entities]

    amx = tiles(x86_bf16.TEMPLATE, [128, 384, 1536, 0], "sapphirerapids")
    assert amx[0] == "amx-16x2x96" and all(tile.startswith("amx-") for tile in amx)
    assert not any(tile.startswith("amx-") for tile in tiles(x86_bf16.TEMPLATE, [128, 384, 1536, 0], "znver4"))
    attention = [12, 128, 32, 128, x86_bf16.BATCH_EPILOGUES.index("add_broadcast")]  # MiniLM's queries by keys
    assert tiles(x86_bf16.BATCH_TEMPLATE, attention, "sapphirerapids")[0].startswith("amx-")
    assert not any(tile.startswith("amx-") for tile in tiles(x86_bf16.BATCH_TEMPLATE, attention, "znver4"))
    stem = [224, 224, 3, 64, 7, 7, 2, 3, 3, 3, 3, 0]  # K folded into 11 pairs: one step of 11
    assert tiles(x86_bf16.CONV_TEMPLATE, stem, "sapphirerapids")[0] == "amx-16x2x11"


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
@pytest.mark.parametrize("tile", [(4, 2, 16), (2, 4, 32), (8, 1, 16)])
def test_the_micro_kernel_computes_the_bfloat16_product_in_float32(tile):
    import ml_dtypes

    m, k, n = 16, 64, 64
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    packed = x86_bf16.pack_matmul_weight(b)  # panels of 16 columns, pairs of K side by side
    mod = x86_bf16.schedule(x86_bf16.matmul(m, k, n), *tile).mod
    lib = _build(mod)
    assert "vdpbf16ps" in lib.mod.inspect_source("asm")
    c = tvm.runtime.tensor(np.zeros((m, n), np.float32))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(packed), c)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c.numpy(), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
@pytest.mark.parametrize("tile, epilogue", [((4, 2, 16), "none"), ((8, 1, 32), "add_broadcast"), ((2, 2, 16), "add")])
def test_the_batched_kernel_computes_each_product_and_adds_its_mask(tile, epilogue):
    import ml_dtypes

    b, m, k, n = 3, 16, 64, 32
    rng = np.random.default_rng(0)
    a = rng.standard_normal((b, m, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((b, k, n)).astype(ml_dtypes.bfloat16)
    packed = x86_bf16.pack_matmul_weight(w)  # each right operand as a weight's
    mask = rng.standard_normal((1 if epilogue == "add_broadcast" else b, m, n)).astype(np.float32)
    index = x86_bf16.BATCH_EPILOGUES.index(epilogue)
    lib = _build(x86_bf16.schedule(x86_bf16.batch_matmul(b, m, k, n, index), *tile).mod)
    assert "vdpbf16ps" in lib.mod.inspect_source("asm")
    c = tvm.runtime.tensor(np.zeros((b, m, n), np.float32))
    lib["main"](*[tvm.runtime.tensor(x) for x in [a, packed] + [mask] * (epilogue != "none")], c)
    expected = a.astype(np.float32) @ w.astype(np.float32) + (mask if epilogue != "none" else 0)
    np.testing.assert_allclose(c.numpy(), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_a_matmul_weight_is_packed_in_panels_of_16_columns():
    """Each 16 columns of B, pairs of K side by side, lie in one run of memory (a panel), so that a
    tile reads them in order over K; a stack of B (attention's right operands) panel by panel too."""
    import ml_dtypes

    k, n = 8, 48
    w = np.arange(k * n, dtype=np.float32).reshape(k, n)
    packed = x86_bf16.pack_matmul_weight(w)
    assert packed.shape == (n // 16, k // 2, 16, 2) and packed.dtype == ml_dtypes.bfloat16
    for kk, j in np.ndindex(k, n):
        assert packed[j // 16, kk // 2, j % 16, kk % 2] == w[kk, j].astype(ml_dtypes.bfloat16)
    panel = packed.reshape(n // 16, -1)[1]  # the second panel's memory, in order
    assert list(panel[:4].astype(np.float32)) == [w[0, 16], w[1, 16], w[0, 17], w[1, 17]]
    stack = x86_bf16.pack_matmul_weight(np.stack([w, 2 * w]))
    assert stack.shape == (2, *packed.shape) and (stack[1].astype(np.float32) == 2 * packed.astype(np.float32)).all()


def amx_products(cases: list) -> list[float]:
    """Each (m, k, n, mr, nv, kt) matmul built on the AMX micro-kernel and run: the largest error
    against the float32 product of its bfloat16 inputs, relative to the product's largest value."""
    import ml_dtypes

    errors = []
    for m, k, n, *tile in cases:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
        lib = _build(x86_bf16.schedule(x86_bf16.matmul(m, k, n), *tile, amx=True).mod)
        assert "tdpbf16ps" in lib.mod.inspect_source("asm")
        c = tvm.runtime.tensor(np.zeros((m, n), np.float32))
        lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(x86_bf16.pack_matmul_weight(b.astype(np.float32))), c)
        expected = a.astype(np.float32) @ b.astype(np.float32)
        errors.append(float(np.abs(c.numpy() - expected).max() / np.abs(expected).max()))
    return errors


@pytest.mark.skipif(not HAS_AMX, reason="this CPU has no AMX")
def test_where_the_process_may_not_use_amx_the_templates_keep_to_avx512(monkeypatch):
    from autotvm.task import x86_amx

    def tiles():
        task = autotvm.task.create(x86_bf16.TEMPLATE, [128, 384, 1536, 0], HOST)
        return [entity.val for entity in task.config_space.knobs[0].entities]

    assert not x86_amx.refused_here() and tiles()[0].startswith("amx-")
    monkeypatch.setattr(x86_amx, "refused_here", lambda: True)  # as on Linux before 5.16
    assert not any(tile.startswith("amx-") for tile in tiles())


@pytest.mark.skipif(not HAS_AMX, reason="this CPU has no AMX")
def test_the_amx_micro_kernel_computes_the_bfloat16_product_in_a_fresh_process():
    """In a process that has not asked Linux for AMX's tile state (nothing but TVM imported), the
    kernel asks itself; several tiles at once in a row, fewer rows than 16, K in a short step, K
    in steps of 16 and a shorter last one."""
    import subprocess
    import sys

    cases = [(32, 64, 96, 16, 2, 32), (64, 64, 32, 32, 1, 16), (24, 96, 48, 8, 3, 16), (14, 20, 32, 14, 2, 10),
             (32, 144, 64, 16, 2, 72), (32, 768, 64, 32, 2, 384)]
    code = f"import sys; sys.path.insert(0, 'tests'); import test_bf16; print(test_bf16.amx_products({cases!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(error < 1e-5 for error in eval(done.stdout.strip().splitlines()[-1])), done.stdout


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
def test_a_bfloat16_model_tunes_its_matmuls_as_tile_knobs_and_stays_accurate(tmp_path):
    """precision="bfloat16": every matmul with a constant weight becomes the micro-kernel's task
    (its knob: the tile), the rest stays float32; the tuned build uses the tuned tile and its
    outputs stay within a cosine of 0.9999 of PyTorch's float32 ones."""
    from tvm import relax

    from autotvm.tuner import RandomTuner
    from tools.models import build_model, model_tasks
    from tools.timing import cosine

    spec = {"name": "mlp", "type": "torch", "model": "mlp", "width": 256, "batch": 16}
    model, mod, params, tasks = model_tasks(spec, HOST, "bfloat16")
    bf16 = [t for t in tasks if t.name == x86_bf16.TEMPLATE]
    bias, bias_relu = x86_bf16.EPILOGUES.index("bias"), x86_bf16.EPILOGUES.index("bias_relu")
    # with their epilogues; the first writes bfloat16 (``OUT_DTYPES[1]``) for the second
    assert sorted(t.args for t in bf16) == [(16, 256, 64, bias), (16, 256, 256, bias_relu, 1)]
    assert all(t.config_space.knobs[0].name == "tile" and len(t.config_space) > 4 for t in bf16)
    log = str(tmp_path / "bf16.json")
    option = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=2), autotvm.LocalRunner(number=2, repeat=1))
    tuner = RandomTuner(bf16[0], seed=0)
    tuner.tune(4, option, callbacks=[autotvm.callback.log_to_file(log)])
    assert len(tuner.history) == 4 and all(h["error_no"] == 0 for h in tuner.history), tuner.history
    with autotvm.apply_history_best(log), pytest.warns(UserWarning, match="tunable functions have no record"):  # one tuned of two
        exe = build_model(spec, mod, params, HOST, "bfloat16")
        best = autotvm.DispatchContext.current_config(bf16[0])
    assert best.index == tuner.best_config.index
    vm = relax.VirtualMachine(exe, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(t.numpy()) for t in model.inputs])
    got = [o.numpy() for o in (out if not hasattr(out, "numpy") else [out])]
    assert cosine(got, model.torch_outputs()) > 0.9999


def test_convolutions_tile_and_fold_few_channels_into_the_taps():
    stem = x86_bf16.Conv2D(224, 224, 3, 64, 7, 7, 2, 3, 3, 3, 3)  # ResNet's first layer, on RGB
    assert stem.out == (112, 112) and stem.folded and stem.pairs == 11  # 7 taps x 3 channels, and a zero
    assert x86_bf16.pack_conv2d_weight(np.ones((64, 7, 7, 3), np.float32), stem).shape == (1, 7, 1, 11, 64, 2)
    assert all(kt == 11 and 112 % mr == 0 for mr, _, kt, _ in x86_bf16.conv2d_tiles(stem))
    body = x86_bf16.Conv2D(7, 7, 512, 512, 3, 3, 1, 1, 1, 1, 1)
    assert not body.folded and {mr for mr, _, _, _ in x86_bf16.conv2d_tiles(body)} == {7}
    # AMX: tiles of 7 pixels (a row), or of 16 to 64 that run flat through the padded rows
    assert {mr for mr, _, _, _ in x86_bf16.conv2d_tiles(body, amx=True)} == {7, 16, 32, 48, 64}
    assert body.flat(16) and not body.flat(7) and body.width == 9
    assert not stem.flat(16) and not x86_bf16.Conv2D(14, 14, 256, 512, 3, 3, 2, 1, 1, 1, 1).flat(16)
    # 7 pixels a row: no tile's columns fill 64 filters, so the weight comes in blocks of 32 that
    # its tiles of 7 x 32 read whole; 56 pixels a row: tiles of 2 x 64 fill blocks of 64
    assert body.block == 32 and x86_bf16.Conv2D(56, 56, 64, 64, 3, 3, 1, 1, 1, 1, 1).block == 64
    assert x86_bf16.pack_conv2d_weight(np.ones((512, 3, 3, 512), np.float32), body).shape == (16, 3, 3, 256, 32, 2)
    with pytest.raises(autotvm.AutoTVMError, match="not the OHWI weight"):
        x86_bf16.pack_conv2d_weight(np.ones((512, 3, 3, 256), np.float32), body)
    # 24 filters: computed as 32, the packed weight's last 8 zeros
    narrow = x86_bf16.Conv2D(8, 8, 64, 24, 3, 3, 1, 1, 1, 1, 1)
    assert x86_bf16.conv2d_fits(narrow) and (narrow.filters, narrow.block) == (32, 32)
    packed = x86_bf16.pack_conv2d_weight(np.ones((24, 3, 3, 64), np.float32), narrow)
    assert packed.shape == (1, 3, 3, 32, 32, 2) and not packed[..., 24:, :].any() and packed[..., :24, :].all()
    with pytest.raises(autotvm.AutoTVMError, match="takes 12 or 13 integers"):
        autotvm.task.create(x86_bf16.CONV_TEMPLATE, [56, 56, 64], HOST)


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
@pytest.mark.parametrize("amx, all_rows", [(False, False), *[  # AMX's kernel summing one filter row a call, or all
    pytest.param(True, rows, marks=pytest.mark.skipif(not HAS_AMX, reason="no AMX")) for rows in (False, True)]])
@pytest.mark.parametrize("shape, order", [
    ((9, 14, 64, 32, 3, 3, 1, 1, 1, 1, 1), "rows"),
    ((13, 11, 32, 48, 3, 3, 2, 0, 1, 2, 1), "channels"),  # stride 2, uneven pads, 3 vectors of filters
    ((12, 12, 5, 32, 3, 3, 2, 1, 1, 1, 1), "weights"),  # few channels: folded
    ((10, 10, 64, 32, 1, 1, 2, 0, 0, 0, 0), "rows"),  # a 1x1 downsampling
    ((14, 14, 144, 24, 1, 1, 1, 0, 0, 0, 0), "channels"),  # 24 filters (computed as 32), 72 pairs: folded (AMX: 16 x 4 + 8)
    ((9, 14, 64, 40, 3, 3, 1, 1, 1, 1, 1), "rows"),  # 40 filters (48)
    ((7, 7, 64, 64, 3, 3, 1, 1, 1, 1, 1), "weights"),  # 7 pixels a row: two blocks of 32 filters
])
def test_the_convolution_kernel_computes_the_bfloat16_convolution_in_float32(shape, order, amx, all_rows):
    import ml_dtypes
    import torch

    shape = x86_bf16.Conv2D(*shape)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, shape.h, shape.w, shape.c)).astype(ml_dtypes.bfloat16).astype(np.float32)
    w = rng.standard_normal((shape.co, shape.kh, shape.kw, shape.c)).astype(ml_dtypes.bfloat16).astype(np.float32)
    tile = x86_bf16.conv2d_tiles(shape, amx)[0]
    mod = x86_bf16.conv2d_tiled(shape, tile, order, shape.kh if all_rows else 1).mod
    assert ("Y_pixels" in mod.script()) == shape.flat(tile.mr) == (amx and shape.stride == 1 and not shape.folded
                                                                   and shape.out[1] % 16 != 0)
    assert (f"tvm_amx_bf16_conv_{shape.kh}x" in mod.script()) == (all_rows and shape.kh > 1)
    lib = _build(mod)
    y = tvm.runtime.tensor(np.zeros((1, *shape.out, shape.co), np.float32))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(x86_bf16.pack_conv2d_weight(w, shape)), y)
    padded = torch.nn.functional.pad(torch.tensor(x).permute(0, 3, 1, 2),
                                     (shape.pad_left, shape.pad_right, shape.pad_top, shape.pad_bottom))
    expected = torch.nn.functional.conv2d(padded, torch.tensor(w).permute(0, 3, 1, 2), stride=shape.stride)
    expected = expected.permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.skipif(not HAS_AMX, reason="no AMX")
@pytest.mark.parametrize("taps", [1, 3])
def test_a_flat_amx_tile_writes_the_sums_of_a_tile_of_rows(taps):
    """On 7 x 7 maps an AMX tile of 16 or 32 pixels runs flat through the padded rows (two
    pixels of each computed and not written): the same bits as tiles of 7, its epilogue (bias,
    residual, ReLU) a stage after the sums."""
    import ml_dtypes

    shape = x86_bf16.Conv2D(7, 7, 64, 40, 3, 3, 1, 1, 1, 1, 1, x86_bf16.EPILOGUES.index("bias_add_relu"))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 7, 7, 64)).astype(np.float32)
    w = rng.standard_normal((40, 3, 3, 64)).astype(ml_dtypes.bfloat16).astype(np.float32)
    args = [x, x86_bf16.pack_conv2d_weight(w, shape), rng.standard_normal(40).astype(np.float32),
            rng.standard_normal((1, 7, 7, 40)).astype(np.float32)]
    outputs = []
    for tile in ("amx-7x1x32", "amx-16x1x32", "amx-32x1x32"):
        mod = x86_bf16.conv2d_tiled(shape, x86_bf16.Tile.parse(tile), "rows", taps).mod
        y = tvm.runtime.tensor(np.zeros((1, 7, 7, 40), np.float32))
        _build(mod)["main"](*map(tvm.runtime.tensor, args), y)
        outputs.append(y.numpy())
    assert outputs[0].min() == 0 and outputs[0].max() > 0
    np.testing.assert_array_equal(outputs[1], outputs[0])
    np.testing.assert_array_equal(outputs[2], outputs[0])
    with pytest.raises(autotvm.AutoTVMError, match="does not run flat"):
        x86_bf16.conv2d(shape, 7)


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
@pytest.mark.parametrize("dims, tile", [
    ((7, 7, 64, 40, 3, 3, 1, 1, 1, 1, 1), "7x3x32"),
    ((12, 12, 5, 32, 3, 3, 2, 1, 1, 1, 1), None),  # few channels: folded (its first tile)
    *[pytest.param((7, 7, 64, 40, 3, 3, 1, 1, 1, 1, 1), t, marks=pytest.mark.skipif(not HAS_AMX, reason="no AMX"))
      for t in ("amx-7x1x32", "amx-16x1x32")]])  # the last one flat
def test_a_convolution_reads_and_writes_bfloat16_activations_where_its_io_has_them(dims, tile):
    """Its input, residual and output in bfloat16 (``Conv2D.io``): the bits of the float32
    build's output rounded to bfloat16, for the same values in, through a tile's epilogue, a flat
    tile's stage and a folded input."""
    import ml_dtypes

    rng = np.random.default_rng(2)
    shape = x86_bf16.Conv2D(*dims, x86_bf16.EPILOGUES.index("bias_add_relu"))
    tile = x86_bf16.Tile.parse(tile) if tile else x86_bf16.conv2d_tiles(shape)[0]
    out = (1, *shape.out, shape.co)
    x, residual = (rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((1, shape.h, shape.w, shape.c), out))
    w = x86_bf16.pack_conv2d_weight(rng.standard_normal((shape.co, shape.kh, shape.kw, shape.c)).astype(np.float32),
                                    shape)
    bias = rng.standard_normal(shape.co).astype(np.float32)
    outputs = []
    for io, dtype in ((0, np.float32), (2 ** len(x86_bf16.CONV_IO) - 1, ml_dtypes.bfloat16)):
        layer = shape._replace(io=io)
        assert {layer.dtype(name) for name in x86_bf16.CONV_IO} == {np.dtype(dtype).name}
        y = tvm.runtime.tensor(np.zeros(out, dtype))
        lib = _build(x86_bf16.conv2d_tiled(layer, tile, "rows", shape.kh if tile.amx else 1).mod)
        lib["main"](*(tvm.runtime.tensor(a) for a in (x.astype(dtype), w, bias, residual.astype(dtype))), y)
        outputs.append(y.numpy())
    assert outputs[1].dtype == ml_dtypes.bfloat16 and outputs[0].max() > 0
    np.testing.assert_array_equal(outputs[1].view(np.uint16), outputs[0].astype(ml_dtypes.bfloat16).view(np.uint16))


@pytest.mark.parametrize("build", ["matmul", "conv2d"])
def test_an_amx_tile_starts_from_zeroed_tiles_not_a_call_of_memset(build):
    """A tile's sums start from AMX's zeroed tiles (``x86_amx.zero_ir``): TVM's own loop of zeros
    over a tile small enough to sit on the stack became a call of ``memset``, after which LLVM
    loaded the tiles' configuration again, on every tile. Compiled, not run: any x86 CPU."""
    target = autotvm.make_target({"kind": "llvm", "mcpu": "sapphirerapids"})
    bias_relu = x86_bf16.EPILOGUES.index("bias_relu")
    if build == "matmul":  # a 7 x 32 tile's sums: 896 bytes
        sch = x86_bf16.schedule(x86_bf16.matmul(28, 64, 64, bias_relu), 7, 2, 32, amx=True)
    else:
        shape = x86_bf16.Conv2D(14, 14, 64, 16, 3, 3, 1, 1, 1, 1, 1, bias_relu)
        sch = x86_bf16.conv2d_tiled(shape, x86_bf16.Tile.parse("amx-14x1x32"), "rows", 3)
    code = tvm.compile(sch.mod, target=target).mod.inspect_source("ll")
    assert "llvm.x86.tilezero.internal" in code and not re.search(r"llvm\.memset.*i64 896,", code)


def test_a_tiles_sums_stay_on_the_stack_in_the_kernels_and_only_there():
    """A tile's sums of 1 KB or more (14 x 48 float32 here: 2.6 KB) are allocated on the stack,
    not taken from the runtime's workspace pool on every tile (``autotvm.lowering``); a function
    without the micro-kernels keeps TVM's rule. Compiled, not run: any x86 CPU."""
    target = autotvm.make_target({"kind": "llvm", "mcpu": "sapphirerapids"})
    shape = x86_bf16.Conv2D(2, 14, 16, 48, 1, 1, 1, 0, 0, 0, 0, x86_bf16.EPILOGUES.index("bias_relu6"), 5)
    kernels = x86_bf16.conv2d_tiled(shape, x86_bf16.Tile.parse("amx-14x3x8"), "rows").mod
    sch = tvm.s_tir.Schedule(x86_bf16.conv2d(shape))  # the same function on plain loops: its sums one 5 KB buffer
    sch.parallel(sch.get_loops(sch.get_sblock("Y"))[1])
    for mod, pipeline, workspace in ((kernels, "default", True), (kernels, tir_pipeline(target), False),
                                     (sch.mod, tir_pipeline(target), True)):
        code = tvm.compile(mod, target=target, tir_pipeline=pipeline).mod.inspect_source("ll")
        assert ("@__TVMBackendAllocWorkspace, " in code) == workspace, (pipeline, workspace)


def _cast_to_bf16(n, lanes):
    """A function casting n float32 to bfloat16, ``lanes`` a step (a vector, or one)."""
    from tvm import te

    a = te.placeholder((n,), "float32", name="A")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, te.compute((n,), lambda i: a[i].astype("bfloat16"), name="B")]))
    inner = sch.split(sch.get_loops(sch.get_sblock("B"))[0], [None, lanes])[1]
    if lanes > 1:
        sch.vectorize(inner)
    return sch.mod


def test_a_vector_cast_to_bfloat16_is_one_instruction_where_the_cpu_has_it():
    """A float32 -> bfloat16 vector cast is ``vcvtneps2bf16`` on a CPU with AVX512-BF16 under
    ``tir_pipeline`` (TVM's default writes integer rounding); without AVX512-BF16, and for a
    scalar cast, TVM's form stays. Where this CPU has it, the bits are numpy's (ml_dtypes) round
    to nearest even, subnormals flushed to zero."""
    import ml_dtypes

    bf16, avx2 = (autotvm.make_target({"kind": "llvm", "mcpu": cpu}) for cpu in ("sapphirerapids", "znver3"))
    for lanes, target, pipeline, one in ((16, bf16, tir_pipeline(bf16), True), (48, bf16, tir_pipeline(bf16), True),
                                         (16, bf16, "default", False), (1, bf16, tir_pipeline(bf16), False),
                                         (16, avx2, tir_pipeline(avx2), False)):
        code = tvm.compile(_cast_to_bf16(96, lanes), target=target, tir_pipeline=pipeline).mod.inspect_source("asm")
        assert ("vcvtneps2bf16" in code) == one, (lanes, str(target), pipeline)
    if not HAS_BF16:
        return
    x = np.random.RandomState(0).randn(4800).astype("float32") * 100
    x[:9] = [np.nan, np.inf, -np.inf, 3.4e38, 1.00390625, 1.01171875, -0.0, 1e-40, -1e-40]  # ties round to even
    for lanes in (16, 48):
        out = tvm.runtime.tensor(np.zeros(x.shape, ml_dtypes.bfloat16))
        _build(_cast_to_bf16(x.size, lanes))["main"](tvm.runtime.tensor(x), out)
        bits, expected = out.numpy().view("uint16"), x.astype(ml_dtypes.bfloat16).view("uint16")
        assert np.isnan(out.numpy()[0]) and np.array_equal(bits[1:7], expected[1:7]), bits[:9]
        assert list(bits[7:9]) == [0, 0x8000] and np.array_equal(bits[9:], expected[9:])


@pytest.mark.parametrize("amx", [True, False])
def test_a_tile_whose_k_is_one_call_starts_its_sums_at_zero_in_the_kernel(amx):
    """Where one call of the kernel sums all of a tile's K (all its taps and channels), its sums
    start at zero in the tiles or registers: C is neither zeroed before the call nor read by it.
    Where K takes more calls, the first reads C's zeros. Scheduled, not run (the products are
    checked above, with tiles of both kinds)."""
    for kt, once in ((32, True), (16, False)):  # 32 pairs of K in one call or two
        script = x86_bf16.schedule(x86_bf16.matmul(28, 64, 64), 7, 2, kt, amx=amx).mod.script()
        assert ("_zeroed" in script, "tvm_amx_zero" in script) == (once, amx and not once), (kt, amx)
    if amx:  # a 1x1 convolution, and 3x3 ones: all filter rows a call but a call a filter column, and folded
        for dims, taps, once in (((14, 14, 32, 16, 1, 1, 1, 0, 0, 0, 0), 1, True),
                                 ((14, 14, 64, 16, 3, 3, 1, 1, 1, 1, 1), 3, False),
                                 ((28, 28, 3, 16, 3, 3, 2, 1, 1, 1, 1), 3, True)):
            shape = x86_bf16.Conv2D(*dims)
            tile = x86_bf16.Tile(14, 1, shape.pairs if shape.pairs < 16 else 16, True)
            script = x86_bf16.conv2d_tiled(shape, tile, "rows", taps).mod.script()
            assert ("_zeroed" in script, "tvm_amx_zero" in script) == (once, not once), dims


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
def test_a_bfloat16_network_tunes_its_convolutions_and_stays_accurate(tmp_path):
    """A small residual network in bfloat16: every convolution (the RGB stem folded) becomes the
    convolution template's task, with the tile and the loop order as knobs (on AMX also whether a
    call of the kernel sums all the filter's rows), and takes in what follows it (the bias batch
    norm folded into, the ReLU, the residual); the activations between convolutions are bfloat16
    (the last one's output, which the pooling reads, float32); the tuned build stays within a
    cosine of 0.9999 of PyTorch in float32."""
    from tvm import relax

    from autotvm.tuner import RandomTuner
    from tools.models import build_model, model_tasks
    from tools.timing import cosine

    spec = {"name": "cnn", "type": "torch", "model": "cnn", "width": 32, "image_size": 32}
    model, mod, params, tasks = model_tasks(spec, HOST, "bfloat16")
    convs = {t.args: t for t in tasks if t.name == x86_bf16.CONV_TEMPLATE}
    bias_relu, bias_add_relu = (x86_bf16.EPILOGUES.index(name) for name in ("bias_relu", "bias_add_relu"))
    x, residual, out = (1 << x86_bf16.CONV_IO.index(name) for name in ("input", "residual", "output"))
    assert sorted(convs) == [(16, 16, 32, 32, 3, 3, 1, 1, 1, 1, 1, bias_relu, x | out),
                             (16, 16, 32, 32, 3, 3, 1, 1, 1, 1, 1, bias_add_relu, x | residual | out),
                             (16, 16, 32, 64, 3, 3, 2, 1, 1, 1, 1, bias_relu, x),
                             (32, 32, 3, 32, 3, 3, 2, 1, 1, 1, 1, bias_relu, out)]
    others = [t.name for t in tasks if t.name not in (x86_bf16.CONV_TEMPLATE, x86_bf16.TEMPLATE)]
    assert not [name for name in others if "relu" in name or "conv" in name]  # all taken into the kernels
    task = convs[(16, 16, 32, 32, 3, 3, 1, 1, 1, 1, 1, bias_add_relu, x | residual | out)]
    assert [k.name for k in task.config_space.knobs] == ["tile", "order"] + ["taps"] * x86_bf16.uses_amx(HOST)
    log = str(tmp_path / "cnn.json")
    option = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=2), autotvm.LocalRunner(number=2, repeat=1))
    tuner = RandomTuner(task, seed=0)
    tuner.tune(3, option, callbacks=[autotvm.callback.log_to_file(log)])
    assert all(h["error_no"] == 0 for h in tuner.history), tuner.history
    with autotvm.apply_history_best(log), pytest.warns(UserWarning, match="tunable functions have no record"):  # one tuned of several
        exe = build_model(spec, mod, params, HOST, "bfloat16")
        assert autotvm.DispatchContext.current_config(task).index == tuner.best_config.index
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](*[tvm.runtime.tensor(t.numpy()) for t in model.inputs])
    got = [o.numpy() for o in (out if not hasattr(out, "numpy") else [out])]
    assert cosine(got, model.torch_outputs()) > 0.9999


def _bound_program(model, x):
    """(Relax module of a PyTorch module, its weights by name, its float32 output)."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    with torch.no_grad():
        expected = model(x).numpy()
        mod, params = relax.frontend.detach_params(from_exported_program(torch.export.export(model, (x,)),
                                                                         keep_params_as_input=True))
    names = [p.name for p in mod["main"].params[1:]]
    return mod, {name: tvm.runtime.tensor(p.numpy()) for name, p in zip(names, params["main"])}, expected


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
def test_a_downsampling_block_gives_the_residual_add_to_one_of_its_two_convolutions():
    """relu(bn(conv3x3(x)) + bn(conv1x1(x))): both addends are convolutions with a bias; one takes
    the residual add and the ReLU in, the other only its bias, and neither stays float32."""
    import torch
    from torch import nn

    class Downsample(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(32, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64))
            self.short = nn.Sequential(nn.Conv2d(32, 64, 1, 2, 0, bias=False), nn.BatchNorm2d(64))

        def forward(self, x):
            return torch.relu(self.body(x) + self.short(x))

    torch.manual_seed(0)
    mod, bound, _ = _bound_program(Downsample().eval(), torch.randn(1, 32, 16, 16))
    tasks = autotvm.task.extract_from_program(mod, HOST, bound, precision="bfloat16")
    kinds = sorted(x86_bf16.EPILOGUES[t.args[11]] for t in tasks if t.name == x86_bf16.CONV_TEMPLATE)
    assert kinds == ["bias", "bias_add_relu"]
    assert not [t.name for t in tasks if "conv2d" in t.name and t.name != x86_bf16.CONV_TEMPLATE]


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
def test_an_inverted_residual_block_takes_its_relu6_into_the_expanding_convolution():
    """MobileNetV2's block after a convolution x, x + bn(conv1x1(relu6(bn(dwconv3x3(relu6(bn(
    conv1x1(x)))))))): the expanding convolution takes its bias and ReLU6 (a clip to [0, 6]) in,
    the projecting one its bias and the residual; no kernel only clips. The depthwise one stays
    with MetaSchedule, its bias and ReLU6 in its kernel, and reads and writes bfloat16: the
    expanding convolution writes its output so, the projecting one reads it so."""
    import torch
    from torch import nn
    from tvm import relax

    class InvertedResidual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(32, 32, 1, bias=False), nn.BatchNorm2d(32))
            self.expand = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6())
            self.depthwise = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, groups=64, bias=False), nn.BatchNorm2d(64),
                                           nn.ReLU6())
            self.project = nn.Sequential(nn.Conv2d(64, 32, 1, bias=False), nn.BatchNorm2d(32))

        def forward(self, x):
            x = self.stem(x)
            return x + self.project(self.depthwise(self.expand(x)))

    torch.manual_seed(0)
    model = InvertedResidual().eval()
    for norm in (model.stem[1], model.expand[1], model.depthwise[1], model.project[1]):
        norm.running_mean.uniform_(-1, 1), norm.running_var.uniform_(0.5, 2), norm.weight.data.uniform_(1, 4)
    model.expand[1].running_var.uniform_(0.02, 0.1)  # a third of the expanded values clipped at 6
    x = torch.randn(1, 32, 16, 16)
    mod, bound, expected = _bound_program(model, x)
    tasks = autotvm.task.extract_from_program(mod, HOST, bound, precision="bfloat16", conv_layout="NHWC")
    kinds = {t.args[:4]: x86_bf16.EPILOGUES[t.args[11]] for t in tasks if t.name == x86_bf16.CONV_TEMPLATE}
    assert kinds == {(16, 16, 32, 32): "bias", (16, 16, 32, 64): "bias_relu6", (16, 16, 64, 32): "bias_add"}
    assert not [t.name for t in tasks if "clip" in t.name and "conv2d" not in t.name]
    io = {t.args[:4]: t.args[12] for t in tasks if t.name == x86_bf16.CONV_TEMPLATE}
    conv_io = {name: 1 << i for i, name in enumerate(x86_bf16.CONV_IO)}
    assert io == {(16, 16, 32, 32): conv_io["output"], (16, 16, 32, 64): conv_io["input"] | conv_io["output"],
                  (16, 16, 64, 32): conv_io["input"] | conv_io["residual"]}
    (depthwise,) = [t for t in tasks if "conv2d" in t.name and t.name != x86_bf16.CONV_TEMPLATE]
    params = depthwise.mod["main"].params
    assert [str(p.dtype) for p in (params[0], params[-1])] == ["bfloat16"] * 2
    exe = autotvm.build_program(mod, HOST, bound, precision="bfloat16", conv_layout="NHWC")
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = (got[0] if not hasattr(got, "numpy") else got).numpy()
    assert (model.expand(model.stem(x)).detach().numpy() >= 6).mean() > 0.2  # the clip's top bound is reached
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-2 * np.abs(expected).max())


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
def test_a_transformer_feed_forward_takes_its_gelu_and_residual_into_the_matmuls():
    """x + down(gelu(up(x))), as BERT's feed-forward: the first matmul takes its bias and GELU and
    writes bfloat16 for the second, which takes its bias and the residual, through the reshapes
    PyTorch's linear layers export."""
    import torch
    from tvm import relax

    class FeedForward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up, self.down = torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(x)))

    torch.manual_seed(0)
    model, x = FeedForward().eval(), torch.randn(1, 16, 64)
    mod, bound, expected = _bound_program(model, x)
    tasks = autotvm.task.extract_from_program(mod, HOST, bound, precision="bfloat16")
    kinds = {t.args: x86_bf16.EPILOGUES[t.args[3]] for t in tasks if t.name == x86_bf16.TEMPLATE}
    # the first writes bfloat16 (``OUT_DTYPES[1]``): only the second reads it, as it is (no kernel casts it)
    assert kinds == {(16, 64, 128, 4, 1): "bias_gelu", (16, 128, 64, 5): "bias_add"}
    assert not [t.name for t in tasks if t.name.startswith("cast") and [int(d) for d in t.mod["main"].params[0].ty.shape] == [16, 128]]
    assert not [t.name for t in tasks if "gelu" in t.name or "add" in t.name]  # nothing left beside them
    exe = autotvm.build_program(mod, HOST, bound, precision="bfloat16")
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = (got[0] if not hasattr(got, "numpy") else got).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-2 * np.abs(expected).max())


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16")
def test_attention_multiplies_its_activations_in_bfloat16_cast_where_they_are_computed():
    """A BERT layer with heads of 32 over 32 tokens: its two products of activations (the queries by
    the keys with the mask added, the weights by the values) are the batched template's tasks; each
    operand is cast (and the right one packed) in the kernel that computes it, the softmax's
    included (on its own template), so no kernel only casts them; the build's outputs stay within
    a cosine of 0.9999 of PyTorch's float32 ones."""
    import torch
    import transformers
    from tvm import relax

    from tools.models import Model, bound_params
    from tools.timing import cosine

    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=128, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=256, vocab_size=100)
    model = Model("bert", transformers.BertModel(config).eval(), (torch.randint(0, 100, (1, 32)),))
    mod, params = model.to_relax()
    bound = bound_params(mod, params)
    tasks = autotvm.task.extract_from_program(mod, HOST, bound, precision="bfloat16")
    batched = sorted(t.args for t in tasks if t.name == x86_bf16.BATCH_TEMPLATE)
    add, none = (x86_bf16.BATCH_EPILOGUES.index(kind) for kind in ("add_broadcast", "none"))
    assert batched == [(4, 32, 32, 32, none), (4, 32, 32, 32, add)], [t.name for t in tasks]
    # the softmax on its template, row by row, writing bfloat16 for the product that reads it
    assert [t.args for t in tasks if "softmax" in t.name] == [(4 * 32, 32, x86_softmax.OUT_DTYPES.index("bfloat16"))]
    casts = {t.name: [int(d) for d in t.mod["main"].params[0].ty.shape] for t in tasks if t.name.startswith("cast")}
    # cast on their own, as before: only the weight matmuls' inputs that a norm computes
    assert list(casts.values()) == [[32, 128]], casts
    exe = autotvm.build_program(mod, HOST, bound, precision="bfloat16")
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(model.inputs[0].numpy()))
    got = [o.numpy() for o in (out if not hasattr(out, "numpy") else [out])]
    assert cosine(got, model.torch_outputs()) > 0.9999


@pytest.mark.parametrize("out", x86_softmax.OUT_DTYPES)
def test_the_row_softmax_template_gives_the_safe_softmax_at_every_vector_width(out):
    """Every ``lanes`` of the template: the softmax of each row within float32's (or bfloat16's)
    rounding, zero on a row of -inf only, a row with some -inf right; 16 lanes fill AVX-512's
    registers, and the rows are read as rows (no gather)."""
    import ml_dtypes

    rows, width = 24, 64
    task = autotvm.task.create(x86_softmax.TEMPLATE, [rows, width, x86_softmax.OUT_DTYPES.index(out)], HOST)
    assert [task.config_space.get(i)["lanes"].val for i in range(len(task.config_space))] == [16, 8, 32]
    x = np.random.RandomState(0).randn(rows, width).astype("float32") * 4
    x[3] = -np.inf
    x[5, :40] = -np.inf
    with np.errstate(invalid="ignore"):
        expected = np.exp(x - x.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
    expected[3] = 0
    dtype = ml_dtypes.bfloat16 if out == "bfloat16" else np.float32
    for i in range(len(task.config_space)):
        lib = _build(task.instantiate(task.config_space.get(i)))
        got = tvm.runtime.tensor(np.full(x.shape, 7, dtype))
        lib["main"](tvm.runtime.tensor(x), got)
        np.testing.assert_allclose(got.numpy().astype("float32"), expected, rtol=0,
                                   atol=4e-3 if out == "bfloat16" else 1e-5)
        assert not got.numpy()[3].any() and not got.numpy()[5, :40].any()
    target = autotvm.make_target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2})
    with target:
        asm = tvm.compile(task.instantiate(task.config_space.get(0)), target=target,
                          tir_pipeline=tir_pipeline(target)).mod.inspect_source("asm")
    assert "zmm" in asm and "vgather" not in asm


def test_bfloat16_on_a_cpu_without_avx512_bf16_is_one_line():
    from tools.models import model_tasks

    with pytest.raises(autotvm.AutoTVMError, match="bfloat16' needs a CPU with AVX512-BF16.*'znver3' has none"):
        model_tasks({"name": "m", "type": "op", "workload": "mm64"},
                    autotvm.make_target({"kind": "llvm", "mcpu": "znver3"}), "bfloat16")
