"""Measurement: build configs into programs and time them on a device."""

from .local import LocalBuilder, LocalRunner, RPCRunner, measure_option
from .measure import (BuildResult, MeasureBatch, MeasureErrorNo, MeasureInput, MeasureResult,
                      create_measure_batch)

__all__ = ["BuildResult", "LocalBuilder", "LocalRunner", "MeasureBatch", "MeasureErrorNo", "MeasureInput",
           "MeasureResult", "RPCRunner", "create_measure_batch", "measure_option"]
