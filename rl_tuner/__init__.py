"""GA-DQN: a genetic algorithm whose crossover and mutation choices are learned by two DQNs."""

from .dqn import DQNAgent, DQNConfig
from .gadqn_tuner import GADQNTuner

__all__ = ["DQNAgent", "DQNConfig", "GADQNTuner"]


def __getattr__(name: str):
    """``GADQNSearchStrategy`` is imported on first use: it pulls in MetaSchedule."""
    if name == "GADQNSearchStrategy":
        from .ms_strategy import GADQNSearchStrategy

        return GADQNSearchStrategy
    raise AttributeError(name)
