"""A validated config as typed, frozen settings, built once by ``tools.config.load_config`` and
passed whole. The keys, their types and defaults are the config schema's (``tools.config.SCHEMA``,
docs/config.md); the field names here are its keys.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .models import ModelSpec


@dataclass(frozen=True)
class RPCSettings:
    """``autotuner_settings.rpc``: time on devices registered with a TVM RPC tracker."""

    key: str
    host: str
    port: int
    server_wait: float = 300


@dataclass(frozen=True)
class TuningSettings:
    """``autotuner_settings``: the tuner, its budget and how trials are measured."""

    tuner: str
    trials: int
    model_trials: int | None
    task_scheduler: str
    early_stopping: int | None
    time_budget: float | None  # seconds of tuning per model; None: no limit
    rounds_in_flight: int | None  # rounds of different tasks measured at once; None: ``in_flight``'s default
    number: int
    repeat: int
    min_repeat_ms: int
    n_parallel: int
    timeout: float
    seed: int | None
    save_path: str
    save_name: str
    check_correctness: bool
    enable_cpu_cache_flush: bool | str  # False, True or "private" (autotvm.LocalRunner)
    tuner_options: dict = field(default_factory=dict)
    rpc: RPCSettings | None = None

    def log_path(self, model_name: str) -> str:
        """Where a model's records go: ``<save_path>/<save_name>-<model>.json``."""
        return os.path.join(self.save_path, f"{self.save_name}-{model_name}.json")

    def in_flight(self, target: Any) -> int:
        """Rounds of different tasks the task scheduler measures at once: ``rounds_in_flight``,
        else 2 on a GPU (one round builds while another waits for its slowest builds and runs)
        and 1 on a CPU (the runs must not share the builds' cores)."""
        if self.rounds_in_flight is not None:
            return self.rounds_in_flight
        return 2 if target.kind.name == "cuda" else 1

    def measure_option(self, target: Any = None) -> dict:
        """A LocalBuilder and a LocalRunner, or an RPCRunner when ``rpc`` is set. With ``target``
        (the config's), a target whose device this machine lacks, with no ``rpc`` to measure on,
        is its one-line error here, before any task is extracted."""
        import autotvm

        common = {"number": self.number, "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms,
                  "timeout": self.timeout, "check_correctness": self.check_correctness,
                  "enable_cpu_cache_flush": self.enable_cpu_cache_flush}
        if self.rpc:
            runner = autotvm.RPCRunner(self.rpc.key, self.rpc.host, self.rpc.port, server_wait=self.rpc.server_wait,
                                       **common)
        else:
            runner = autotvm.LocalRunner(**common)
        if target is not None:
            runner.require_device(autotvm.make_target(target), "config key target: the config")
        builder = autotvm.LocalBuilder(n_parallel=self.n_parallel, timeout=self.timeout)
        return autotvm.measure_option(builder, runner)


@dataclass(frozen=True)
class RunSettings:
    """``run_settings``: how ``-m=benchmark`` and the experiments time whole models."""

    repeat: int
    number: int | None
    variants: tuple[str, ...] | None  # None: every variant that runs on the target's device
    precision: str
    min_cosine: float
    profile: bool
    rtol: float
    atol: float


@dataclass(frozen=True)
class ExperimentSettings:
    """``experiments``: which experiments, on what, with how many seeds and trials."""

    names: tuple[str, ...]
    workloads: tuple[str, ...]
    models: tuple[str, ...]
    model_trials: int
    checkpoints: int
    tuners: tuple[str, ...]
    tuner_options: dict
    trials: int
    repeats: int
    hyperparameter_trials: int
    remeasure: int
    save_path: str
    save_name: str
    previous_results_dir: str | None

    @property
    def out_dir(self) -> str:
        """``<save_path>/<save_name>``: every experiment's folder is under it."""
        return os.path.join(self.save_path, self.save_name)


@dataclass(frozen=True)
class Config:
    """The whole configuration."""

    models: tuple[ModelSpec, ...]
    target: Any  # "llvm", "cuda" or a target dict, as ``autotvm.make_target`` takes it
    autotuner_settings: TuningSettings
    run_settings: RunSettings
    experiments: ExperimentSettings

    @classmethod
    def from_dict(cls, data: dict) -> Config:
        """Settings from a config that the schema has validated and filled with its defaults."""
        tuning = dict(data["autotuner_settings"])
        tuning["rpc"] = RPCSettings(**tuning["rpc"]) if tuning.get("rpc") else None
        variants = data["run_settings"]["variants"]
        run = dict(data["run_settings"], variants=tuple(variants) if variants is not None else None)
        exp = {key: tuple(value) if isinstance(value, list) else value for key, value in data["experiments"].items()}
        return cls(models=tuple(ModelSpec(**spec) for spec in data["models"]), target=data["target"],
                   autotuner_settings=TuningSettings(**tuning), run_settings=RunSettings(**run),
                   experiments=ExperimentSettings(**exp))

    def model(self, name: str) -> ModelSpec:
        return next(spec for spec in self.models if spec.name == name)


def replace(settings: Any, **changes: Any) -> Any:
    """A copy of frozen settings with ``changes`` (``dataclasses.replace``)."""
    return dataclasses.replace(settings, **changes)
