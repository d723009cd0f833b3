"""Winograd convolution for Relax models: 3x3 stride-1 NHWC convolutions with constant weights
become F(m x m, 3 x 3) Winograd kernels, whose weights are transformed once, at compile time.

F(4x4, 3x3) computes a 4x4 output tile with 6x6 = 36 multiplies per (input, output) channel
pair where the direct convolution needs 16 x 9 = 144: 4x fewer in the batched GEMM that
dominates, for a little extra work in the input and output transforms. This is the algorithm
AutoTVM and Ansor used for 3x3 convolutions; the TE below follows the block names of TOPI's
``conv2d_winograd_nhwc`` so MetaSchedule's own Winograd schedule rules
(``conv2d_nhwc_winograd_data_pack`` / ``_inverse``) tile it, and the batched GEMM gets the
usual multi-level tiling. TOPI's variant with a pre-transformed weight is no longer available
in TVM 0.27, hence this module. Maps at most 14 wide use F(2x2, 3x3); maps at most 7 wide stay
direct (``tile_for``).

Float32 results differ from the direct convolution by rounding only (max abs error 4e-7 on
ResNet-18's output, against PyTorch).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax, te, topi

from .relax_calls import nhwc_conv2d

TILE = 4  # m of F(m x m, 3 x 3) on large maps
SMALL_MAP_TILE, SMALL_MAP = 2, 14  # m on maps at most SMALL_MAP wide (see ``tile_for``)
DIRECT_MAP = 7  # maps at most this wide stay direct convolutions (see ``tile_for``)


def tile_for(out_h: int, out_w: int) -> int | None:
    """F(4x4) on large maps; F(2x2) on small ones, where the channels are many and the layer
    is weight-bound: the Winograd weight is (m+2)^2/9 times the direct one (4x for F(4x4), 1.8x
    for F(2x2)), and ResNet's 7x7 and 14x14 layers read theirs from memory on every call. None
    (the direct convolution) on the smallest: a 7x7 map is 16 tiles of F(2x2), so each Winograd
    weight serves 16 tiles where the direct one serves 49 pixels, for 1.8x the bytes; the layer is
    bound by reading its weight, and the direct convolution reads less."""
    if max(out_h, out_w) <= DIRECT_MAP:
        return None
    return SMALL_MAP_TILE if max(out_h, out_w) <= SMALL_MAP else TILE


def transform_matrices(tile: int = TILE, kernel: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, B, G) of F(tile x tile, kernel x kernel), from TVM's Cook-Toom construction (the same
    interpolation points TOPI uses, chosen for float32 accuracy)."""
    from tvm.topi.nn import winograd_util

    points = winograd_util._interpolation_points(tile + kernel - 2)
    return winograd_util._cook_toom_convolution(points, tile, kernel)


def transform_weight(weight_ohwi: np.ndarray, tile: int = TILE) -> np.ndarray:
    """The Winograd-domain weight U[eps, nu, co, ci] = G w[co, :, :, ci] G^T."""
    _, _, g = transform_matrices(tile)
    return np.einsum("ek,fl,okli->efoi", g, g, weight_ohwi.astype(np.float64)).astype(weight_ohwi.dtype)


def winograd_nhwc(data: te.Tensor, packed_weight: te.Tensor, padding: tuple[int, int, int, int]) -> te.Tensor:
    """NHWC 3x3 stride-1 convolution from a Winograd-domain weight (``transform_weight``; its
    first dimension, alpha = m + 2, sets the tile m)."""
    n, h, w, ci = (int(x) for x in data.shape)
    alpha, _, co, _ = (int(x) for x in packed_weight.shape)
    tile = alpha - 2
    pad_t, pad_l, pad_b, pad_r = padding
    out_h, out_w = h + pad_t + pad_b - 2, w + pad_l + pad_r - 2
    tiles_h, tiles_w = (out_h + tile - 1) // tile, (out_w + tile - 1) // tile
    n_tiles = n * tiles_h * tiles_w
    a_np, b_np, _ = transform_matrices(tile)
    a_mat = topi.utils.const_matrix(a_np.astype(np.float32), "A")
    b_mat = topi.utils.const_matrix(b_np.astype(np.float32), "B")

    # pad so that every tile, including the last partial one, reads alpha x alpha inputs
    extra_h = (tiles_h - 1) * tile + alpha - (h + pad_t + pad_b)
    extra_w = (tiles_w - 1) * tile + alpha - (w + pad_l + pad_r)
    data_pad = topi.nn.pad(data, (0, pad_t, pad_l, 0), (0, pad_b + extra_h, pad_r + extra_w, 0),
                           name="data_pad", attrs={"schedule_rule": "None"})

    def tile_origin(p: Any) -> tuple[Any, Any, Any]:
        return p // (tiles_h * tiles_w), (p // tiles_w) % tiles_h * tile, p % tiles_w * tile

    def input_at(eps: Any, nu: Any, p: Any, c: Any) -> Any:
        img, y, x = tile_origin(p)
        return data_pad[img, y + eps, x + nu, c]

    input_tile = te.compute((alpha, alpha, n_tiles, ci), input_at, name="input_tile",
                            attrs={"schedule_rule": "None"})
    ra, rb = te.reduce_axis((0, alpha), "r_a"), te.reduce_axis((0, alpha), "r_b")
    data_pack = te.compute(
        (alpha, alpha, n_tiles, ci),
        lambda eps, nu, p, c: te.sum(input_tile[ra, rb, p, c] * b_mat[ra, eps] * b_mat[rb, nu], axis=[ra, rb]),
        name="data_pack", attrs={"schedule_rule": "conv2d_nhwc_winograd_data_pack"})
    rc = te.reduce_axis((0, ci), "ci")
    bgemm = te.compute(
        (alpha, alpha, n_tiles, co),
        lambda eps, nu, p, o: te.sum(data_pack[eps, nu, p, rc] * packed_weight[eps, nu, o, rc], axis=[rc]),
        name="bgemm")
    ra, rb = te.reduce_axis((0, alpha), "r_a"), te.reduce_axis((0, alpha), "r_b")
    inverse = te.compute(
        (tile, tile, n_tiles, co),
        lambda vh, vw, p, o: te.sum(bgemm[ra, rb, p, o] * a_mat[ra, vh] * a_mat[rb, vw], axis=[ra, rb]),
        name="inverse", attrs={"schedule_rule": "conv2d_nhwc_winograd_inverse"})
    return te.compute(
        (n, out_h, out_w, co),
        lambda img, y, x, o: inverse[y % tile, x % tile, img * tiles_h * tiles_w + y // tile * tiles_w + x // tile, o],
        name="conv2d_winograd")


def _eligible(call: relax.Call) -> bool:
    """A float32 NHWC/OHWI 3x3 stride-1, undilated, ungrouped conv2d of static shape whose weight is a constant."""
    conv = nhwc_conv2d(call)
    return conv is not None and conv.stride == 1 and tuple(conv.weight.value.shape[1:3]) == (3, 3)


@relax.expr_functor.mutator
class _WinogradRewriter(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not _eligible(call):
            return call
        data, weight = call.args
        padding = tuple(int(p) for p in call.attrs.padding)
        _, h, w, _ = (int(d) for d in data.ty.shape.values)
        tile = tile_for(h + padding[0] + padding[2] - 2, w + padding[1] + padding[3] - 2)
        if tile is None:
            return call
        packed = relax.const(transform_weight(weight.value.numpy(), tile))
        return self.builder_.call_te(winograd_nhwc, data, packed, padding, primfunc_name_hint="conv2d_winograd")


@tvm.transform.module_pass(opt_level=0, name="WinogradConv2d")
def winograd_conv2d(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    """Rewrite every eligible conv2d of the module's Relax functions (see the module docstring)."""
    rewriter = _WinogradRewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()
