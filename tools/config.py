"""The driver's configuration: JSON (a file or inline), validated against one JSON Schema, then
turned into typed settings (``tools.settings.Config``).

The schema is the one source of the driver's options: every key, its type and default, the
registries' names (tuners, models, runtimes, workloads, experiments) as its enums and the tuners'
own option rules (their ``OPTIONS``, ``autotvm.checks``). Every key is in docs/config.md. Errors
are one line naming the key and what is allowed.
"""

from __future__ import annotations

import copy
import json
import os
import re
from typing import Any, Iterator

import jsonschema

from autotvm.checks import AutoTVMError, Validator, describe
from autotvm.tuner.task_scheduler import STRATEGIES
from autotvm.env import host_cores, make_target
from autotvm.measure.local import CACHE_FLUSHES
from autotvm.task.relax_integration import CONV_ALGORITHMS, CONV_LAYOUTS, PRECISIONS, check_precision

from .experiments import EXPERIMENTS
from .models import HF_MODELS, MODEL_TYPES, TORCH_MODELS, ModelSpec, pretrained_path
from .runtimes import TUNED_FROM, VARIANTS
from .settings import Config
from .tuners import TUNER_OPTIONS, TUNER_RULES, TUNERS, base_tuner
from .workloads import WORKLOADS

_POSITIVE_INT = {"type": "integer", "minimum": 1}
# a budget no run finishes: at the ~2 trials/s of a 2-core CPU, 100,000 trials take 14 hours
MAX_TRIALS = 100_000
_TRIALS = {"type": "integer", "minimum": 1, "maximum": MAX_TRIALS}
# model names become file names: plain names only, no folders
_PLAIN_NAME = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$", "maxLength": 100}


def _with(schema: dict, default: object) -> dict:
    """``schema`` with its default value (filled in where the config leaves the key out)."""
    return {**schema, "default": default}


# The whole configuration: every key, its type and its default, in one place (README, "Config reference").
SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "models": _with({"type": "array", "items": {
            "type": "object", "required": ["name", "type"], "additionalProperties": False,
            "properties": {
                "name": _PLAIN_NAME,
                "type": {"enum": list(MODEL_TYPES)},
                "workload": {"type": "string"}, "model": {"type": "string"},
                "pretrained": {"type": "boolean"}, "path": {"type": "string"},
                "batch": _POSITIVE_INT, "seq_len": _POSITIVE_INT, "image_size": _POSITIVE_INT,
                "d_model": _POSITIVE_INT, "nhead": _POSITIVE_INT, "layers": _POSITIVE_INT, "width": _POSITIVE_INT,
                "seed": {"type": "integer"}, "conv_layout": {"enum": list(CONV_LAYOUTS)},
                "conv_algorithm": {"enum": list(CONV_ALGORITHMS)},
            }}}, []),
        "target": _with({"oneOf": [{"enum": ["llvm", "cuda"]}, {"type": "object", "required": ["kind"],
                                                                 "properties": {"kind": {"enum": ["llvm", "cuda"]}}}]},
                        "llvm"),
        "autotuner_settings": _with({
            "type": "object", "additionalProperties": False,
            "properties": {
                "tuner": _with({"enum": list(TUNERS)}, "ga-dqn"),
                "trials": _with(_TRIALS, 64),
                "model_trials": _with({"oneOf": [{"type": "null"}, _TRIALS]}, None),
                "task_scheduler": _with({"enum": list(STRATEGIES)}, "gradient"),
                "early_stopping": _with({"oneOf": [{"type": "null"}, _POSITIVE_INT]}, None),
                "time_budget": _with({"oneOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 0}]}, None),
                # null: 2 on a CUDA target, 1 on a CPU (TuningSettings.in_flight)
                "rounds_in_flight": _with({"oneOf": [{"type": "null"}, _POSITIVE_INT]}, None),
                "number": _with(_POSITIVE_INT, 3), "repeat": _with(_POSITIVE_INT, 3),
                "min_repeat_ms": _with({"type": "integer", "minimum": 0}, 0),
                "n_parallel": _with(_POSITIVE_INT, host_cores()),
                "timeout": _with({"type": "number", "exclusiveMinimum": 0}, 10),
                "seed": _with({"oneOf": [{"type": "null"}, {"type": "integer"}]}, 0),
                "save_path": _with({"type": "string", "minLength": 1}, "results"),
                "save_name": _with(_PLAIN_NAME, "tuning"),
                "check_correctness": _with({"type": "boolean"}, False),
                "enable_cpu_cache_flush": _with({"enum": list(CACHE_FLUSHES)}, False),
                "tuner_options": _with({"type": "object", "properties": TUNER_RULES, "additionalProperties": False}, {}),
                "rpc": {"type": "object", "required": ["key", "host", "port"], "additionalProperties": False,
                        "properties": {"key": {"type": "string", "minLength": 1}, "host": {"type": "string"},
                                       "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                                       "server_wait": _with({"type": "number", "minimum": 0}, 300)}},
            }}, {}),
        "run_settings": _with({
            "type": "object", "additionalProperties": False,
            "properties": {"repeat": _with(_POSITIVE_INT, 10),
                           "number": _with({"oneOf": [{"type": "null"}, _POSITIVE_INT]}, None),
                           # null: every variant that runs on the target's device
                           "variants": _with({"oneOf": [{"type": "null"}, {
                               "type": "array", "items": {"anyOf": [{"enum": list(VARIANTS)}, {
                                   "type": "string", "pattern": f"^{TUNED_FROM}{_PLAIN_NAME['pattern'][1:]}"}]},
                               "minItems": 1,
                               "uniqueItems": True}]}, None),
                           "precision": _with({"enum": list(PRECISIONS)}, "float32"),
                           "min_cosine": _with({"type": "number", "minimum": 0, "maximum": 1}, 0.999),
                           "profile": _with({"type": "boolean"}, False),
                           "rtol": _with({"type": "number", "exclusiveMinimum": 0}, 1e-3),
                           "atol": _with({"type": "number", "exclusiveMinimum": 0}, 1e-3)}}, {}),
        "experiments": _with({
            "type": "object", "additionalProperties": False,
            "properties": {
                "names": _with({"type": "array", "items": {"enum": list(EXPERIMENTS)}, "minItems": 1},
                               ["compare_tuners"]),
                "workloads": _with({"type": "array", "items": {"enum": list(WORKLOADS)}, "minItems": 1}, ["c1"]),
                "models": _with({"type": "array", "items": _PLAIN_NAME}, []),
                "model_trials": _with(_TRIALS, 512),
                "checkpoints": _with(_POSITIVE_INT, 4),
                "tuners": _with({"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                                ["random", "ga", "xgb", "ga-dqn", "ga-dqn-random"]),
                "tuner_options": _with({"type": "object", "additionalProperties": {"type": "object"}}, {}),
                "trials": _with(_TRIALS, 64),
                "repeats": _with(_POSITIVE_INT, 3),
                "hyperparameter_trials": _with(_POSITIVE_INT, 6),
                "remeasure": _with({"type": "integer", "minimum": 0}, 0),
                "save_path": _with({"type": "string", "minLength": 1}, "results"),
                "save_name": _with(_PLAIN_NAME, "experiment"),
                "previous_results_dir": _with({"oneOf": [{"type": "null"}, {"type": "string"}]}, None),
            }}, {}),
    },
}


def _fill_defaults(validator: Any, properties: dict, instance: Any, schema: dict) -> Iterator:
    """jsonschema's ``properties`` check that first sets every missing key that has a default
    (jsonschema's documented way to fill defaults from the schema)."""
    if isinstance(instance, dict):
        for key, subschema in properties.items():
            if "default" in subschema:
                instance.setdefault(key, copy.deepcopy(subschema["default"]))
    yield from Validator.VALIDATORS["properties"](validator, properties, instance, schema)


_DefaultFillingValidator = jsonschema.validators.extend(Validator, {"properties": _fill_defaults})


def defaults() -> dict:
    """The configuration every key left out of a config takes."""
    config: dict = {}
    _DefaultFillingValidator(SCHEMA).validate(config)
    return config


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _explain(error: jsonschema.ValidationError) -> str:
    key = _key_path(error)
    rule = error  # the error of the whole rule, when a branch of "anyOf"/"oneOf" failed inside it
    while rule.parent is not None and rule.parent.validator in ("anyOf", "oneOf"):
        rule = rule.parent
    if re.fullmatch(r"run_settings\.variants\.\d+", key):
        return f"config key {key}: {error.instance!r} is not allowed; allowed: {', '.join(VARIANTS)}, or " \
               f"{TUNED_FROM}<save_name> (the records of another tune of the model, in save_path)"
    if error.validator == "enum":
        allowed = (value if isinstance(value, str) else json.dumps(value) for value in error.validator_value)
        return f"config key {key}: {error.instance!r} is not allowed; allowed: {', '.join(allowed)}"
    if error.validator == "additionalProperties":
        known = error.schema.get("properties", {})
        unknown = ", ".join(repr(k) for k in sorted(set(error.instance) - set(known)))
        return f"config key {key}: unknown key {unknown}; allowed keys: {', '.join(sorted(known))}"
    if error.validator == "pattern":
        return f"config key {key}: {error.instance!r} is not a plain name; use letters, digits, '.', '_' and '-' " \
               "(it becomes part of a file name)"
    if error.validator == "maximum":
        return f"config key {key}: {error.instance!r} is too large; it must be <= {error.validator_value}" + \
            (" (about 14 hours of measurements on 2 cores)" if error.validator_value == MAX_TRIALS else "")
    if error.validator in ("minimum", "exclusiveMinimum"):
        return f"config key {key}: {error.instance!r} is too small; it must be >= {error.validator_value}" \
            if error.validator == "minimum" else f"config key {key}: {error.instance!r} must be > {error.validator_value}"
    if key.endswith("target") and rule.validator == "oneOf":
        return f"config key target: {error.instance!r} is not allowed; allowed: \"llvm\", \"cuda\" or a target dict"
    if error.validator in ("type", "minItems", "anyOf", "oneOf"):
        return f"config key {key}: must be {describe(rule.schema)}, got {error.instance!r}"
    return f"config key {key}: {error.message}"


def parse_json(text: str, source: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise AutoTVMError(f"{source} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    if not isinstance(data, dict):
        raise AutoTVMError(f"{source} must hold a JSON object, got {type(data).__name__}")
    return data


def load_config(arg: str, overrides: list[str] = ()) -> Config:
    """Read a config from a path or inline JSON, apply ``overrides`` (``KEY=VALUE``, a dotted key
    and a JSON value or a string), validate it, fill in the defaults and return it as settings."""
    if arg.lstrip().startswith("{"):
        data = parse_json(arg, "the inline config")
    else:
        if not os.path.isfile(arg):
            raise AutoTVMError(f"config file {arg!r} {'is a folder' if os.path.isdir(arg) else 'does not exist'}; "
                               "pass a JSON file or inline JSON with -c")
        with open(arg, encoding="utf-8") as handle:
            data = parse_json(handle.read(), f"config file {arg!r}")
    for item in overrides:
        _override(data, item)
    validator = Validator(SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(list(e.absolute_path)), str(e.absolute_path)))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise AutoTVMError(_explain(best))
    for spec in data.get("models", []):
        _check_model(spec)
    _DefaultFillingValidator(SCHEMA).validate(data)
    _check_precision(data)
    _check_rounds_in_flight(data)
    _check_cache_flush(data)
    experiments = data["experiments"]
    check_tuner_variants(experiments["tuners"], experiments["tuner_options"], "experiments.tuners",
                         "experiments.tuner_options")
    _check_experiment_models(data)
    return Config.from_dict(data)


def _check_model(spec: dict) -> None:
    """What a model spec names, checked before anything loads or starts: its op workload, torch or
    Hugging Face model, pretrained weights' folder, and a convolution algorithm its layout allows."""
    key = f"config key models.{spec['name']}"
    names = {"op": ("workload", WORKLOADS), "torch": ("model", TORCH_MODELS), "hf": ("model", HF_MODELS)}
    if spec["type"] in names:
        field, allowed = names[spec["type"]]
        value = spec.get(field) or (spec["name"] if spec["type"] == "op" else None)  # an op's name is its workload
        if value not in allowed:
            raise AutoTVMError(f"{key}.{field}: {'missing' if value is None else repr(value) + ' is not allowed'}; "
                               f"allowed: {', '.join(allowed)}")
    if spec["type"] == "hf" and spec.get("pretrained"):
        pretrained_path(ModelSpec.of(spec), f"{key}.path")
    if spec.get("conv_algorithm") == "winograd" and spec.get("conv_layout") == "NCHW":
        raise AutoTVMError(f"{key}.conv_algorithm: 'winograd' needs conv_layout 'NHWC' or 'auto', not 'NCHW'")


def _override(data: dict, item: str) -> None:
    """Set the dotted key of ``KEY=VALUE`` in ``data`` (a list element by its index, e.g.
    ``models.0.batch``); the value is JSON where it parses, else the string itself."""
    key, _, text = item.partition("=")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    *parents, last = key.split(".")
    node: Any = data
    for part in parents:
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node.setdefault(part, {})
        else:
            raise AutoTVMError(f"--set {key}: {part!r} is not a key of the config there")
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise AutoTVMError(f"--set {key}: {last!r} is not a key of the config there")


def _target_kind(data: dict) -> str:
    """The config's target kind: "llvm" or "cuda" (the target is a name or a dict)."""
    target = data["target"]
    return target if isinstance(target, str) else target.get("kind")


def _check_precision(data: dict) -> None:
    """float16 is for a GPU's tensor cores; on a CPU TVM has no fast float16 kernels to offer."""
    precision, target = data["run_settings"]["precision"], data["target"]
    kind = _target_kind(data)
    if precision == "float16" and kind != "cuda":
        raise AutoTVMError(f"config key run_settings.precision: 'float16' needs a CUDA target (target is {kind!r}); "
                           "on a CPU use 'float32' (or 'bfloat16' where the CPU has AVX512-BF16)")
    if precision == "bfloat16":
        try:
            check_precision(precision, make_target(target))
        except AutoTVMError as err:
            raise AutoTVMError(f"config key run_settings.precision: {err}") from None


def _check_rounds_in_flight(data: dict) -> None:
    """Rounds of several tasks at once overlap one task's runs with another's builds: on a GPU
    only, where the runs do not share the builds' cores."""
    rounds, kind = data["autotuner_settings"]["rounds_in_flight"], _target_kind(data)
    if rounds is not None and rounds > 1 and kind != "cuda":
        raise AutoTVMError(f"config key autotuner_settings.rounds_in_flight: {rounds} needs a CUDA target (target is "
                           f"{kind!r}); on a CPU the runs would share the cores with the builds: use 1 or leave it out")


def _check_cache_flush(data: dict) -> None:
    """``enable_cpu_cache_flush: "private"`` evicts the caches of this machine's cores: an RPC
    server's runtime knows only TVM's own flush."""
    tuning = data["autotuner_settings"]
    if tuning["enable_cpu_cache_flush"] == "private" and tuning.get("rpc"):
        raise AutoTVMError("config key autotuner_settings.enable_cpu_cache_flush: 'private' evicts the caches of this "
                           "machine's cores, not an RPC server's; use true or false with autotuner_settings.rpc")


def _check_experiment_models(data: dict) -> None:
    """``experiments.models`` names models of the config; ``model_tuners`` needs at least one."""
    known = [spec["name"] for spec in data["models"]]
    experiments = data["experiments"]
    for i, name in enumerate(experiments["models"]):
        if name not in known:
            raise AutoTVMError(f"config key experiments.models.{i}: {name!r} is not a model of the config's models "
                              f"({', '.join(known) or 'none given'})")
    if "model_tuners" in experiments["names"] and not experiments["models"]:
        raise AutoTVMError("config key experiments.models: model_tuners needs the names of the models to tune, from "
                          f"the config's models ({', '.join(known) or 'none given'})")


def _check_tuner_options(options: dict, tuner: str, key: str) -> None:
    """The options of one tuner, by its own rules (``TUNER_OPTIONS``; a key it does not take is
    refused: ``make_tuner`` would ignore it silently)."""
    for name in options:
        if name not in TUNER_OPTIONS[tuner]:
            raise AutoTVMError(f"config key {key}.{name}: unknown tuner option; allowed: "
                               f"{', '.join(sorted(TUNER_OPTIONS[tuner]))}")
    rules = {"type": "object", "properties": {name: TUNER_RULES[name] for name in options}}
    error = jsonschema.exceptions.best_match(Validator(rules).iter_errors(options))
    if error is not None:
        raise AutoTVMError(_explain(error).replace("config key ", f"config key {key}.", 1).replace(f"{key}.: ", f"{key}: "))


def check_tuner_variants(tuners: list[str], per_tuner: dict, tuners_key: str, options_key: str) -> None:
    """Every tuner is a registry name or NAME@LABEL, and each tuner's options belong to a tuner of
    the list and are options its NAME takes (``*_key``: how the user gave them, for the message)."""
    allowed = list(TUNERS) + ["metaschedule"]
    for i, name in enumerate(tuners):
        if base_tuner(name) not in allowed:
            raise AutoTVMError(f"config key {tuners_key}.{i}: {name!r} is not allowed; allowed: "
                              f"{', '.join(allowed)}, or NAME@LABEL for NAME with {options_key}[NAME@LABEL]")
    for name, options in per_tuner.items():
        key = f"{options_key}.{name}"
        if name not in tuners:
            raise AutoTVMError(f"config key {key}: not one of {tuners_key} ({', '.join(tuners)})")
        if not isinstance(options, dict):
            raise AutoTVMError(f"config key {key}: must be an object of tuner options, got {options!r}")
        if base_tuner(name) not in TUNER_OPTIONS:
            if options:
                raise AutoTVMError(f"config key {key}: {base_tuner(name)} takes no tuner options")
            continue
        _check_tuner_options(options, base_tuner(name), key)
