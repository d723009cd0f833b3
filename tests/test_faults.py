"""Faults a long tune meets: a second writer, a full disk, a cut-off or corrupt log, a killed worker,
an RPC server that goes away and comes back. Real processes on a small operator."""

import json
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest
import tvm.rpc.server
import tvm.rpc.tracker

import autotvm
from autotvm.measure.local import servers_for_key
from autotvm.record import claim_log, load_from_file, release_log
from autotvm.tuner import RandomTuner
from test_driver import ROOT, driver, project_env, tiny_config


def _records(log):
    return [json.loads(line) for line in open(log, encoding="utf-8").read().splitlines()]


def _one_line_error(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    for word in words:
        assert word in last, last


def test_a_second_writer_of_a_log_is_refused_at_once_naming_the_first(tmp_path):
    path, _ = tiny_config(tmp_path)
    log = tmp_path / "out" / "t-mm.json"
    os.makedirs(log.parent)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from autotvm.record import claim_log; "
                               "claim_log(sys.argv[1]); print('held', flush=True); time.sleep(120)", str(log)],
                              stdout=subprocess.PIPE, text=True, env=project_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        result = driver("-m=tune", f"-c={path}")
        _one_line_error(result, "being written by another tune", f"process {holder.pid}")
        assert not log.exists() or log.read_text() == ""  # nothing measured
    finally:
        holder.kill()
        holder.wait()
    claim_log(log)  # the lock died with its holder, even killed


def test_a_full_disk_stops_with_one_line_and_keeps_whole_records(tmp_path):
    path, config = tiny_config(tmp_path)
    config["autotuner_settings"]["trials"] = 8
    with open(path, "w") as handle:
        json.dump(config, handle)
    log = tmp_path / "out" / "t-mm.json"

    os.makedirs(log.parent)
    log.write_text("# a log that is near its size limit\n" * 8000)  # ~300 KB: builds (~20 KB) still fit
    limit = log.stat().st_size + 2000  # room for one batch of two records, not two

    def small_files():  # in the child: no file may grow past the limit; writes beyond it fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = project_env()
    result = subprocess.run([sys.executable, os.path.join(ROOT, "driver.py"), "-m=tune", f"-c={path}"],
                            capture_output=True, text=True, env=env, preexec_fn=small_files, timeout=600)
    _one_line_error(result, "cannot write to the log", "run the same command again to resume")
    text = log.read_text()
    assert text.endswith("\n") and len(text) <= limit  # whole records only
    records = [json.loads(line) for line in text.splitlines() if not line.startswith("#")]
    assert 0 < len(records) < 8  # the batches before the limit, each whole; a rerun resumes after them


def test_a_half_written_last_line_is_cut_before_the_resume_appends(tmp_path, matmul_task, measure_opt, caplog):
    log = tmp_path / "cut.json"
    RandomTuner(matmul_task, seed=5).tune(4, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    release_log(log)  # as if this process had ended
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:3]) + lines[3][:57])  # a crash in the middle of the fourth record
    tuner = RandomTuner(matmul_task, seed=5)
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        callback = autotvm.callback.log_to_file(str(log))  # claims the log: the partial line goes
        assert tuner.load_history(str(log)) == 3
        tuner.tune(3, measure_opt, callbacks=[callback])
    assert any("removed a half-written last line (57 bytes)" in r.message for r in caplog.records)
    records = _records(log)  # every line parses
    assert len(records) == 6 and len({r["config"]["index"] for r in records}) == 6


def test_undecodable_bytes_and_impossible_costs_are_skipped_with_one_warning(tmp_path, matmul_task, measure_opt,
                                                                            caplog):
    log = tmp_path / "real.json"
    RandomTuner(matmul_task, seed=0).tune(4, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    good = log.read_bytes().splitlines(keepends=True)
    forged = json.loads(good[0])
    forged["result"][0] = [-1.0]  # a forged, impossible cost
    fast = json.loads(good[1])
    fast["result"][0] = [0.0]
    damaged = tmp_path / "damaged.json"
    damaged.write_bytes(b"".join(good[:2]) + b"\xff\xfe\x00garbage\n" + (json.dumps(forged) + "\n").encode()
                        + b"{not json\n" + (json.dumps(fast) + "\n").encode() + b"".join(good[2:]) + b"\x80\x81")
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        records = list(load_from_file(damaged))
        with autotvm.apply_history_best(str(damaged)) as best:
            config = best.query(matmul_task.target, matmul_task.workload)
        autotvm.record.pick_best(damaged, tmp_path / "best.json")
    assert len(records) == 4
    warnings = [r.message for r in caplog.records if "unreadable line" in r.message]
    assert warnings and all("skipped 5 unreadable lines (first at line 3: bytes that are not UTF-8)" in w
                            for w in warnings)
    best_cost = min(r[1].mean_cost for r in records)
    chosen = next(r for r in records if r[0].config.index == config.index)
    assert chosen[1].mean_cost == best_cost > 0


@pytest.mark.parametrize("pool", ["runner", "builder"])
def test_a_killed_worker_is_measured_again_not_recorded_as_a_failure(tmp_path, matmul_task, pool):
    """A build or run worker killed mid-tune (from outside, or out of memory) says nothing of the
    config it held: the trial is measured again, and every record is a measurement."""
    builder = autotvm.LocalBuilder(n_parallel=2, timeout=20)
    runner = autotvm.LocalRunner(number=2, repeat=1, timeout=20)
    killed = []

    def kill_the_workers(tuner, inputs, results):
        if not killed:  # after the first batch
            executor = (runner if pool == "runner" else builder).executor
            pids = [w._proc.pid for w in executor._worker_map.values() if w._proc is not None]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed.extend(pids)

    log = tmp_path / "killed.json"
    try:
        RandomTuner(matmul_task, seed=1).tune(8, autotvm.measure_option(builder, runner),
                                              callbacks=[kill_the_workers, autotvm.callback.log_to_file(str(log))])
    finally:
        runner.close()
        builder.close()
    assert killed, "found no worker to kill"
    records = _records(log)
    assert len(records) == 8 and all(r["result"][1] == 0 for r in records), [r["result"] for r in records]


@pytest.mark.slow
def test_the_rpc_server_dies_and_comes_back_mid_tune(tmp_path, matmul_task, builder, caplog):
    tracker = tvm.rpc.tracker.Tracker(host="127.0.0.1", port=9500, port_end=9600, silent=True)

    def start_server():
        server = tvm.rpc.server.Server(host="127.0.0.1", port=9700, port_end=9800, key="fault-cpu",
                                       tracker_addr=("127.0.0.1", tracker.port), silent=True)
        deadline = time.time() + 30
        while servers_for_key("127.0.0.1", tracker.port, "fault-cpu") < 1 and time.time() < deadline:
            time.sleep(0.3)
        return server

    servers = [start_server()]
    runner = autotvm.RPCRunner("fault-cpu", "127.0.0.1", tracker.port, number=2, repeat=1, timeout=5,
                               server_wait=60)

    def kill_then_restart(tuner, inputs, results):
        if len(servers) == 1 and len(tuner.history) >= 2:
            servers[0].terminate()
            servers.append(None)
            threading.Timer(6, lambda: servers.append(start_server())).start()

    log = tmp_path / "rpc.json"
    try:
        with caplog.at_level(logging.WARNING, logger="autotvm"):
            tuner = RandomTuner(matmul_task, seed=2)
            tuner.tune(8, autotvm.measure_option(builder, runner),
                       callbacks=[kill_then_restart, autotvm.callback.log_to_file(str(log))])
    finally:
        runner.close()
        time.sleep(0.5)
        for server in servers:
            if server is not None:
                server.terminate()
        tracker.terminate()
    records = _records(log)
    assert len(records) == 8 and all(r["result"][1] == 0 for r in records), [r["result"] for r in records]
    assert any("lost to the measuring machinery" in r.message for r in caplog.records)


def test_an_rpc_server_that_never_comes_back_stops_the_tune_with_one_line(tmp_path, matmul_task, builder, caplog):
    tracker = tvm.rpc.tracker.Tracker(host="127.0.0.1", port=9500, port_end=9600, silent=True)
    server = tvm.rpc.server.Server(host="127.0.0.1", port=9700, port_end=9800, key="gone-cpu",
                                   tracker_addr=("127.0.0.1", tracker.port), silent=True)
    deadline = time.time() + 30
    while servers_for_key("127.0.0.1", tracker.port, "gone-cpu") < 1 and time.time() < deadline:
        time.sleep(0.3)
    runner = autotvm.RPCRunner("gone-cpu", "127.0.0.1", tracker.port, number=1, repeat=1, timeout=4,
                               server_wait=3)

    def kill(tuner, inputs, results):
        server.terminate()

    log = tmp_path / "gone.json"
    try:
        with caplog.at_level(logging.WARNING, logger="autotvm"), \
            pytest.raises(autotvm.AutoTVMError, match="came back within 3 s; every trial measured so far is in"):
            RandomTuner(matmul_task, seed=3).tune(8, autotvm.measure_option(builder, runner),
                                                  callbacks=[kill, autotvm.callback.log_to_file(str(log))])
    finally:
        runner.close()
        tracker.terminate()
    records = _records(log)
    assert len(records) == 2 and all(r["result"][1] == 0 for r in records)  # no fake failure recorded
    assert any("is gone: waiting up to 3 s" in r.message for r in caplog.records)


def test_a_forged_fast_record_is_never_chosen(tmp_path, matmul_task, measure_opt, caplog):
    """A record that claims a cost the target could never run (here 1e-12 s for the slowest config
    measured) is skipped with one warning per log, by every reader: the log reader when the record
    names its FLOPs, the tuner on resume, apply_history_best and pick_best when it does not."""
    log = tmp_path / "real.json"
    RandomTuner(matmul_task, seed=0).tune(4, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    release_log(log)
    rows = _records(log)
    slowest = max(rows, key=lambda row: row["result"][0][0])
    forged = dict(slowest, result=[[1e-12], 0, 1.0, time.time()])
    unnamed = {key: value for key, value in forged.items() if key != "flop"}  # AutoTVM's own format: no FLOPs
    for name, extra in (("forged", forged), ("unnamed", unnamed)):
        path = tmp_path / f"{name}.json"
        path.write_text(log.read_text() + json.dumps(extra) + "\n")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="autotvm"):
            tuner = RandomTuner(matmul_task, seed=0)
            assert tuner.load_history(str(path)) == 4  # configs, not records: the forged one is not a 5th
            assert tuner.best_config.index != slowest["config"]["index"]
            with autotvm.apply_history_best(str(path)):
                chosen = autotvm.DispatchContext.current_config(matmul_task)
            autotvm.record.pick_best(path, tmp_path / "best.json", tasks=[matmul_task])
        assert chosen.index != slowest["config"]["index"]
        (best,) = _records(tmp_path / "best.json")
        assert best["config"]["index"] == chosen.index and best["result"][0][0] > 1e-9
        warned = [r.getMessage() for r in caplog.records if "faster than the target can run" in r.getMessage()]
        assert warned and all(str(path) in w for w in warned), [r.getMessage() for r in caplog.records]
    # pick_best can time its choices again: the fastest of the top configs as measured now
    autotvm.record.pick_best(tmp_path / "forged.json", tmp_path / "again.json", tasks=[matmul_task],
                             measure_option=measure_opt, top=2)
    (again,) = _records(tmp_path / "again.json")
    assert again["result"][1] == 0 and again["result"][3] > slowest["result"][3]  # a new timing


@pytest.mark.alone
def test_the_benchmark_warns_when_a_build_is_slower_than_its_records(tmp_path):
    """Records ten times faster than the build really runs (measured on another machine, say) are
    plausible, so they are used; the benchmark then names the functions that lag them."""
    # one thread: its time is steady while other processes keep the machine's other cores busy
    path, config = tiny_config(tmp_path, models=[{"name": "mm", "type": "op", "workload": "mm512"}],
                               target={"kind": "llvm", "num-cores": 1})
    config["autotuner_settings"].update(trials=4, tuner="random")
    config["run_settings"] = {"repeat": 2, "number": 2, "variants": ["tvm-tuned"]}
    with open(path, "w") as handle:
        json.dump(config, handle)
    assert driver("-m=tune", f"-c={path}").returncode == 0
    log = tmp_path / "out" / "t-mm.json"
    result = driver("-m=benchmark", f"-c={path}")
    for _ in range(2):
        if "slower than the records" not in result.stdout:
            break
        # true of that run, if another program shared its core for a moment (the other test
        # workers wait: ``alone``): it must not hold in three runs apart
        time.sleep(5)
        result = driver("-m=benchmark", f"-c={path}")
    assert result.returncode == 0 and "slower than the records" not in result.stdout, result.stdout[-2000:]
    rows = _records(log)
    for row in rows:
        row["result"][0] = [cost / 10 for cost in row["result"][0]]
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = driver("-m=benchmark", f"-c={path}")
    assert result.returncode == 0, result.stderr[-2000:]
    warning = next(line for line in result.stdout.splitlines() if "slower than the records" in line)
    assert "mm tvm-tuned: 1 function run more than 2x slower" in warning and "matmul" in warning


def test_a_function_made_from_a_template_is_judged_against_its_record_too(tmp_path):
    """A function that a template makes (here attention's softmax, row by row, called three
    times a run) is found by the name the build gave it, not by its template's: the build notes
    each function's record (``ApplyHistoryBest.built``). Records as fast as the function runs in
    the model pass; records ten times faster name it. Both are made from the one measurement of
    the model, so the other test worker's load on the cores cannot move one against the other."""
    from autotvm.task import x86_softmax
    from tools.models import build_model, load_program
    from tools.timing import function_times, slower_than_records

    spec = {"name": "t", "type": "torch", "model": "transformer", "layers": 1, "seq_len": 512}
    model, mod, params = load_program(spec)
    target = autotvm.make_target("llvm")
    (softmax,) = [t for t in autotvm.task.extract_from_program(mod, target, params) if t.name == x86_softmax.TEMPLATE]
    log = tmp_path / "softmax.json"
    RandomTuner(softmax, seed=0).tune(2, autotvm.measure_option(autotvm.LocalBuilder(n_parallel=2),
                                                                autotvm.LocalRunner(number=2, repeat=1)),
                                      callbacks=[autotvm.callback.log_to_file(str(log))])
    with autotvm.apply_history_best(str(log)) as best, pytest.warns(UserWarning, match="tunable functions have no record"):  # softmax only
        exe = build_model(spec, mod, params, target)
    (name,) = best.built
    assert name.startswith("softmax_rows_2048x512"), best.built
    times = function_times(exe, target, model)
    assert times[name].calls == 3
    per_call_s = times[name].fastest_ms / times[name].calls / 1e3

    def named_with_records_of(cost_s: float) -> list[str]:
        """The functions named slow when every config's record reads ``cost_s``."""
        rows = _records(log)
        for row in rows:
            row["result"][0] = [cost_s]
        forged = tmp_path / f"forged-{cost_s:.3g}.json"
        forged.write_text("".join(json.dumps(row) + "\n" for row in rows))
        with autotvm.apply_history_best(str(forged)) as best, pytest.warns(UserWarning, match="tunable functions have no record"):
            build_model(spec, mod, params, target)
        return [slow[0] for slow in slower_than_records(times, best.built)]

    assert named_with_records_of(per_call_s) == []
    assert named_with_records_of(per_call_s / 10) == [name]


def test_builds_that_die_under_a_file_size_limit_stop_the_tune_without_fake_failures(tmp_path):
    """A file-size limit (as a full disk) kills the compiler inside the build workers, which say
    nothing of why: the tune checks the disk, stops with its one line, and logs no failure."""
    from tools.models import model_tasks

    path, config = tiny_config(tmp_path)
    model_tasks(config["models"][0], autotvm.make_target("llvm"))  # the design space cached before the limit
    limit = 16 * 1024  # a build's library is larger; a batch of records is not

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = project_env()
    result = subprocess.run([sys.executable, os.path.join(ROOT, "driver.py"), "-m=tune", f"-c={path}"],
                            capture_output=True, text=True, env=env, preexec_fn=small_files, timeout=600)
    _one_line_error(result, "the disk is full", "run the same command again to resume")
    log = tmp_path / "out" / "t-mm.json"
    assert not log.exists() or all(row["result"][1] == 0 for row in _records(log))


def test_no_worker_outlives_a_tune_killed_with_sigkill_and_the_next_tune_removes_its_builds(tmp_path, monkeypatch):
    import psutil

    path, config = tiny_config(tmp_path)
    config["autotuner_settings"].update(trials=200, tuner="random")
    with open(path, "w") as handle:
        json.dump(config, handle)
    log = tmp_path / "out" / "t-mm.json"
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "driver.py"), "-m=tune", f"-c={path}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(project_env(), TMPDIR=str(temp)))
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 4):
        time.sleep(0.2)
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert len(workers) >= 3, workers  # two build workers and a run worker
    proc.kill()
    proc.wait()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]

    (killed,) = [d for d in temp.iterdir() if d.name.startswith(f"autotvm-build-{proc.pid}-")]  # left behind
    (killed / "kernel.so").write_bytes(b"")
    live, recent = temp / f"autotvm-build-{os.getpid()}-x", temp / f"autotvm-build-{proc.pid}-y"
    live.mkdir(), recent.mkdir()
    hours_ago = time.time() - 2 * 3600
    for folder in (killed, live):
        os.utime(folder, (hours_ago, hours_ago))
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    builder = autotvm.LocalBuilder(n_parallel=1)
    builder.close()
    assert not killed.exists()  # the killed tune's, untouched for over an hour
    assert live.exists() and recent.exists()  # a live process's, and one touched a moment ago


def test_older_logs_failures_of_the_machinery_are_measured_again_on_resume(tmp_path, matmul_task, measure_opt):
    """A log written before worker deaths were recognised holds them as the configs' failures
    (``ChildProcessError``, a full disk): on resume those configs are not taken as measured."""
    log = tmp_path / "old.json"
    RandomTuner(matmul_task, seed=6).tune(4, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    release_log(log)
    rows = _records(log)
    for row, message in zip(rows[:2], ("ChildProcessError: Subprocess terminated",
                                        "OSError: [Errno 27] File too large")):
        row["result"] = [[1e9], 2, 0.1, row["result"][3]]
        row["error_msg"] = message
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tuner = RandomTuner(matmul_task, seed=6)
    assert tuner.load_history(str(log)) == 2
    assert {row["config"]["index"] for row in rows[:2]}.isdisjoint(tuner.visited)
