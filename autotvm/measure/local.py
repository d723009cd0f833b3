"""Builders and runners: parallel builds in persistent worker processes, timed runs on the device.

Workers are reused across batches (TVM is imported once per worker, not once per batch) and
recycled after ``max_worker_uses`` jobs so that no leak accumulates; a job that times out kills
its worker, which is restarted on the next job.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, Sequence

from tvm.support.popen_pool import PopenPoolExecutor, PopenWorker

from ..checks import AutoTVMError, check, check_int, check_number, choice, integer, text
from ..env import allowed_cpus, cuda_compiler, device_exists, device_of, host_cores, runtime_threads
from ..task.space import InstantiationError
from . import workers
from .measure import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, failed, full_disk_error

logger = logging.getLogger("autotvm")
BUILD_DIR_PREFIX = "autotvm-build-"  # then the tuning process's id: the folders of the builds
CACHE_FLUSHES = (False, True, "private")  # LocalRunner's enable_cpu_cache_flush
ORPHAN_AGE_S = 3600  # a build folder whose process is gone is removed once untouched this long
WATCH_S = 0.5  # how often an RPCRunner asks the tracker, during a batch, whether its server is still there


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # TVM errors end with the useful line; Python ones start with it
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"[:2000]


# a worker's Python where ``_lean_workers`` allows: TVM's worker loop with PyTorch kept out.
# ``tvm_ffi`` imports PyTorch where it can, which is most of a worker's start (and of its
# memory), and no build or run needs it
_WORKER_MAIN = "import sys; sys.modules['torch'] = None; from tvm.exec.popen_worker import main; main()"

# held while a worker's process starts; ``_end_at_exit`` takes it to mark the exit, after which
# no worker starts (``_Worker._start``)
_STARTS = threading.Lock()
_exiting = False


class _Worker(PopenWorker):
    """TVM's ``PopenWorker`` (Linux: the same loop and pipes), its process started without
    PyTorch where ``lean`` (``_WORKER_MAIN``), and never once this process is exiting: a worker
    started then would keep the exit waiting for its import of TVM."""

    def __init__(self, *args: Any, lean: bool) -> None:
        super().__init__(*args)
        self._lean = lean

    def _start(self) -> None:
        with _STARTS:
            if self._proc is not None:
                return
            if _exiting:
                raise ChildProcessError("not started: the process is exiting")
            # a process starts on its starting thread's CPUs, and TVM's thread pool pins the thread
            # that starts it (to one core, when it has one thread): this thread, the pool's and
            # running no kernel, takes every CPU the process was given back first
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, allowed_cpus())
            main_read, worker_write = os.pipe()
            worker_read, main_write = os.pipe()
            python = ["-c", _WORKER_MAIN] if self._lean else ["-m", "tvm.exec.popen_worker"]
            self._proc = subprocess.Popen([sys.executable, *python, str(worker_read), str(worker_write)],
                                          pass_fds=(worker_read, worker_write), stdout=self._stdout,
                                          stderr=self._stderr)
        os.close(worker_read)
        os.close(worker_write)
        self._reader = os.fdopen(main_read, "rb")
        self._writer = os.fdopen(main_write, "wb")


def _lean_workers() -> bool:
    """Whether workers start without PyTorch: where TVM has no CUDA runtime in this process.
    Where it has one, it may have found the CUDA runtime library among those PyTorch loaded (a GPU
    host whose CUDA comes with PyTorch's wheels), which a worker without PyTorch would lack."""
    import tvm.base

    return "tvm_runtime_cuda" not in getattr(tvm.base, "_LOADED_LIBS", {"tvm_runtime_cuda": None})


class _Pool(PopenPoolExecutor):
    """TVM's ``PopenPoolExecutor`` whose workers are ``_Worker``s (one a thread of its pool, as
    TVM's)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._lean = _lean_workers()

    def _worker_run(self, fn: Any, args: Any, kwargs: Any) -> Any:
        with self._lock:
            worker = self._worker_map.get(threading.get_ident())
            if worker is None:
                worker = self._worker_map[threading.get_ident()] = _Worker(
                    self._initializer, self._initargs, self._maximum_process_uses, self._stdout, self._stderr,
                    lean=self._lean)
        worker.send(fn, args, kwargs, self._timeout)
        return worker.recv()


class _Workers:
    """A pool of worker processes, started when first needed or ahead of it (``start``, in the
    background); its ``executor`` is handed out once every worker has started (imported TVM, and
    run the start's own jobs): no job's time includes a worker's start.

    Workers ignore Ctrl-C: the tuning process handles it, so a worker never dies half-way through
    a job and turns an interruption into a (false) failed measurement, nor prints a traceback
    while it imports TVM. They die with the tuning process (its pid is the initializer's last
    argument), even when it is killed."""

    def __init__(self, n_workers: int, timeout: float | None, max_uses: int, initializer: Any = workers.init_builder,
                 initargs: tuple = ()) -> None:
        self.n_workers = n_workers
        self._options = {"max_workers": n_workers, "timeout": timeout, "maximum_process_uses": max_uses,
                         "initializer": initializer, "initargs": (*initargs, os.getpid())}
        self._executor: PopenPoolExecutor | None = None
        self._starting: list = []  # the futures of the workers' start
        self._lock = threading.Lock()

    def start(self, *job: Any) -> None:
        """Start the workers, at once; ``job`` (a function and its arguments) runs as part of the start."""
        with self._lock:
            self._start(job)

    def _start(self, job: tuple = ()) -> None:  # the caller holds the lock
        if self._executor is None:
            self._executor = _Pool(**self._options)
            _end_at_exit(self._executor)
            # the pool's threads, created by these first jobs, and the workers they start (and
            # restart) inherit this thread's blocked SIGINT: deaf to it from their first instruction
            # (Python runs a pending Ctrl-C's handler as pthread_sigmask returns: the mask is read
            # before the try, set within it, so that a KeyboardInterrupt there still restores it)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
            try:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
                self._starting = [self._executor.submit(_warm_up) for _ in range(self.n_workers)]
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if job:
            self._starting.append(self._executor.submit(*job))

    @property
    def executor(self) -> PopenPoolExecutor:
        with self._lock:
            self._start()
            for started in self._starting:
                # a start that failed (the worker died, outlasted the timeout, could not open the
                # device) is met again, and reported, by the next job, in a worker started again
                try:
                    started.result()
                except Exception:
                    pass
            self._starting = []
            return self._executor  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor, self._starting = None, []


class LocalBuilder:
    """Build configs in ``n_parallel`` worker processes with a per-build ``timeout`` (seconds).

    Instantiation (replaying a config, running postprocessors) happens in the tuning process;
    an invalid config becomes an ``INSTANTIATION_ERROR`` result. ``remove_layout_rewrite``
    times kernels with weights taken as pre-laid-out, as MetaSchedule's builder does.
    """

    def __init__(self, timeout: float = 10, n_parallel: int | None = None, remove_layout_rewrite: bool = True,
                 max_worker_uses: int = 200) -> None:
        self.timeout = check_number("builder timeout", timeout, 0, strict=True)
        self.n_parallel = host_cores() if n_parallel is None else check_int("builder n_parallel", n_parallel)
        check_int("builder max_worker_uses", max_worker_uses)
        self.remove_layout_rewrite = remove_layout_rewrite
        self.max_worker_uses = max_worker_uses
        _remove_orphaned_build_dirs()
        self.build_dir = tempfile.mkdtemp(prefix=f"{BUILD_DIR_PREFIX}{os.getpid()}-")
        self._largest = 0  # bytes of the largest library built so far
        self._pool = _Workers(self.n_parallel, self.timeout, self.max_worker_uses)
        self._lock = threading.Lock()  # rounds of several tasks may build at once (``TaskScheduler``)
        self.builds, self.busy_seconds = 0, 0.0  # builds so far and the workers' time in them (the pool's load)
        self.device_compile_seconds = 0.0  # the part of busy_seconds in the CUDA compiler ...
        self.device_compiler: str | None = None  # ... which: "nvcc" or "NVRTC" (None: no CUDA build yet)
        atexit.register(self.close)

    def start(self, wait: bool = False) -> None:
        """Start the workers, which import TVM in the background: at once, so that a tune's model
        load and task extraction hide it, or with ``wait`` once they are ready (an experiment's
        first run then pays for no start its later runs skip)."""
        self._pool.start()
        if wait:
            _ = self.executor  # waits for the workers

    @property
    def executor(self) -> PopenPoolExecutor:
        return self._pool.executor

    def build_module(self, mod: Any, target: Any) -> str:
        """Compile one module as-is (the correctness reference); returns the library path."""
        path, *_ = self.executor.submit(workers.build_artifact, mod, target, self.build_dir, False, False,
                                        self._gpu_here(target)).result()
        return path

    @staticmethod
    def _gpu_here(target: Any) -> bool:
        return device_of(target) == "cuda" and device_exists(target)

    def build(self, inputs: Sequence[MeasureInput], check: bool = False) -> list[BuildResult]:
        """Instantiate every config, then compile the valid ones in parallel."""
        results: list[BuildResult | None] = [None] * len(inputs)
        futures = {}
        for i, inp in enumerate(inputs):
            start = time.perf_counter()
            try:
                mod = inp.task.instantiate(inp.config)
            except InstantiationError as err:
                results[i] = BuildResult(None, None, MeasureErrorNo.INSTANTIATION_ERROR, str(err),
                                         time.perf_counter() - start)
                continue
            instantiate_cost = time.perf_counter() - start  # not the submission's wait for the workers' start
            futures[i] = (self.executor.submit(workers.build_artifact, mod, inp.task.target, self.build_dir,
                                               self.remove_layout_rewrite, check, self._gpu_here(inp.task.target)),
                          instantiate_cost)
        for i, (future, instantiate_cost) in futures.items():
            results[i] = self._collect(future, inputs[i], instantiate_cost)
        return results  # type: ignore[return-value]

    def _collect(self, future: Any, inp: MeasureInput, instantiate_cost: float) -> BuildResult:
        try:
            path, arg_info, check_path, check_info, seconds, device_seconds = future.result()
            self._count(seconds, device_seconds)
            if device_seconds and self.device_compiler is None:  # without a GPU, the builder's check uses nvcc
                self.device_compiler = cuda_compiler() if self._gpu_here(inp.task.target) else "nvcc"
            self._largest = max(self._largest, os.path.getsize(path))
            return BuildResult(path, arg_info, MeasureErrorNo.NO_ERROR, "", instantiate_cost + seconds,
                               check_path and (check_path, check_info))
        except TimeoutError:
            self._count(self.timeout)
            return BuildResult(None, None, MeasureErrorNo.BUILD_TIMEOUT,
                               f"build timed out after {self.timeout:g} s", self.timeout)
        except Exception as err:  # compile errors arrive as exceptions from the worker
            code = MeasureErrorNo.COMPILE_DEVICE if device_of(inp.task.target) == "cuda" else MeasureErrorNo.COMPILE_HOST
            return BuildResult(None, None, code, _first_line(err), instantiate_cost)

    def _count(self, seconds: float, device_seconds: float = 0.0) -> None:
        with self._lock:
            self.builds += 1
            self.busy_seconds += seconds
            self.device_compile_seconds += device_seconds

    def check_disk(self) -> None:
        """Stop with the full-disk error if a file of a build's size cannot be written where builds
        go (a full disk or a file-size limit kills a build worker without a word to say why)."""
        probe = os.path.join(self.build_dir, ".disk-probe")
        try:
            with open(probe, "wb") as handle:
                handle.write(bytes(max(2 * self._largest, 1 << 20)))
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                raise full_disk_error() from None
            raise
        finally:
            try:
                os.remove(probe)
            except OSError:
                pass

    def close(self) -> None:
        self._pool.close()
        shutil.rmtree(self.build_dir, ignore_errors=True)


def _remove_orphaned_build_dirs() -> None:
    """Remove the build folders of tuning processes that ended without removing theirs (killed
    with SIGKILL, or by the kernel when memory ran out): a folder's name holds its process's id,
    and one untouched for ``ORPHAN_AGE_S`` whose process is not found here is removed (the age
    spares a live tune in another PID namespace that shares this temporary folder)."""
    root = tempfile.gettempdir()
    try:
        names = [name for name in os.listdir(root) if name.startswith(BUILD_DIR_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(BUILD_DIR_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or _process_exists(int(pid)):
            continue
        path = os.path.join(root, name)
        try:
            info = os.stat(path)
        except OSError:
            continue
        if info.st_uid == os.getuid() and time.time() - info.st_mtime > ORPHAN_AGE_S:
            shutil.rmtree(path, ignore_errors=True)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _warm_up() -> None:
    import tvm  # noqa: F401


def _end_at_exit(executor: PopenPoolExecutor) -> None:
    """As the process exits, before Python joins its threads (the hook ``concurrent.futures``
    uses), cancel ``executor``'s queued jobs and kill its workers: a thread waits on each worker
    in a job, so an exit (a Ctrl-C in a tune's first seconds) would otherwise wait for the workers
    still importing TVM. From then on no worker starts (``_Worker``): a queued job, or one whose
    thread was about to start its worker, would start one again. ``close`` ends the pool later,
    as before."""
    ref = weakref.ref(executor)

    def end() -> None:
        global _exiting
        with _STARTS:  # a worker starting now is in its pool's map once this returns; none starts after
            _exiting = True
        pool = ref()
        threads = getattr(pool, "_threadpool", None)
        if threads is not None:  # queued jobs (a worker's start, the device's opening) would start workers again
            threads.shutdown(wait=False, cancel_futures=True)
        for worker in list(getattr(pool, "_worker_map", {}).values()):
            proc = getattr(worker, "_proc", None)
            if proc is not None and proc.poll() is None:
                proc.kill()

    try:
        threading._register_atexit(end)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # another Python, or the process is already exiting
        pass


class LocalRunner:
    """Time each built config on this machine's device, one at a time, in a worker process.

    ``number`` runs are averaged into one cost, ``repeat`` costs are taken (the fastest and
    slowest dropped when there are more than two), each repeat lasting at least
    ``min_repeat_ms``. A run that exceeds ``timeout`` seconds or crashes is recorded as such.
    ``check_correctness`` compares every config's outputs with the untuned program's.
    ``enable_cpu_cache_flush`` sets the caches a CPU kernel finds at each repeat: ``False``, as
    the last repeat left them (its data in the cores' caches); ``True``, every argument but the
    first flushed from all of them (AutoTVM's x86 option); ``"private"``, each core's own caches
    (L1, L2) emptied of its data, inputs included, and the shared last-level cache left as it was:
    as inside a network, where the other kernels' data evicts a kernel's from the cores' caches
    between its calls but a network whose weights fit the last-level cache keeps them there.
    """

    n_parallel = 1

    def __init__(self, timeout: float = 10, number: int = 4, repeat: int = 3, min_repeat_ms: int = 0,
                 cooldown_interval: float = 0.0, enable_cpu_cache_flush: bool | str = False,
                 check_correctness: bool = False, max_worker_uses: int = 500) -> None:
        check_number("runner timeout", timeout, 0, strict=True)
        check_number("runner cooldown_interval", cooldown_interval, 0)
        for name, value, low in (("number", number, 1), ("repeat", repeat, 1), ("min_repeat_ms", min_repeat_ms, 0),
                                 ("max_worker_uses", max_worker_uses, 1)):
            check_int(f"runner {name}", value, low)
        self.timeout = float(timeout)
        self.number, self.repeat, self.min_repeat_ms = int(number), int(repeat), int(min_repeat_ms)
        self.cooldown_interval = float(cooldown_interval)
        self.enable_cpu_cache_flush = check("runner enable_cpu_cache_flush", enable_cpu_cache_flush,
                                            choice(CACHE_FLUSHES))
        self.check_correctness = check_correctness
        self.max_worker_uses = max_worker_uses
        self._pool: _Workers | None = None  # sized for ``_threads``
        self._lock = threading.Lock()
        # per task: (its device, its reference library or None); rounds of several tasks may
        # measure at once (``TaskScheduler``'s ``in_flight``); an entry goes with its task
        self._tasks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._threads: int | None = None
        atexit.register(self.close)

    # -- infrastructure faults: failures of the measuring machinery, not of the config
    def infrastructure_fault(self, result: MeasureResult) -> bool:
        """A failure this runner knows to be its machinery's, beyond a worker that died (which
        ``MeasureBatch`` recognises itself): none for a local runner."""
        return False

    def wait_until_ready(self) -> None:
        """Block until the device can measure again (a local pool replaces a dead worker itself)."""

    # -- hooks that RPCRunner overrides
    def _tracker(self) -> tuple | None:
        return None

    def _workers(self) -> int:
        return 1

    def _workers_pool(self) -> _Workers:
        with self._lock:
            if self._pool is None:
                self._pool = _Workers(self._workers(), self.timeout, self.max_worker_uses, workers.init_runner,
                                      (self._threads,))
            return self._pool

    @property
    def executor(self) -> PopenPoolExecutor:
        return self._workers_pool().executor

    def require_device(self, target: Any, what: str) -> None:
        """The one-line error when ``target``'s device is not on this machine and no RPC tracker
        measures on one (``what``: the message's subject, a task or the config)."""
        if self._tracker() is None and not device_exists(target):
            raise AutoTVMError(f"{what} targets CUDA but this machine has no CUDA GPU; measure on one through an RPC "
                               "tracker (RPCRunner, or autotuner_settings.rpc) or tune for llvm")

    def start(self, target: Any, wait: bool = False) -> None:
        """Start the run worker and open ``target``'s device in it (on a GPU, its CUDA context): at
        once, so that a tune's model load and task extraction hide it (its first run waits for
        it), or with ``wait`` once it is open. Nothing where an RPC server runs."""
        if self._tracker() is None and device_exists(target):
            self._use_threads(target)
            self._workers_pool().start(workers.open_device, device_of(target))
            if wait:
                _ = self.executor  # waits for the worker

    def _use_threads(self, target: Any) -> None:
        """The threads kernels of ``target`` are timed with (the target's cores, as the tuned
        program runs them); a pool sized for others is replaced."""
        threads = runtime_threads(target) if device_of(target) == "cpu" and self._tracker() is None else None
        if threads != self._threads:
            self.close()  # the workers' thread pools are sized once
            self._threads = threads

    def set_task(self, task: Any, builder: LocalBuilder) -> None:
        """Prepare for a task: its device, the threads its kernels are timed with (``_use_threads``)
        and, when checking, the reference program."""
        device = device_of(task.target)
        self._use_threads(task.target)
        self.require_device(task.target, f"task {task.name!r}")
        known = self._tasks.get(task)
        reference = None
        if self.check_correctness:  # built once per task (a task scheduler measures a task in many rounds)
            reference = known[1] if known and known[1] and os.path.exists(known[1]) else \
                builder.build_module(reference_module(task), task.target)
        self._tasks[task] = (device, reference)

    def _job(self, build: BuildResult, task: Any) -> dict:
        device, reference = self._tasks.get(task) or (device_of(task.target), None)
        job = {"path": build.filename, "arg_info": build.arg_info, "device": device, "number": self.number,
               "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms,
               "flush": self.enable_cpu_cache_flush if device == "cpu" else False, "tracker": self._tracker()}
        if reference and build.check_filename:
            job.update(reference_path=reference, check_path=build.check_filename[0],
                       check_arg_info=build.check_filename[1])
        return job

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """Run every successful build; failed builds pass through as failed results."""
        pending = {}
        results: list[MeasureResult | None] = [None] * len(builds)
        for i, build in enumerate(builds):
            if build.error_no != MeasureErrorNo.NO_ERROR:
                results[i] = failed(MeasureErrorNo(build.error_no), build.error_msg, build.time_cost)
                continue
            pending[i] = (self.executor.submit(workers.run_artifact, self._job(build, inputs[i].task)),
                          time.perf_counter())
            if self._workers() == 1:  # serial: wait before starting the next run
                results[i] = self._collect(*pending.pop(i), build)
                if self.cooldown_interval:
                    time.sleep(self.cooldown_interval)
        for i, (future, start) in pending.items():
            results[i] = self._collect(future, start, builds[i])
        return results  # type: ignore[return-value]

    def _collect(self, future: Any, start: float, build: BuildResult) -> MeasureResult:
        try:
            status, value = future.result()
        except TimeoutError:
            result = failed(MeasureErrorNo.RUN_TIMEOUT, f"run timed out after {self.timeout:g} s",
                            build.time_cost + self.timeout)
        except Exception as err:
            result = failed(MeasureErrorNo.RUNTIME_DEVICE, _first_line(err),
                            build.time_cost + time.perf_counter() - start)
        else:
            elapsed = build.time_cost + time.perf_counter() - start
            if status == "ok":
                result = MeasureResult(tuple(value), 0, elapsed, time.time())
            else:
                result = failed(MeasureErrorNo.WRONG_ANSWER, value, elapsed)
        for path in {build.filename, (build.check_filename or (None,))[0]} - {None}:
            try:
                os.remove(path)
            except OSError:
                pass
        return result

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


def reference_module(task: Any) -> Any:
    """The untuned program that every config's outputs are checked against. For a GPU, its
    loops are bound to threads by TVM's ``DefaultGPUSchedule``: an unscheduled function would be
    compiled for the host and handed the GPU's pointers."""
    mod = task.default_module()
    if device_of(task.target) != "cuda":
        return mod
    from tvm.s_tir.transform import DefaultGPUSchedule

    with task.target:
        return DefaultGPUSchedule()(mod)


class RPCRunner(LocalRunner):
    """Time configs on devices registered with a TVM RPC tracker under ``key``.

    ``n_parallel`` runs go at once (default: as many as the tracker has servers for ``key``).
    """

    def __init__(self, key: str, host: str, port: int, priority: int = 1, timeout: float = 10,
                 n_parallel: int | None = None, number: int = 4, repeat: int = 3, min_repeat_ms: int = 0,
                 cooldown_interval: float = 0.0, enable_cpu_cache_flush: bool | str = False,
                 check_correctness: bool = False, server_wait: float = 300) -> None:
        super().__init__(timeout, number, repeat, min_repeat_ms, cooldown_interval, enable_cpu_cache_flush,
                         check_correctness)
        check("RPCRunner key", key, text())
        if self.enable_cpu_cache_flush == "private":
            raise AutoTVMError("RPCRunner enable_cpu_cache_flush must be true or false: 'private' evicts the caches "
                               "of this machine's cores, not the RPC server's")
        check("RPCRunner port", port, integer(1, 65535))
        check_number("RPCRunner server_wait (seconds)", server_wait, 0)
        self.key, self.host, self.port, self.priority = key, host, int(port), priority
        self.server_wait = float(server_wait)  # how long a lost server is waited for before the tuning stops
        self._n_parallel = n_parallel
        self._tracker_checked = False

    def _ready(self) -> bool:
        return servers_for_key(self.host, self.port, self.key) > 0

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """Run as ``LocalRunner`` does, while a watcher asks the tracker every ``WATCH_S`` whether
        a server of the key is still there: a server that dies and comes back within the batch
        would otherwise leave timeouts that look like the configs' own."""
        lost, stop = threading.Event(), threading.Event()

        def watch() -> None:
            while not stop.wait(WATCH_S):
                if not self._ready():
                    lost.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            return super().run(inputs, builds)
        finally:
            stop.set()
            watcher.join()
            self._lost_in_batch = lost.is_set()

    def infrastructure_fault(self, result: MeasureResult) -> bool:
        """A run that failed or timed out while the tracker had no server for the key (or could not
        be reached) failed because the server went away, whatever the config."""
        return result.error_no in (MeasureErrorNo.RUN_TIMEOUT, MeasureErrorNo.RUNTIME_DEVICE) and (
            getattr(self, "_lost_in_batch", False) or not self._ready())

    def wait_until_ready(self) -> None:
        """Wait, with backoff, for a server of the key to register again; after ``server_wait``
        seconds stop the tuning with one line (every record measured so far is in the log)."""
        if self._ready():
            return
        address = f"{self.host}:{self.port}"
        logger.warning("the RPC server for key %r at the tracker %s is gone: waiting up to %g s for it to come "
                       "back; the trials it lost will be measured again", self.key, address, self.server_wait)
        deadline, delay = time.monotonic() + self.server_wait, 1.0
        while not self._ready():
            if time.monotonic() >= deadline:
                raise AutoTVMError(f"no RPC server for key {self.key!r} at the tracker {address} came back within "
                                   f"{self.server_wait:g} s; every trial measured so far is in the log: restart the "
                                   "server and run the same command again to resume")
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(2 * delay, 30.0)
        logger.warning("the RPC server for key %r is back; measuring the lost trials again", self.key)

    def set_task(self, task: Any, builder: LocalBuilder) -> None:
        self.check_tracker()
        super().set_task(task, builder)

    def check_tracker(self) -> None:
        """Refuse to tune without a device: otherwise every trial fails after TVM's minute of
        retries per connection, and a whole run ends with nothing measured and no error."""
        if self._tracker_checked:
            return
        address = f"{self.host}:{self.port}"
        try:
            socket.create_connection((self.host, self.port), timeout=5).close()
        except OSError as err:
            raise AutoTVMError(f"cannot reach the RPC tracker at {address} ({err.strerror or err}); start one with "
                               f"python -m tvm.exec.rpc_tracker --port {self.port}") from None
        if servers_for_key(self.host, self.port, self.key) == 0:
            raise AutoTVMError(f"the RPC tracker at {address} has no server for key {self.key!r}; start one with "
                               f"python -m tvm.exec.rpc_server --tracker {address} --key {self.key}")
        self._tracker_checked = True

    def _tracker(self) -> tuple:
        return (self.host, self.port, self.key, self.priority, max(int(self.timeout), 1) + 5)

    def _workers(self) -> int:
        if self._n_parallel is None:
            self._n_parallel = max(1, servers_for_key(self.host, self.port, self.key))
        return self._n_parallel

    @property
    def n_parallel(self) -> int:  # type: ignore[override]
        return self._workers()


def servers_for_key(host: str, port: int, key: str) -> int:
    """How many servers a tracker has for ``key`` (0 if it cannot be reached)."""
    import tvm.rpc

    try:
        summary = tvm.rpc.connect_tracker(host, port).summary()
    except Exception:
        return 0
    return sum(1 for server in summary.get("server_info", []) if server.get("key", "").split(":")[-1] == key
               or key in str(server.get("key", "")))


def measure_option(builder: Any, runner: Any) -> dict:
    """Pair a builder and a runner, as ``autotvm.measure_option`` did."""
    if isinstance(builder, str):
        if builder != "local":
            raise AutoTVMError(f"unknown builder {builder!r}; allowed: 'local' or a LocalBuilder")
        builder = LocalBuilder()
    if isinstance(runner, str):
        if runner != "local":
            raise AutoTVMError(f"unknown runner {runner!r}; allowed: 'local', a LocalRunner or an RPCRunner")
        runner = LocalRunner()
    if not hasattr(builder, "build"):
        raise AutoTVMError(f"builder must be 'local' or a LocalBuilder, got {builder!r}")
    if not hasattr(runner, "run"):
        raise AutoTVMError(f"runner must be 'local', a LocalRunner or an RPCRunner, got {runner!r}")
    return {"builder": builder, "runner": runner}
