"""GA-DQN: a genetic algorithm whose crossover and mutation choices are learned by two DQNs."""

from .dqn import DQNAgent, DQNConfig
from .gadqn_tuner import GADQNTuner

__all__ = ["DQNAgent", "DQNConfig", "GADQNTuner"]
