"""Tasks: a tunable program, its knob space, and how a config becomes a buildable IRModule."""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Sequence

import tvm

from ..checks import AutoTVMError
from ..env import make_target
from .space import ConfigEntity, ConfigSpace, InstantiationError


def _json_arg(arg: Any) -> Any:
    """Serialise a template argument or buffer the way AutoTVM's workloads do."""
    if isinstance(arg, tvm.te.Tensor):
        return ["TENSOR", [int(x) for x in arg.shape], str(arg.dtype)]
    if isinstance(arg, (list, tuple)):
        return [_json_arg(a) for a in arg]
    if isinstance(arg, (int, float, str, bool)) or arg is None:
        return arg
    if hasattr(arg, "value"):
        return arg.value
    return str(arg)


def buffer_signature(mod: tvm.IRModule) -> list:
    """``[["TENSOR", shape, dtype], ...]`` for the parameters of a module's only PrimFunc."""
    func = next(iter(mod.functions.values()))
    sig = []
    for param in func.params:
        sig.append(["TENSOR", [int(x) for x in param.shape], str(param.dtype)])
    return sig


class Task:
    """A tuning task: ``name``, ``args``, ``target``, ``flop``, ``weight`` and ``config_space``.

    Subclasses say how a config becomes a scheduled ``IRModule`` (``instantiate``) and what the
    untuned program is (``default_module``), which is also the reference for correctness checks.
    """

    def __init__(self, name: str, args: Sequence[Any], target: Any, config_space: ConfigSpace,
                 flop: float, weight: int = 1) -> None:
        self.name = name
        self.args = tuple(_json_arg(a) for a in args)
        self.target = make_target(target)
        self.config_space = config_space
        self.flop = float(flop)
        self.weight = int(weight)

    @property
    def workload(self) -> tuple:
        """The key under which records of this task are stored and looked up."""
        return (self.name, *self.args)

    def instantiate(self, config: ConfigEntity) -> tvm.IRModule:
        raise NotImplementedError

    def default_module(self) -> tvm.IRModule:
        raise NotImplementedError

    def instantiate_best(self) -> tvm.IRModule:
        """The program with the best config of the current ``apply_history_best`` context, or the default."""
        from ..dispatcher import DispatchContext

        cfg = DispatchContext.current_config(self)
        return self.default_module() if cfg is None else self.instantiate(cfg)

    def __repr__(self) -> str:
        return f"Task(name={self.name!r}, args={self.args!r}, flop={self.flop:.3g}, space={len(self.config_space)})"


# ----------------------------------------------------------------------------- templates
TEMPLATES: dict[str, Callable] = {}
_scope = threading.local()


def get_config() -> Any:
    """The config a template is being called with: the space while defining, an entity while instantiating."""
    cfg = getattr(_scope, "cfg", None)
    if cfg is None:
        raise AutoTVMError("autotvm.get_config() called outside a template; decorate the function with @autotvm.template")
    return cfg


@contextlib.contextmanager
def _config_scope(cfg: Any):
    previous = getattr(_scope, "cfg", None)
    _scope.cfg = cfg
    try:
        yield cfg
    finally:
        _scope.cfg = previous


def template(name: str) -> Callable:
    """Register a schedule template: a function that reads knobs through ``get_config()`` and
    returns ``(tvm.s_tir.Schedule, list_of_te_tensors)``.

    Called directly (outside tuning), the template runs with the best config of the current
    ``apply_history_best`` context for its target and arguments (the space's first config if
    none), and returns what it returns. The target is ``target=`` or else
    ``tvm.target.Target.current()`` (``llvm`` outside any target scope), as in AutoTVM.
    """

    def register(func: Callable) -> Callable:
        TEMPLATES[name] = func

        @functools.wraps(func)
        def dispatch(*args: Any, target: Any = None) -> Any:
            if getattr(_scope, "cfg", None) is not None:
                return func(*args)
            task = create(name, args, target if target is not None else _current_target("llvm"))
            from ..dispatcher import DispatchContext

            with _config_scope(DispatchContext.current_config(task) or task.config_space.get(0)):
                return func(*args)

        dispatch.template_name = name  # type: ignore[attr-defined]
        return dispatch

    return register


def _current_target(default: Any = None) -> Any:
    """The target of the enclosing ``with tvm.target.Target(...)`` scope, or ``default``."""
    current = tvm.target.Target.current(allow_none=True)
    return current if current is not None else default


class TemplateTask(Task):
    """A task defined by an AutoTVM-style template function, which runs with the task's target in
    scope (``tvm.target.Target.current()``), as in AutoTVM."""

    def __init__(self, name: str, func: Callable, args: Sequence[Any], target: Any) -> None:
        space, target = ConfigSpace(), make_target(target)
        try:
            with _config_scope(space), target:
                sch, _bufs = func(*args)
        except InstantiationError as err:
            raise AutoTVMError(f"template {name!r} failed while defining its space: {err}") from None
        if not space.knobs:
            raise AutoTVMError(f"template {name!r} defines no knob; call cfg.define_split/define_reorder/"
                               "define_annotate/define_knob on autotvm.get_config()")
        flop = space.flop or float(tvm.s_tir.analysis.estimate_tir_flops(sch.mod))
        super().__init__(name, args, target, space, flop)
        self.func = func
        self._raw_args = tuple(args)
        self._default = sch.mod

    def instantiate(self, config: ConfigEntity) -> tvm.IRModule:
        try:
            with _config_scope(config), self.target:
                sch, _ = self.func(*self._raw_args)
        except Exception as err:  # a template's own error makes this config invalid, not the tuner
            raise InstantiationError(f"{type(err).__name__}: {err}") from err
        return sch.mod

    def default_module(self) -> tvm.IRModule:
        return self._default


def create(name: str, args: Sequence[Any], target: Any = None) -> TemplateTask:
    """A task from a registered template, as ``autotvm.task.create`` did; without ``target``, the
    one of the enclosing ``with tvm.target.Target(...)`` scope."""
    if not isinstance(name, str) or name not in TEMPLATES:
        known = ", ".join(sorted(TEMPLATES)) or "none registered"
        raise AutoTVMError(f"unknown template {name!r}; registered templates: {known}")
    if not isinstance(args, (tuple, list)):
        raise AutoTVMError(f"args of template {name!r} must be a tuple of its arguments, got {args!r}")
    target = target if target is not None else _current_target()
    if target is None:
        raise AutoTVMError(f"autotvm.task.create({name!r}, ...) needs a target: pass target=... or call it inside "
                           "'with tvm.target.Target(...)'")
    return TemplateTask(name, TEMPLATES[name], args, target)
