"""The registry of tuners by name, all built the same way: ``make_tuner(name, task, seed, **options)``."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from autotvm.env import AutoTVMError
from autotvm.tuner import GridSearchTuner, RandomTuner, XGBTuner
from ga_tuner import GATuner
from rl_tuner import GADQNTuner


TUNERS = {
    "random": RandomTuner,
    "gridsearch": GridSearchTuner,
    "ga": GATuner,
    "xgb": XGBTuner,
    "ga-dqn": GADQNTuner,
    "ga-dqn-random": functools.partial(GADQNTuner, action_policy="random"),  # the ablation
}

# keywords a shared config must not set, per tuner: a task's index range, a machine setting, and
# for the ablation the agents' options (it has no agents, and its action policy is fixed)
NOT_FROM_CONFIG = {
    "random": {"range_idx"}, "gridsearch": {"range_idx"}, "xgb": {"num_threads"},
    "ga-dqn-random": {"action_policy", "mode", "checkpoint", "dqn", "max_knobs"},
}


# options each tuner accepts from a config (besides seed), read from its signature so that a new
# keyword reaches the tuner without a second list to keep in step
_PARAMETERS = {name: inspect.signature(factory).parameters for name, factory in TUNERS.items()}
TUNER_OPTIONS = {name: set(params) - {"task", "seed"} - NOT_FROM_CONFIG.get(name, set())
                 for name, params in _PARAMETERS.items()}
# the type of each option's default value (``None`` defaults, which take several types, are left out)
OPTION_TYPES = {option: type(param.default) for params in reversed(list(_PARAMETERS.values()))
                for option, param in params.items() if isinstance(param.default, (bool, int, float, str))}


def base_tuner(name: str) -> str:
    """The registry name of a tuner given as NAME@LABEL, a variant of NAME with its own options."""
    return name.split("@")[0]


def wrong_type(name: str, value: Any) -> str | None:
    """What is wrong with the type of option ``name`` = ``value`` (``None``: nothing)."""
    expected = OPTION_TYPES.get(name)
    if expected is None or value is None:  # None: the tuner's default (``make_tuner`` drops it)
        return None
    if expected is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, expected)
    kind = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}[expected]
    return None if ok else f"must be {kind}, got {value!r}"


def make_tuner(name: str, task: Any, seed: int | None = None, **options: Any) -> Any:
    """A tuner by name with only the options it understands (others are ignored: one config's
    options are shared by every tuner, e.g. ``pop_size`` for GA and GA-DQN, ``plan_size`` for
    XGB; ``tools.config`` refuses a key that no tuner takes). A value the tuner refuses is a
    user's mistake, reported as an ``AutoTVMError`` naming the tuner."""
    if name not in TUNERS:
        raise AutoTVMError(f"unknown tuner {name!r}; allowed: {', '.join(TUNERS)}")
    accepted = {k: v for k, v in options.items() if k in TUNER_OPTIONS[name] and v is not None}
    try:
        return TUNERS[name](task, seed=seed, **accepted)
    except AutoTVMError:
        raise
    except ValueError as err:
        raise AutoTVMError(f"{name} tuner options: {err}") from None
