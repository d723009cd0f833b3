"""AutoTVM's tuning API re-hosted on current TVM (TensorIR + MetaSchedule).

Tasks (``autotvm.task``), knob spaces, measurement (``autotvm.measure``), tuners
(``autotvm.tuner``), callbacks and records, with AutoTVM's names and contracts. This package knows
nothing of the tuners built on top of it.
"""

from . import callback, measure, record, task, tuner
from .dispatcher import ApplyHistoryBest, DispatchContext, apply_history_best
from .checks import AutoTVMError
from .env import make_target, runtime_threads, use_runtime_threads
from .lowering import tir_pipeline
from .measure import (LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult, RPCRunner,
                      measure_option)
from .task import ConfigEntity, ConfigSpace, create_from_primfunc, get_config, template
from .task.relax_integration import build_program

__all__ = ["ApplyHistoryBest", "AutoTVMError", "ConfigEntity", "ConfigSpace", "DispatchContext", "LocalBuilder",
           "LocalRunner", "MeasureErrorNo", "MeasureInput", "MeasureResult", "RPCRunner", "apply_history_best",
           "build_program", "callback", "create_from_primfunc", "get_config", "make_target", "measure",
           "measure_option", "record", "runtime_threads", "task", "template", "tir_pipeline", "tuner",
           "use_runtime_threads"]
