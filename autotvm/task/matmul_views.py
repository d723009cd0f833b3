"""On a GPU, a matmul of two activations reads them where they lie: a transformer's attention heads.

PyTorch's attention takes its heads out of the query/key/value projection's output by slices,
reshapes and transposes, scales the query and the key, and puts the heads of its output back by
transposes and a reshape. Each of these copies is a kernel of its own on a GPU: four a layer,
around two small matmuls. ``matmuls_read_views`` computes such a matmul as one function that

* reads each operand's source tensor in place, through the index map of the views between them
  (``strided_slice``, ``reshape``, ``permute_dims``, ``broadcast_to``, ``squeeze``,
  ``expand_dims``), where that map is affine, found by applying the views to the source's
  element numbers;
* writes its output in the axis order the views after it make, where they are a permutation of
  its axes and a reshape (which is then a view, no copy);
* multiplies by an operand's scalar factor after the sum, where it fuses as an epilogue, and casts
  an operand before its views, where the cast fuses into the kernel that computes the source.

An operand read in place reads its source through a reshape in order (a view, no copy) that gives
each axis of the operand an axis of the source of its own, where one does: a tile of the operand
then reads a box of the source no larger than itself (its shared-memory copy too). A source that
both operands read (the query and the key of one projection) is read by the second through a
reshape of its own: MetaSchedule tiles a block only where it reads each buffer once. Matmuls with a
constant operand (the weights) stay as they are.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import numpy as np
import tvm
from tvm import relax, te
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_calls import RESHAPES, bindings_of, is_op, rewrite_planned, shape_of

_VIEWS = (*RESHAPES, "permute_dims", "strided_slice", "broadcast_to")
MAX_ELEMENTS = 1 << 22  # the largest source whose views are mapped (by its element numbers)


class _Operand(NamedTuple):
    """A matmul operand as read from its source: ``source`` cast to ``cast`` (None: as it is),
    times ``scale``, at ``coords``: for each axis of the source, an offset and one coefficient
    for each axis of the operand. ``in_place``: whether any of this differs from reading the
    operand itself (a reshape of the source in order does not)."""

    source: Any
    source_shape: list[int]
    shape: list[int]
    cast: str | None
    scale: float
    coords: list[tuple[int, list[int]]]
    in_place: bool


class _Plan(NamedTuple):
    operands: tuple[_Operand, _Operand]
    order: tuple[int, ...]  # the output's axes, as the matmul's axes
    sums: str  # the dtype the products sum in (the matmul's)


def matmuls_read_views(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each matmul of two non-constant tensors computed as one function reading its
    operands in place and writing its output in the order the views after it make (see the
    module's doc), where that spares a copy."""
    return rewrite_planned(mod, _plans, _Rewriter)


def _plans(func: Any) -> dict[Any, _Plan]:
    """For each binding where a rewritten matmul's result goes (the matmul's own, or the last view
    after it), the matmul's plan."""
    values, users = bindings_of(func)
    consumers: dict = {}
    for var, value in values.items():
        if isinstance(value, relax.Call) and value.args and isinstance(value.args[0], relax.Var):
            consumers.setdefault(value.args[0], []).append(var)
    plans = {}
    for var, value in values.items():
        if is_op(value, "matmul"):
            planned = _plan(var, value, values, users, consumers)
            if planned is not None:
                plans[planned[0]] = planned[1]
    return plans


def _plan(var: Any, call: Any, values: dict, users: dict, consumers: dict) -> tuple[Any, _Plan] | None:
    """(the binding the rewritten matmul ``var`` goes to, its plan), or None where it stays."""
    shape = shape_of(call)
    if shape is None or len(shape) < 2 or any(not isinstance(arg, relax.Var) for arg in call.args):
        return None  # a constant operand (a weight), or a dynamic shape
    operands = [_operand(arg, values) for arg in call.args]
    if None in operands or min(len(op.shape) for op in operands) < 2 \
            or _matmul_shape(*(op.shape for op in operands)) != shape:
        return None
    sink, order = _output_views(var, shape, values, users, consumers)
    if not any(op.in_place for op in operands) and sink is var:
        return None
    operands = [(_separated(op) or op) if op.in_place else op for op in operands]
    return sink, _Plan(tuple(operands), order, str(call.ty.dtype))


def _matmul_shape(a: list[int], b: list[int]) -> list[int]:
    return [*np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])), a[-2], b[-1]]


def _operand(var: Any, values: dict) -> _Operand | None:
    """``var`` as read from its source through views, scalar factors and one cast, or None where
    its views are not an affine map of the source."""
    views, cast, scale = [], None, 1.0
    source = var
    while source in values:
        value, read = values[source], None
        if any(is_op(value, name) for name in _VIEWS):
            views.append(value)
            read = value.args[0]
        elif is_op(value, "multiply") or is_op(value, "divide"):
            first, second = value.args
            for operand, factor in [(first, second), *([(second, first)] if is_op(value, "multiply") else [])]:
                number = _scalar(factor, values)
                if number is not None:
                    scale, read = scale * number if is_op(value, "multiply") else scale / number, operand
                    break
        elif is_op(value, "astype") and cast is None and _floats(value, value.args[0]):
            cast, read = str(value.ty.dtype), value.args[0]
        if read is None:
            break
        source = read
    shape = shape_of(source)
    if not isinstance(source, relax.Var) or shape is None or math.prod(shape) > MAX_ELEMENTS:
        return None
    ids = _apply(np.arange(math.prod(shape)).reshape(shape), reversed(views))
    if ids is None:
        return None
    coords = [_affine(c) for c in np.unravel_index(ids, shape)]
    if None in coords:
        return None
    in_order = np.array_equal(ids.ravel(), np.arange(ids.size))
    return _Operand(source, shape, list(ids.shape), cast, scale, coords,
                    in_place=not in_order or scale != 1.0 or (cast is not None and bool(views)))


def _floats(*exprs: Any) -> bool:
    return all("float" in str(getattr(getattr(e, "ty", None), "dtype", "")) for e in exprs)


def _output_views(var: Any, shape: list[int], values: dict, users: dict, consumers: dict) -> tuple:
    """(the last binding of the views after the matmul ``var`` (and at most one cast) that permute
    its axes and reshape, the permutation); ``(var, identity)`` where there are none."""
    identity = tuple(range(len(shape)))
    chain, current = [], var
    small = len(shape) <= 5 and math.prod(shape) <= MAX_ELEMENTS
    while small and users.get(current, 0) == 1 and len(consumers.get(current, [])) == 1:
        current = consumers[current][0]
        value = values[current]
        cast = is_op(value, "astype") and _floats(value) and not any(is_op(v, "astype") for _, v in chain)
        if not (cast or any(is_op(value, name) for name in (*RESHAPES, "permute_dims"))):
            break
        chain.append((current, value))
    ids = np.arange(math.prod(shape)).reshape(shape)
    for end in range(len(chain), 0, -1):
        sink, last = chain[end - 1]
        mapped = _apply(ids, [value for _, value in chain[:end] if not is_op(value, "astype")])
        if is_op(last, "astype") or mapped is None:
            continue
        order = next((order for order in itertools.permutations(identity)  # the identity first
                      if np.array_equal(ids.transpose(order).reshape(mapped.shape), mapped)), identity)
        if order != identity:
            return sink, order
    return var, identity


def _apply(ids: np.ndarray, views: Any) -> np.ndarray | None:
    """The element numbers ``ids`` through ``views``, in order; None where one is not static."""
    for view in views:
        shape = shape_of(view)
        if shape is None:
            return None
        if any(is_op(view, name) for name in RESHAPES):
            ids = ids.reshape(shape)
        elif is_op(view, "permute_dims"):
            axes = view.attrs.axes
            ids = ids.transpose(None if axes is None else [int(a) for a in axes])
        elif is_op(view, "broadcast_to"):
            ids = np.broadcast_to(ids, shape)
        else:  # strided_slice(x, axes, begin, end[, strides])
            bounds = [_ints(arg) for arg in view.args[1:]]
            if None in bounds:
                return None
            axes, begin, end, strides = [*bounds, [1] * len(bounds[0])][:4]
            index = [slice(None)] * ids.ndim
            for axis, b, e, s in zip(axes, begin, end, strides):
                index[axis] = slice(b, e, s)
            ids = ids[tuple(index)]
        if list(ids.shape) != shape:
            return None
    return ids


def _ints(expr: Any) -> list[int] | None:
    """A tuple of static integers (as ``strided_slice`` takes its axes and bounds), else None."""
    fields = getattr(expr, "fields", None)
    if fields is None:
        return None
    values = [getattr(field, "value", None) for field in fields]
    values = [getattr(v, "value", v) for v in values]  # an IntImm, or a PrimValue of one
    return [int(v) for v in values] if all(isinstance(v, int) for v in values) else None


def _affine(values: np.ndarray) -> tuple[int, list[int]] | None:
    """``values`` (one source coordinate for each element of the operand) as an offset plus one
    coefficient for each axis of the operand, or None where it is not so."""
    offset = int(values[(0,) * values.ndim])
    coefficients = []
    for axis, size in enumerate(values.shape):
        unit = [0] * values.ndim
        unit[axis] = 1
        coefficients.append(int(values[tuple(unit)]) - offset if size > 1 else 0)
    expected = np.full(values.shape, offset)
    for axis, (size, c) in enumerate(zip(values.shape, coefficients)):
        expected = expected + c * np.arange(size).reshape([size if a == axis else 1 for a in range(values.ndim)])
    return (offset, coefficients) if np.array_equal(values, expected) else None


def _separated(operand: _Operand) -> _Operand | None:
    """``operand`` read from its source reshaped (in order) so that each of the source's axes is
    read along one axis of the operand at most (where a tile of the operand reads a box of the
    source no larger than the tile), or None where no reshape does so."""
    strides = [math.prod(operand.source_shape[axis + 1:]) for axis in range(len(operand.source_shape))]
    offset = sum(s * o for s, (o, _) in zip(strides, operand.coords))
    flat = [sum(s * c[i] for s, (_, c) in zip(strides, operand.coords)) for i in range(len(operand.shape))]
    read = sorted(((c, i) for i, c in enumerate(flat) if c), reverse=True)  # (place value, operand axis)
    if read and read[-1][0] != 1:
        read.append((1, None))  # the source's innermost digits, read at one offset
    places = [math.prod(operand.source_shape), *(c for c, _ in read)]
    if len(set(places[1:])) < len(read) or any(outer % inner for outer, inner in zip(places, places[1:])):
        return None
    shape, coords = [], []
    for (place, along), outer in zip(read, places):
        start, size = offset // place % (outer // place), outer // place
        if along is not None and start + operand.shape[along] > size:
            return None
        shape.append(size)
        coords.append((start, [int(i == along) for i in range(len(operand.shape))]))
    return operand._replace(source_shape=shape, coords=coords)


def _scalar(expr: Any, values: dict) -> float | None:
    """The value of a float scalar constant (or of one cast), else None."""
    value = values.get(expr, expr)
    cast = None
    if is_op(value, "astype"):
        cast, value = str(value.ty.dtype), values.get(value.args[0], value.args[0])
    if not isinstance(value, tvm.ir.expr.Constant) or not _floats(value) or value.value.numpy().size != 1:
        return None
    number = value.value.numpy().reshape(())
    return float(number.astype(cast) if cast else number)


@mutator
class _Rewriter(PyExprMutator):
    """Binds each planned sink to its matmul computed in place; the copies it spared are then unused."""

    def __init__(self, mod: tvm.IRModule, plans: dict) -> None:
        super().__init__(mod)
        self.plans = plans

    def visit_var_binding_(self, binding: Any) -> None:
        plan = self.plans.get(binding.var)
        if plan is None:
            super().visit_var_binding_(binding)
            return
        emit = self.builder_.emit
        a, b = plan.operands
        one_source = a.source.same_as(b.source)
        sources = []
        for operand in plan.operands:
            source = self.visit_expr(operand.source)
            if operand.cast is not None:
                source = emit(relax.op.astype(source, operand.cast))
            # a block's MetaSchedule tiles reads each buffer once: the second read of one tensor is a view of it
            if shape_of(source) != operand.source_shape or (one_source and sources):
                source = emit(relax.op.reshape(source, operand.source_shape))
            sources.append(source)
        result = self.builder_.call_te(_matmul, *sources, a.shape, b.shape, a.coords, b.coords, list(plan.order),
                                       plan.sums, primfunc_name_hint="view_matmul")
        if a.scale * b.scale != 1.0:
            result = relax.op.multiply(emit(result), relax.const(a.scale * b.scale, plan.sums))
        if str(binding.var.ty.dtype) != plan.sums:
            result = relax.op.astype(emit(result), str(binding.var.ty.dtype))
        if shape_of(binding.var) != [_matmul_shape(a.shape, b.shape)[axis] for axis in plan.order]:
            result = relax.op.reshape(emit(result), shape_of(binding.var))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(result)))


def _matmul(a: te.Tensor, b: te.Tensor, a_shape: list, b_shape: list, a_coords: list, b_coords: list,
            order: list, sums: str) -> te.Tensor:
    """The matmul of operands of ``a_shape`` and ``b_shape`` read from ``a`` and ``b`` at their
    coordinates, summed in ``sums``, its axes in ``order``."""
    a_shape, b_shape = [int(d) for d in a_shape], [int(d) for d in b_shape]
    shape = _matmul_shape(a_shape, b_shape)
    k = te.reduce_axis((0, a_shape[-1]), name="k")

    def read(tensor: te.Tensor, coords: list, operand_shape: list[int], batch: list, rows: Any, columns: Any) -> Any:
        lead = batch[len(batch) - (len(operand_shape) - 2):] if len(operand_shape) > 2 else []
        index = [*(i if size > 1 else 0 for i, size in zip(lead, operand_shape[:-2])), rows, columns]
        return tensor[tuple(int(offset) + sum(int(c) * i for c, i in zip(coefficients, index) if int(c))
                            for offset, coefficients in coords)].astype(sums)

    def product(*axes: Any) -> Any:
        index = [None] * len(axes)
        for position, axis in enumerate(order):
            index[int(axis)] = axes[position]
        *batch, m, n = index
        return te.sum(read(a, a_coords, a_shape, batch, m, k) * read(b, b_coords, b_shape, batch, k, n), axis=k)

    return te.compute([shape[int(axis)] for axis in order], product, name="view_matmul")
