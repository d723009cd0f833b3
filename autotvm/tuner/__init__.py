"""Tuners: the base contract and the baselines.

``GATuner`` and ``GADQNTuner`` live in their own packages (``ga_tuner``, ``rl_tuner``), which build
on this one; they are reachable here too, as AutoTVM users import them
(``autotvm.tuner.GATuner``), through a lazy alias that imports them on first use, so that this
package never imports them itself.
"""

from .index_based import GridSearchTuner, RandomTuner
from .tuner import Tuner
from .xgboost_tuner import XGBTuner
from .. import callback

__all__ = ["GridSearchTuner", "RandomTuner", "Tuner", "XGBTuner", "callback", "GATuner", "GADQNTuner"]

_ALIASES = {"GATuner": "ga_tuner", "GADQNTuner": "rl_tuner"}


def __getattr__(name: str):
    if name in _ALIASES:
        import importlib

        return getattr(importlib.import_module(_ALIASES[name]), name)
    raise AttributeError(f"module 'autotvm.tuner' has no attribute {name!r}")
