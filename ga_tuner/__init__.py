"""The genetic-algorithm baseline."""

from .ga_tuner import GATuner

__all__ = ["GATuner"]
