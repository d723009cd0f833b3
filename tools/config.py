"""The driver's configuration: JSON (a file or inline), validated against a JSON Schema.

Every key is documented in the README. Errors are one line naming the key and what is allowed.
"""

from __future__ import annotations

import copy
import json
import os

import jsonschema

from autotvm.env import AutoTVMError
from autotvm.task.relax_integration import CONV_ALGORITHMS, CONV_LAYOUTS

from rl_tuner.dqn import DQNConfig

from .models import HF_MODELS, MODEL_TYPES
from .tuners import TUNER_OPTIONS, TUNERS, base_tuner, wrong_type
from .workloads import WORKLOADS

EXPERIMENTS = ("compare_tuners", "compare_gadqn_ga", "compare_reward", "ablation", "trial_hyperparameters",
               "gadqn_monitor")

_POSITIVE_INT = {"type": "integer", "minimum": 1}

SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "models": {"type": "array", "items": {
            "type": "object", "required": ["name", "type"], "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "type": {"enum": list(MODEL_TYPES)},
                "workload": {"type": "string"}, "model": {"type": "string"},
                "pretrained": {"type": "boolean"}, "path": {"type": "string"},
                "batch": _POSITIVE_INT, "seq_len": _POSITIVE_INT, "image_size": _POSITIVE_INT,
                "d_model": _POSITIVE_INT, "nhead": _POSITIVE_INT, "layers": _POSITIVE_INT, "width": _POSITIVE_INT,
                "seed": {"type": "integer"}, "conv_layout": {"enum": list(CONV_LAYOUTS)},
                "conv_algorithm": {"enum": list(CONV_ALGORITHMS)},
            }}},
        "target": {"oneOf": [{"enum": ["llvm", "cuda"]}, {"type": "object", "required": ["kind"],
                                                           "properties": {"kind": {"enum": ["llvm", "cuda"]}}}]},
        "autotuner_settings": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "tuner": {"enum": list(TUNERS)},
                "trials": _POSITIVE_INT,
                "early_stopping": {"oneOf": [{"type": "null"}, _POSITIVE_INT]},
                "number": _POSITIVE_INT, "repeat": _POSITIVE_INT,
                "min_repeat_ms": {"type": "integer", "minimum": 0},
                "n_parallel": _POSITIVE_INT,
                "timeout": {"type": "number", "exclusiveMinimum": 0},
                "seed": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
                "save_path": {"type": "string", "minLength": 1},
                "save_name": {"type": "string", "minLength": 1},
                "check_correctness": {"type": "boolean"}, "enable_cpu_cache_flush": {"type": "boolean"},
                "tuner_options": {"type": "object"},
                "rpc": {"type": "object", "required": ["key", "host", "port"], "additionalProperties": False,
                        "properties": {"key": {"type": "string"}, "host": {"type": "string"},
                                       "port": {"type": "integer", "minimum": 1, "maximum": 65535}}},
            }},
        "run_settings": {
            "type": "object", "additionalProperties": False,
            "properties": {"repeat": _POSITIVE_INT, "number": _POSITIVE_INT, "profile": {"type": "boolean"},
                           "rtol": {"type": "number", "exclusiveMinimum": 0},
                           "atol": {"type": "number", "exclusiveMinimum": 0}}},
        "experiments": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "names": {"type": "array", "items": {"enum": list(EXPERIMENTS)}, "minItems": 1},
                "workloads": {"type": "array", "items": {"enum": list(WORKLOADS)}, "minItems": 1},
                "tuners": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                "tuner_options": {"type": "object", "additionalProperties": {"type": "object"}},
                "trials": _POSITIVE_INT,
                "repeats": _POSITIVE_INT,
                "hyperparameter_trials": _POSITIVE_INT,
                "remeasure": {"type": "integer", "minimum": 0},
                "save_path": {"type": "string", "minLength": 1},
                "save_name": {"type": "string", "minLength": 1},
                "previous_results_dir": {"oneOf": [{"type": "null"}, {"type": "string"}]},
            }},
    },
}

DEFAULTS: dict = {
    "models": [],
    "target": "llvm",
    "autotuner_settings": {"tuner": "ga-dqn", "trials": 64, "early_stopping": None, "number": 3, "repeat": 3,
                           "min_repeat_ms": 0, "n_parallel": os.cpu_count() or 1, "timeout": 10, "seed": 0,
                           "save_path": "results", "save_name": "tuning", "check_correctness": False,
                           "enable_cpu_cache_flush": False, "tuner_options": {}},
    "run_settings": {"repeat": 10, "number": 5, "profile": False, "rtol": 1e-3, "atol": 1e-3},
    "experiments": {"names": ["compare_tuners"], "workloads": ["c1"],
                    "tuners": ["random", "ga", "xgb", "ga-dqn", "ga-dqn-random"], "tuner_options": {},
                    "trials": 64, "repeats": 3,
                    "hyperparameter_trials": 6, "remeasure": 0, "save_path": "results", "save_name": "experiment",
                    "previous_results_dir": None},
}


class ConfigError(AutoTVMError):
    """A bad configuration (reported as one line, exit code 2)."""


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _explain(error: jsonschema.ValidationError) -> str:
    key = _key_path(error)
    if error.validator == "enum":
        return f"config key {key}: {error.instance!r} is not allowed; allowed: {', '.join(map(str, error.validator_value))}"
    if error.validator == "additionalProperties":
        known = error.schema.get("properties", {})
        unknown = ", ".join(repr(k) for k in sorted(set(error.instance) - set(known)))
        return f"config key {key}: unknown key {unknown}; allowed keys: {', '.join(sorted(known))}"
    if error.validator in ("minimum", "exclusiveMinimum"):
        return f"config key {key}: {error.instance!r} is too small; it must be >= {error.validator_value}" \
            if error.validator == "minimum" else f"config key {key}: {error.instance!r} must be > {error.validator_value}"
    if error.validator == "oneOf" and key.endswith("target"):
        return f"config key target: {error.instance!r} is not allowed; allowed: \"llvm\", \"cuda\" or a target dict"
    if error.validator == "required":
        return f"config key {key}: {error.message}"
    return f"config key {key}: {error.message}"


def _merge(defaults: dict, given: dict) -> dict:
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def parse_json(text: str, source: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{source} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must hold a JSON object, got {type(data).__name__}")
    return data


def load_config(arg: str) -> dict:
    """Read a config from a path or inline JSON, validate it and fill in the defaults."""
    if arg.lstrip().startswith("{"):
        data = parse_json(arg, "the inline config")
    else:
        if not os.path.isfile(arg):
            raise ConfigError(f"config file {arg!r} does not exist; pass a JSON file or inline JSON with -c")
        with open(arg, encoding="utf-8") as handle:
            data = parse_json(handle.read(), f"config file {arg!r}")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(list(e.absolute_path)), str(e.absolute_path)))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(_explain(best))
    for spec in data.get("models", []):
        if spec["type"] == "hf" and spec.get("model") not in HF_MODELS:
            raise ConfigError(f"config key models.{spec['name']}.model: {spec.get('model')!r} is not allowed; "
                              f"allowed: {', '.join(HF_MODELS)}")
        if spec.get("conv_algorithm") == "winograd" and spec.get("conv_layout") == "NCHW":
            raise ConfigError(f"config key models.{spec['name']}.conv_algorithm: 'winograd' needs conv_layout "
                              "'NHWC' or 'auto', not 'NCHW'")
    shared = data.get("autotuner_settings", {}).get("tuner_options", {})
    _check_tuner_options(shared, set().union(*TUNER_OPTIONS.values()), "autotuner_settings.tuner_options")
    experiments = data.get("experiments", {})
    check_tuner_variants(experiments.get("tuners", DEFAULTS["experiments"]["tuners"]),
                         experiments.get("tuner_options", {}), "experiments.tuners", "experiments.tuner_options")
    return _merge(DEFAULTS, data)


def _check_tuner_options(options: dict, accepted: set[str], key: str) -> None:
    """Refuse an option no tuner takes: ``make_tuner`` gives each tuner only the options it
    understands, so a misspelt key would otherwise be silently ignored."""
    for name, value in options.items():
        if name not in accepted:
            raise ConfigError(f"config key {key}.{name}: unknown tuner option; allowed: {', '.join(sorted(accepted))}")
        problem = wrong_type(name, value)
        if problem:
            raise ConfigError(f"config key {key}.{name}: {problem}")
        if name == "dqn":
            if not isinstance(value, dict):
                raise ConfigError(f"config key {key}.dqn: must be an object of DQN settings, got {value!r}")
            try:
                DQNConfig.from_dict(value)
            except ValueError as err:
                raise ConfigError(f"config key {key}.dqn: {err}") from None


def check_tuner_variants(tuners: list[str], per_tuner: dict, tuners_key: str, options_key: str) -> None:
    """Every tuner is a registry name or NAME@LABEL, and each tuner's options belong to a tuner of
    the list and are options its NAME takes (``*_key``: how the user gave them, for the message)."""
    allowed = list(TUNERS) + ["metaschedule"]
    for i, name in enumerate(tuners):
        if base_tuner(name) not in allowed:
            raise ConfigError(f"config key {tuners_key}.{i}: {name!r} is not allowed; allowed: "
                              f"{', '.join(allowed)}, or NAME@LABEL for NAME with {options_key}[NAME@LABEL]")
    for name, options in per_tuner.items():
        key = f"{options_key}.{name}"
        if name not in tuners:
            raise ConfigError(f"config key {key}: not one of {tuners_key} ({', '.join(tuners)})")
        if not isinstance(options, dict):
            raise ConfigError(f"config key {key}: must be an object of tuner options, got {options!r}")
        accepted = TUNER_OPTIONS.get(base_tuner(name), set())
        if not accepted and options:
            raise ConfigError(f"config key {key}: {base_tuner(name)} takes no tuner options")
        _check_tuner_options(options, accepted, key)


def writable_dir(path: str, key: str) -> str:
    """Create ``path`` if needed; a clear error if it cannot be written."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"config key {key}: cannot create {path!r} ({err.strerror})") from None
    if not os.access(path, os.W_OK):
        raise ConfigError(f"config key {key}: {path!r} is not writable")
    return path
