"""The registry of tuners by name, all built the same way: ``make_tuner(name, task, seed, **options)``."""

from __future__ import annotations

from typing import Any

from autotvm.env import AutoTVMError
from autotvm.tuner import GridSearchTuner, RandomTuner, XGBTuner
from ga_tuner import GATuner
from rl_tuner import GADQNTuner


def _gadqn_random(task: Any, **options: Any) -> GADQNTuner:
    return GADQNTuner(task, action_policy="random", **options)


TUNERS = {
    "random": RandomTuner,
    "gridsearch": GridSearchTuner,
    "ga": GATuner,
    "xgb": XGBTuner,
    "ga-dqn": GADQNTuner,
    "ga-dqn-random": _gadqn_random,  # the ablation: GA-DQN's GA with uniform choices
}

# options each tuner accepts (besides seed)
TUNER_OPTIONS = {
    "random": set(), "gridsearch": set(),
    "ga": {"pop_size", "elite_num", "mutation_prob", "screen"},
    "xgb": {"plan_size", "feature_type", "loss_type", "n_iter", "parallel_size", "early_stop", "eps_greedy"},
    "ga-dqn": {"pop_size", "elite_num", "reward", "mode", "checkpoint", "max_knobs", "dqn", "failure_penalty",
               "reward_cap", "action_policy", "mutation", "stall_state", "screen", "spread"},
    "ga-dqn-random": {"pop_size", "elite_num", "reward", "max_knobs", "failure_penalty", "reward_cap", "mutation", "screen"},
}


def make_tuner(name: str, task: Any, seed: int | None = None, **options: Any) -> Any:
    """A tuner by name with only the options it understands (others are ignored)."""
    if name not in TUNERS:
        raise AutoTVMError(f"unknown tuner {name!r}; allowed: {', '.join(TUNERS)}")
    accepted = {k: v for k, v in options.items() if k in TUNER_OPTIONS[name] and v is not None}
    return TUNERS[name](task, seed=seed, **accepted)
