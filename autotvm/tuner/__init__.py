"""Tuners: the base contract and the baselines.

Tuners built on this package register themselves under the entry-point group ``autotvm.tuners``
(``ga_tuner`` registers ``GATuner``, ``rl_tuner`` registers ``GADQNTuner``: see pyproject.toml),
and are reachable here as AutoTVM users import them (``autotvm.tuner.GATuner``). This package
names none of them: it looks the name up among the registered tuners on first use.
"""

from importlib.metadata import entry_points

from .index_based import GridSearchTuner, RandomTuner
from .tuner import Tuner
from .xgboost_tuner import XGBTuner
from .. import callback

__all__ = ["GridSearchTuner", "RandomTuner", "Tuner", "XGBTuner", "callback"]


def __getattr__(name: str):
    for entry in entry_points(group="autotvm.tuners"):
        if entry.name == name:
            return entry.load()
    raise AttributeError(f"module 'autotvm.tuner' has no attribute {name!r}")
