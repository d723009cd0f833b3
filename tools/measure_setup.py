"""Turn the config's ``autotuner_settings`` into AutoTVM measurement options."""

from __future__ import annotations

import autotvm


def measure_option_from_settings(settings: dict) -> dict:
    """A LocalBuilder and a LocalRunner, or an RPCRunner when ``rpc`` is given."""
    builder = autotvm.LocalBuilder(n_parallel=settings["n_parallel"], timeout=settings["timeout"])
    common = {"number": settings["number"], "repeat": settings["repeat"], "min_repeat_ms": settings["min_repeat_ms"],
              "timeout": settings["timeout"], "check_correctness": settings.get("check_correctness", False),
              "enable_cpu_cache_flush": settings.get("enable_cpu_cache_flush", False)}
    rpc = settings.get("rpc")
    if rpc:
        runner = autotvm.RPCRunner(rpc["key"], rpc["host"], rpc["port"], server_wait=rpc.get("server_wait", 300),
                                   **common)
    else:
        runner = autotvm.LocalRunner(**common)
    return autotvm.measure_option(builder, runner)
