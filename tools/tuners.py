"""The registry of tuners by name, all built the same way: ``make_tuner(name, task, seed, **options)``.

What each tuner takes from a config, and the rule of each option, come from the tuner's own
``OPTIONS`` (``autotvm.checks``): a new keyword reaches the config without a second list to keep.
"""

from __future__ import annotations

import functools
from typing import Any

from autotvm.checks import AutoTVMError
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


def _rules(factory: Any) -> dict[str, dict]:
    return getattr(factory, "func", factory).OPTIONS


# the options each tuner takes from a config (besides seed)
TUNER_OPTIONS = {name: set(_rules(factory)) - NOT_FROM_CONFIG.get(name, set()) for name, factory in TUNERS.items()}
# the rule of every option some tuner takes (tuners that share an option share its rule)
TUNER_RULES = {option: _rules(factory)[option] for name, factory in TUNERS.items() for option in TUNER_OPTIONS[name]}


def base_tuner(name: str) -> str:
    """The registry name of a tuner given as NAME@LABEL, a variant of NAME with its own options."""
    return name.split("@")[0]


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
    except ValueError as err:
        raise AutoTVMError(f"{name} tuner options: {err}") from None
