"""Command line of the GA-DQN auto-tuner: ``python driver.py -m=tune|benchmark|experiment -c=config.json``.

A thin layer over ``tools/``: parse the arguments, load and validate the config, run the method.
A user mistake is reported as one line on stderr with exit code 2, never a traceback.
"""

from __future__ import annotations

import _thread
import argparse
import os
import signal
import sys
import threading
import warnings

METHODS = ("tune", "benchmark", "experiment")
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config-example.json")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors, in one line
        sys.stderr.write(f"driver.py: error: {message}\n")
        sys.exit(2)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(description=__doc__)
    parser.add_argument("-m", "--method", required=True, help=f"one of: {', '.join(METHODS)}")
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG,
                        help="a JSON file or inline JSON (default: config-example.json)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one key of the config, e.g. run_settings.precision=float16 (VALUE is JSON, "
                             "or a string); repeat for more")
    args = parser.parse_args(argv)
    for item in args.set:
        if "=" not in item or not item.split("=", 1)[0]:
            parser.error(f"--set takes KEY=VALUE (a dotted config key such as run_settings.precision), got {item!r}")
    if args.method not in METHODS:
        parser.error(f"unknown method {args.method!r}; allowed: {', '.join(METHODS)}")
    return args


def stop_on_ctrl_c() -> None:
    """Make Ctrl-C stop the command (a tune's trials logged, its workers ended): even where it was
    started with SIGINT ignored or blocked, as a script's background job or a parent's thread may,
    and where Python drops the ``KeyboardInterrupt`` (raised inside a weakref callback or a
    ``__del__``, as one of the import system's locks runs, it is only printed as "Exception
    ignored"): then it is raised again in the main thread once the callback has returned."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    previous = sys.unraisablehook

    def raise_again(unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            threading.Timer(0.01, _thread.interrupt_main).start()  # not now: it would land in this hook
        else:
            previous(unraisable)

    sys.unraisablehook = raise_again


def one_line_warnings() -> None:
    """The project's own warnings (``autotvm``, ``tools``) printed as one line, "WARNING: ...", as
    the commands print theirs, without the file, line and source line of the call that raised
    them; other packages' warnings as Python prints them."""
    root, default = os.path.dirname(os.path.abspath(__file__)), warnings.formatwarning

    def one_line(message, category, filename, lineno, line=None) -> str:
        if issubclass(category, UserWarning) and os.path.abspath(filename).startswith(
                (os.path.join(root, "autotvm") + os.sep, os.path.join(root, "tools") + os.sep)):
            return f"WARNING: {message}\n"
        return default(message, category, filename, lineno, line)

    warnings.formatwarning = one_line


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the command, not a caller's process
        stop_on_ctrl_c()
        one_line_warnings()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from autotvm.checks import AutoTVMError
    from tools.config import load_config  # imports TVM: after the arguments are known to be sane

    try:
        config = load_config(args.config, args.set)
        if args.method in ("tune", "benchmark") and not config.models:
            raise AutoTVMError(f"config key models: -m={args.method} needs at least one model")
        if args.method == "tune":
            from tools.tune import tune_models

            tune_models(config)
        elif args.method == "benchmark":
            from tools.benchmark import benchmark_models

            benchmark_models(config)
        else:
            from tools.experiment import run_experiments

            run_experiments(config)
    except AutoTVMError as err:
        sys.stderr.write(f"driver.py: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("driver.py: interrupted; every measured trial is in the log, re-run to resume\n")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
