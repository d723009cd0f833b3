"""Tuners: the base contract and the baselines."""

from .index_based import GridSearchTuner, RandomTuner
from .tuner import Tuner
from .xgboost_tuner import XGBTuner
from .. import callback

__all__ = ["GridSearchTuner", "RandomTuner", "Tuner", "XGBTuner", "callback"]
