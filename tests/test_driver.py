"""driver.py end to end on a tiny op model, and one test per kind of bad input."""

import csv
import glob
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project_env():
    """The environment of a subprocess that runs the project: its root first on PYTHONPATH, with
    what was there kept (a machine may carry TVM on it)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def driver(*args, cwd=None, timeout=600):
    env = project_env()
    return subprocess.run([sys.executable, os.path.join(ROOT, "driver.py"), *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def tiny_config(tmp_path, **overrides):
    config = {
        "models": [{"name": "mm", "type": "op", "workload": "mm64"}],
        "target": "llvm",
        "autotuner_settings": {"tuner": "ga-dqn", "trials": 6, "number": 2, "repeat": 1, "n_parallel": 2,
                               "seed": 0, "save_path": str(tmp_path / "out"), "save_name": "t",
                               "tuner_options": {"pop_size": 4}},
        "run_settings": {"repeat": 2, "number": 2, "profile": True},
        "experiments": {"names": ["compare_gadqn_ga", "gadqn_monitor"], "workloads": ["mm64"], "trials": 6,
                        "repeats": 2, "save_path": str(tmp_path / "exp"), "save_name": "e"},
    }
    for key, value in overrides.items():
        config[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path), config


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("drv")
    path, config = tiny_config(tmp_path)
    result = driver("-m=tune", f"-c={path}")
    return tmp_path, path, config, result


def test_tune_writes_records_and_summary(tuned):
    tmp_path, _, _, result = tuned
    assert result.returncode == 0, result.stderr[-2000:]
    log = tmp_path / "out" / "t-mm.json"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 6 and len({r["config"]["index"] for r in rows}) == 6
    assert "best GFLOPS" in result.stdout and "total tuning time" in result.stdout
    # how busy the build workers were: the 6 trials' builds, in a share of the 2 workers' time
    busy = re.search(r"build workers busy (\d+)% of the tuning time \((\d+) builds, ([\d.]+) s each", result.stdout)
    assert busy and 0 < int(busy[1]) <= 100 and int(busy[2]) == 6 and float(busy[3]) > 0, result.stdout[-1500:]


def test_the_summary_counts_failed_trials_by_their_kind(tmp_path):
    """Builds that cannot finish within the builder's timeout: every trial fails, and the summary says how."""
    path, _ = tiny_config(tmp_path, autotuner_settings={"tuner": "random", "trials": 4, "n_parallel": 2, "timeout": 0.01,
                                                        "save_path": str(tmp_path / "out"), "save_name": "t"})
    result = driver("-m=tune", f"-c={path}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "trials that failed: 4 (build_timeout 4)" in result.stdout, result.stdout[-1500:]


def test_tune_again_resumes_without_remeasuring(tuned):
    tmp_path, path, _, _ = tuned
    log = tmp_path / "out" / "t-mm.json"
    before = log.read_text()
    result = driver("-m=tune", f"-c={path}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert log.read_text() == before  # the 6-trial budget was already spent: nothing new measured


def test_benchmark_writes_table_and_chart(tuned):
    tmp_path, path, _, _ = tuned
    result = driver("-m=benchmark", f"-c={path}")
    assert result.returncode == 0, result.stderr[-2000:]
    out = tmp_path / "out"
    rows = list(csv.DictReader(open(out / "t-mm-benchmark.csv")))
    # every runtime a user could ship instead, each checked against eager and timed
    assert [r["variant"] for r in rows] == ["pytorch-eager", "torch-compile", "onnxruntime", "openvino",
                                            "openvino-f32", "tvm-untuned", "tvm-tuned"]
    assert {r["variant"]: r["precision"] for r in rows}["openvino-f32"] == "float32"
    assert all(r["precision"] == "float32" for r in rows if r["variant"] != "openvino")  # OpenVINO's own choice
    assert all(float(r["median_ms"]) > 0 and int(r["rounds"]) == 2 for r in rows)
    # where the benchmark's own time goes: each variant's build or compile with its check, then the timing
    assert all(float(r["ready_seconds"]) > 0 for r in rows)
    assert "== mm: model loaded in " in result.stdout and ", tvm-tuned " in result.stdout, result.stdout[-3000:]
    assert re.search(r"== mm: timed in [\d.]+ s", result.stdout), result.stdout[-3000:]
    assert all(r["matches_pytorch"] == "True" and float(r["cosine"]) > 0.999 for r in rows)
    # float32 within rtol/atol; a reduced precision (OpenVINO's bfloat16 on a CPU with AVX512-BF16) by its cosine
    assert all(float(r["max_rel_error"]) < 1e-3 for r in rows if r["precision"] == "float32")
    eager = next(float(r["median_ms"]) for r in rows if r["variant"] == "pytorch-eager")
    tuned = rows[-1]
    assert float(tuned["speedup_over_eager"]) == pytest.approx(eager / float(tuned["median_ms"]))
    fastest = min(rows[:5], key=lambda r: float(r["median_ms"]))
    assert float(tuned["speedup_over_fastest_other"]) == pytest.approx(float(fastest["median_ms"]) /
                                                                       float(tuned["median_ms"]))
    assert tuned["fastest_other"].startswith(fastest["variant"] + " (")  # named, with its precision
    assert "x fastest other" in result.stdout
    assert (out / "t-mm-benchmark.png").stat().st_size > 5000
    assert (out / "t-mm-benchmark.json").exists()
    profile = list(csv.DictReader((out / "t-mm-tvm-tuned-profile.csv").open()))
    kernels = [r for r in profile if not r["name"].startswith("vm.builtin.")]
    assert kernels and sum(float(r["share"]) for r in profile) == pytest.approx(1.0, abs=1e-3)
    # each kernel is also timed when called again at once; the VM's builtins are not
    assert all(float(r["total_ms"]) > 0 and float(r["hot_ms"]) > 0 for r in kernels)
    assert all(r["hot_ms"] == "" for r in profile if r["name"].startswith("vm.builtin."))


def test_benchmark_times_another_tunes_records_beside_the_rest(tuned):
    """``tvm-tuned:<save_name>`` builds from another tune's records in save_path (another tuner's,
    seed's or setting's), timed in the same interleaved rounds; a name with no records is a note,
    records of another program are built untuned with one warning line."""
    tmp_path, path, _, _ = tuned
    out = tmp_path / "out"
    # the other tune's log: this one's records and a damaged line, which its build's load reports
    (out / "u-mm.json").write_text((out / "t-mm.json").read_text() + "{not a record\n")
    # records of another program: none matches, and the build says so in one line
    (out / "w-mm.json").write_text((out / "t-mm.json").read_text().replace('"matmul1"', '"other1"'))
    result = driver("-m=benchmark", f"-c={path}", "--set", "run_settings.profile=false", "--set",
                    'run_settings.variants=["pytorch-eager","tvm-tuned","tvm-tuned:u","tvm-tuned:v","tvm-tuned:w"]')
    assert result.returncode == 0, result.stderr[-2000:]
    rows = list(csv.DictReader(open(out / "t-mm-benchmark.csv")))
    assert [r["variant"] for r in rows] == ["pytorch-eager", "tvm-tuned", "tvm-tuned:u", "tvm-tuned:w"]
    untuned = [line for line in result.stderr.splitlines() if "no record of the active apply_history_best" in line]
    assert len(untuned) == 1 and untuned[0].startswith("WARNING: build_program: "), result.stderr[-2000:]
    assert "warnings.warn" not in result.stderr and "UserWarning" not in result.stderr, result.stderr[-2000:]
    assert all(float(r["median_ms"]) > 0 and r["matches_pytorch"] == "True" for r in rows)
    # each TVM build against what a user could run instead, not against the other
    assert all(r["fastest_other"].startswith("pytorch-eager (") for r in rows[1:])
    assert "u-mm.json: skipped 1 unreadable line" in result.stdout + result.stderr
    assert "t-mm.json: skipped" not in result.stdout + result.stderr
    assert f"note: mm: tvm-tuned:v skipped: no records at {out / 'v-mm.json'}; run -m=tune first with " \
        "autotuner_settings.save_name=v" in result.stdout


def test_configs_that_share_a_save_name_keep_each_others_benchmark(tmp_path):
    """Two configs with one save_name (the shipped ones share theirs), benchmarked one after the
    other: each model's results are written beside its records, so the second keeps the first's."""
    from tools.benchmark import _write
    from tools.config import load_config

    settings = load_config(tiny_config(tmp_path)[0]).autotuner_settings
    os.makedirs(settings.save_path)
    for model, ms in (("resnet", 2.0), ("minilm", 3.0)):
        _write([{"model": model, "variant": variant, "precision": "float32", "median_ms": ms * k, "min_ms": ms * k,
                 "max_ms": ms * k, "matches_pytorch": True, "max_rel_error": 0.0}
                for variant, k in (("pytorch-eager", 1.0), ("tvm-tuned", 0.5))], settings, "a test")
    for model, ms in (("resnet", 2.0), ("minilm", 3.0)):
        rows = list(csv.DictReader(open(tmp_path / "out" / f"t-{model}-benchmark.csv")))
        assert [(r["model"], float(r["median_ms"])) for r in rows] == [(model, ms), (model, ms / 2)]
        assert json.loads((tmp_path / "out" / f"t-{model}-benchmark.json").read_text())[1]["speedup_over_eager"] == 2.0
        assert (tmp_path / "out" / f"t-{model}-benchmark.png").stat().st_size > 5000


def test_a_benchmark_with_no_variant_ready_says_so(tmp_path, capsys):
    """Only tvm-tuned asked for and no records yet: its note, then one line for the model, no empty timing."""
    from tools.benchmark import benchmark_models
    from tools.config import load_config

    path, _ = tiny_config(tmp_path)
    assert benchmark_models(load_config(path, ['run_settings.variants=["tvm-tuned"]'])) == []
    out = capsys.readouterr().out
    assert "note: mm: tvm-tuned skipped: no records at" in out and "run -m=tune first" in out
    assert "== mm: no variant to time (each one's note above says why)" in out and "timing" not in out


def test_experiment_writes_runs_summary_and_plots(tmp_path):
    path, config = tiny_config(tmp_path)
    # a variant of a tuner: NAME@LABEL with its own options
    config["experiments"].update(names=["compare_gadqn_ga", "gadqn_monitor", "compare_tuners"],
                                 tuners=["ga", "ga@pop6"], tuner_options={"ga@pop6": {"pop_size": 6}})
    (tmp_path / "c1.json").write_text(json.dumps(config))
    result = driver("-m=experiment", f"-c={tmp_path / 'c1.json'}")
    assert result.returncode == 0, result.stderr[-2000:]
    exp = tmp_path / "exp" / "e"
    runs = json.load(open(exp / "compare_gadqn_ga" / "runs.json"))
    assert sorted({r["label"] for r in runs}) == ["ga", "ga-dqn"] and len(runs) == 4
    assert all(len(r["curve"]) == 6 for r in runs)
    assert (exp / "compare_gadqn_ga" / "curves.png").stat().st_size > 5000
    assert "median_best_gflops" in (exp / "compare_gadqn_ga" / "summary.csv").read_text()
    # the experiment's question answered: the ratio with its interval, printed and saved
    ratio = (exp / "compare_gadqn_ga" / "ratios.txt").read_text()
    # two seeds: no interval, the per-seed ratios
    assert ratio.startswith("ga-dqn / ga: geometric mean") and "per seed" in ratio and "too few seeds" in ratio
    assert ratio.strip() in result.stdout
    assert (exp / "gadqn_monitor" / "monitor-mm64.png").stat().st_size > 5000
    variant_runs = json.load(open(exp / "compare_tuners" / "runs.json"))
    assert sorted(r["label"] for r in variant_runs) == ["ga", "ga", "ga@pop6", "ga@pop6"]
    assert "ga@pop6 / ga: geometric mean" in (exp / "compare_tuners" / "ratios.txt").read_text()
    # previous_results_dir: the same experiment reuses every saved run
    # and each run's best config measured again (for real), with the ratios on those timings
    config["experiments"]["previous_results_dir"] = str(exp)
    config["experiments"].update(save_name="again", remeasure=2)
    (tmp_path / "c2.json").write_text(json.dumps(config))
    again = driver("-m=experiment", f"-c={tmp_path / 'c2.json'}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("reusing") == 4 + 1 + 4
    remeasured = json.load(open(tmp_path / "exp" / "again" / "compare_gadqn_ga" / "remeasured.json"))
    assert list(remeasured) == ["mm64"] and all(len(v) == 2 for v in remeasured["mm64"].values())
    assert {str(r["indices"][r["curve"].index(r["best_gflops"])]) for r in runs} == set(remeasured["mm64"])
    assert "median_best_gflops" in (tmp_path / "exp" / "again" / "compare_gadqn_ga" / "summary_remeasured.csv").read_text()
    ratio = (tmp_path / "exp" / "again" / "compare_gadqn_ga" / "ratios.txt").read_text()
    assert "each run's best config measured again (2 times):\nga-dqn / ga: geometric mean" in ratio
    assert "the same, each config read as the fastest of its 2 timings:\nga-dqn / ga: geometric mean" in ratio


def test_a_previous_results_dir_that_does_not_exist_is_refused(tmp_path):
    path, config = tiny_config(tmp_path)
    config["experiments"]["previous_results_dir"] = str(tmp_path / "typo")
    (tmp_path / "c.json").write_text(json.dumps(config))
    _bad(driver("-m=experiment", f"-c={tmp_path / 'c.json'}"), "experiments.previous_results_dir", "typo")


def test_experiment_variant_options_reach_the_tuner_and_a_refused_value_keeps_earlier_runs(tmp_path):
    path, config = tiny_config(tmp_path)
    config["experiments"].update(names=["compare_tuners"], repeats=1, tuners=["ga", "ga@bad"],
                                 tuner_options={"ga@bad": {"pop_size": 1}})
    (tmp_path / "c.json").write_text(json.dumps(config))
    # a value its rule refuses is refused with the config, before anything is measured
    _bad(driver("-m=experiment", f"-c={tmp_path / 'c.json'}"), "experiments.tuner_options.ga@bad.pop_size", ">= 2")
    assert not (tmp_path / "exp" / "e" / "compare_tuners" / "runs.json").exists()
    # options that only the tuner can judge together are refused when it is made: earlier runs are kept
    config["experiments"]["tuner_options"] = {"ga@bad": {"pop_size": 4, "elite_num": 4}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    _bad(driver("-m=experiment", f"-c={tmp_path / 'c.json'}"), "ga tuner options", "elite_num must be in [0, pop_size)")
    runs = json.load(open(tmp_path / "exp" / "e" / "compare_tuners" / "runs.json"))
    assert [r["label"] for r in runs] == ["ga"] and len(runs[0]["curve"]) == 6  # measured before: kept


# ----------------------------------------------------------------------------- bad input
def _bad(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_unknown_method():
    _bad(driver("-m=fly"), "fly", "tune, benchmark, experiment")


def test_missing_config_file(tmp_path):
    _bad(driver("-m=tune", f"-c={tmp_path / 'nope.json'}"), "does not exist")
    from autotvm import AutoTVMError
    from tools.config import load_config

    with pytest.raises(AutoTVMError, match="is a folder; pass a JSON file"):
        load_config(str(tmp_path))


def test_malformed_json_says_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "target": "llvm",\n  "models": [,]\n}')
    _bad(driver("-m=tune", f"-c={path}"), "line 3", "column")


@pytest.mark.parametrize("override,words", [
    ({"autotuner_settings": {"trails": 3}}, ["autotuner_settings: unknown key 'trails'", "trials"]),
    ({"models": [{"name": "x", "type": "op", "workload": "nope"}]}, ["models.x.workload", "nope", "c1"]),
    ({"autotuner_settings": {"tuner_options": {"reward": "best"}}}, ["tuner_options.reward", "'best'", "improvement"]),
    ({"target": {"kind": "llvm", "mcpu": "notacpu"}}, ["mcpu 'notacpu'"]),
    ({"models": [{"name": "x", "type": "op", "workload": "r3x3", "conv_layout": "NCHW", "conv_algorithm": "winograd"}]},
     ["models.x.conv_algorithm", "winograd", "NHWC"]),
])
def test_bad_keys(tmp_path, override, words):
    _bad(driver("-m=tune", "-c=" + json.dumps(override | ({"models": [{"name": "m", "type": "op", "workload": "mm64"}]}
                                                       if "models" not in override else {}))), *words)


def test_unwritable_save_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    config = {"models": [{"name": "m", "type": "op", "workload": "mm64"}],
              "autotuner_settings": {"save_path": str(blocker / "sub")}}
    _bad(driver("-m=tune", "-c=" + json.dumps(config)), "autotuner_settings.save_path")


def test_pretrained_without_weights(tmp_path):
    config = {"models": [{"name": "r", "type": "hf", "model": "resnet-18", "pretrained": True,
                          "path": str(tmp_path / "none")}],
              "autotuner_settings": {"save_path": str(tmp_path)}}
    _bad(driver("-m=tune", "-c=" + json.dumps(config)), "models.r.path", "pretrained", "none")


def test_ctrl_c_leaves_a_valid_log_and_rerun_resumes(tmp_path):
    import signal
    import time

    path, config = tiny_config(tmp_path)
    config["autotuner_settings"]["trials"] = 40
    config["autotuner_settings"]["tuner"] = "random"
    (tmp_path / "c.json").write_text(json.dumps(config))
    log = tmp_path / "out" / "t-mm.json"
    env = project_env()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "driver.py"), "-m=tune", f"-c={tmp_path / 'c.json'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 4):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "re-run to resume" in err and "Traceback" not in err
    first = [json.loads(line) for line in log.read_text().splitlines()]  # every line is valid
    assert 4 <= len(first) < 40
    result = driver("-m=tune", f"-c={tmp_path / 'c.json'}")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 40 and len({r["config"]["index"] for r in rows}) == 40


def test_ctrl_c_while_the_workers_start_is_one_line(tmp_path):
    """A tune starts its workers before it loads the model, so a Ctrl-C (the terminal signals the
    whole process group) often finds them still importing TVM: they let it pass (the tuning process
    ends, and they with it) instead of each dying with a traceback, and the tune ends without
    waiting for them to finish their start."""
    import signal
    import time

    import psutil

    path, _ = tiny_config(tmp_path)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "driver.py"), "-m=tune", f"-c={path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=project_env(),
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not psutil.Process(proc.pid).children():
        time.sleep(0.05)
    workers = psutil.Process(proc.pid).children()
    assert workers, "no worker started"
    os.killpg(proc.pid, signal.SIGINT)  # the workers have just started: they are importing TVM
    sent = time.perf_counter()
    _, err = proc.communicate(timeout=60)
    waited = time.perf_counter() - sent
    assert proc.returncode == 130 and "re-run to resume" in err, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive  # they ended with the tune
    # and at once: not after the workers' import of TVM (timed here, on this machine as busy as it is)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tvm"], check=True, env=project_env())
    assert waited < 0.5 * (time.perf_counter() - start), waited


def test_a_ctrl_c_that_python_drops_is_raised_again():
    """Python only prints a KeyboardInterrupt raised inside a weakref callback (an import's lock runs
    one, so a Ctrl-C while the tune imports may land there) and goes on: the command raises it again
    once the callback has returned, so the tune stops."""
    code = """if True:
        import os, signal, time, weakref
        import driver
        driver.stop_on_ctrl_c()

        class Thing:
            pass

        def callback(ref):  # the signal arrives here, and its handler raises here
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10 ** 5):
                pass

        thing = Thing()
        ref = weakref.ref(thing, callback)
        try:
            del thing
            for _ in range(300):
                time.sleep(0.01)
            print("went on")
        except KeyboardInterrupt:
            print("stopped")
    """
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=project_env(),
                            timeout=60)
    assert result.stdout.strip() == "stopped" and not result.stderr, (result.stdout, result.stderr)


def test_cuda_without_a_gpu_is_one_line_for_tune_benchmark_and_experiment(tmp_path):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA GPU")
    config = {"models": [{"name": "m", "type": "op", "workload": "mm64"}], "target": "cuda",
              "autotuner_settings": {"trials": 2, "save_path": str(tmp_path)}}
    # each before any model is loaded or any task extracted
    for method, words in (("benchmark", ["config key target", "no cuda device"]),
                          ("tune", ["config key target", "no CUDA GPU", "RPC"]),
                          ("experiment", ["config key target", "no CUDA GPU", "RPC"])):
        result = driver(f"-m={method}", "-c=" + json.dumps(config))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        # besides our line, only TVM's own warning that it defaults the GPU architecture
        others = [ln for ln in result.stderr.splitlines() if ln.strip() and "Unable to detect CUDA version" not in ln]
        assert len(others) == 1 and all(w in others[0] for w in words), result.stderr


@pytest.mark.parametrize("override,words", [
    ({"autotuner_settings": {"trials": 10 ** 12}}, ["autotuner_settings.trials", "<= 100000"]),
    ({"autotuner_settings": {"model_trials": 0}}, ["autotuner_settings.model_trials"]),
    ({"autotuner_settings": {"task_scheduler": "fifo"}}, ["task_scheduler", "'fifo'", "gradient, round-robin"]),
    ({"autotuner_settings": {"tuner_options": {"dqn": {"lr": "fast"}}}}, ["tuner_options.dqn", "lr", "'fast'"]),
    ({"autotuner_settings": {"save_name": "../up"}}, ["save_name", "plain name"]),
    ({"run_settings": {"variants": ["tensorrt"]}}, ["run_settings.variants.0", "tensorrt", "onnxruntime"]),
    ({"run_settings": {"variants": ["tvm-tuned:../x"]}}, ["run_settings.variants.0", "'tvm-tuned:../x'",
                                                          "tvm-tuned:<save_name>"]),
    ({"experiments": {"names": ["model_tuners"]}}, ["experiments.models", "model_tuners needs", "none given"]),
    ({"models": [{"name": "mm", "type": "op", "workload": "mm64"}], "experiments": {"models": ["resnet"]}},
     ["experiments.models.0", "'resnet'", "(mm)"]),
    ({"experiments": {"checkpoints": 0}}, ["experiments.checkpoints"]),
    ({"autotuner_settings": {"tuner": "annealing"}}, ["autotuner_settings.tuner", "annealing", "ga-dqn"]),
    ({"models": [{"name": "x", "type": "onnx"}]}, ["models.0.type", "onnx", "hf"]),
    ({"models": [{"name": "x", "type": "torch", "model": "mlp", "widht": 3}]}, ["models.0", "'widht'", "width"]),
    ({"models": [{"name": "x", "type": "hf", "model": "gpt9"}]}, ["gpt9", "bert"]),
    ({"experiments": {"names": ["race"]}}, ["experiments.names.0", "race", "compare_tuners"]),
    ({"autotuner_settings": {"trials": 0}}, ["autotuner_settings.trials", ">= 1"]),
    ({"experiments": {"remeasure": -1}}, ["experiments.remeasure", ">= 0"]),
    # a misspelt tuner option would otherwise be silently ignored
    ({"autotuner_settings": {"tuner_options": {"pop_szie": 4}}}, ["tuner_options", "'pop_szie'", "pop_size"]),
    ({"autotuner_settings": {"tuner_options": {"dqn": {"gama": 0.5}}}}, ["tuner_options.dqn", "'gama'", "gamma"]),
    ({"autotuner_settings": {"tuner_options": {"pop_size": "big"}}}, ["tuner_options.pop_size", "an integer", "'big'"]),
    ({"experiments": {"tuners": ["ga", "gaa@x"]}}, ["experiments.tuners.1", "gaa@x", "NAME@LABEL"]),
    ({"experiments": {"tuners": ["ga", "ga@x"], "tuner_options": {"ga@y": {}}}}, ["tuner_options.ga@y", "ga, ga@x"]),
    ({"experiments": {"tuners": ["ga@x"], "tuner_options": {"ga@x": {"reward": "r1"}}}},
     ["tuner_options.ga@x.reward", "pop_size"]),
    ({"target": "opencl"}, ["target", "llvm"]),
    ({"models": [{"name": "x/../y", "type": "op", "workload": "c1"}]}, ["models.0.name", "'x/../y'", "plain name"]),
    ({"models": [{"name": "x", "type": "op", "workload": "r3x3", "conv_layout": "NCHWc"}]}, ["NCHWc", "NHWC"]),
    ({"run_settings": {"precision": "float16"}}, ["run_settings.precision", "float16", "needs a CUDA target"]),
    ({"run_settings": {"precision": "int4"}}, ["run_settings.precision", "'int4'", "float32"]),
    ({"autotuner_settings": {"rounds_in_flight": 2}}, ["rounds_in_flight", "needs a CUDA target", "'llvm'"]),
    ({"autotuner_settings": {"rounds_in_flight": 0}}, ["autotuner_settings.rounds_in_flight", "0"]),
    ({"autotuner_settings": {"enable_cpu_cache_flush": "l2"}}, ["enable_cpu_cache_flush", "'l2'", "false, true, private"]),
    ({"autotuner_settings": {"enable_cpu_cache_flush": "private", "rpc": {"key": "k", "host": "h", "port": 9190}}},
     ["enable_cpu_cache_flush", "'private'", "RPC server", "true or false"]),
    # what a model names, before anything loads
    ({"models": [{"name": "mm65", "type": "op"}]}, ["models.mm65.workload", "'mm65'", "mm64"]),
    ({"models": [{"name": "x", "type": "torch", "model": "cnnn"}]}, ["models.x.model", "'cnnn'", "cnn"]),
    ({"models": [{"name": "x", "type": "torch"}]}, ["models.x.model", "missing", "mlp"]),
    ({"models": [{"name": "r", "type": "hf", "model": "resnet-18", "pretrained": True}]},
     ["models.r.path", "pretrained weights need a local folder", "None"]),
    ({"target": {"kind": "llvm", "mcpu": "znver3"}, "run_settings": {"precision": "bfloat16"}},
     ["run_settings.precision", "AVX512-BF16", "'znver3'"]),
])
def test_bad_keys_in_process(override, words):
    """The same one-line errors, from the config loader itself (the driver prints them as above)."""
    from autotvm import AutoTVMError
    from tools.config import load_config

    with pytest.raises(AutoTVMError) as err:
        load_config(json.dumps(override))
    message = str(err.value)
    assert "\n" not in message and all(word in message for word in words), message


def test_throughput_experiment_times_the_tuners_against_metaschedule(tmp_path):
    config = {"experiments": {"names": ["throughput"], "workloads": ["mm64"], "trials": 8, "repeats": 1,
                              "save_path": str(tmp_path), "save_name": "t"},
              "autotuner_settings": {"n_parallel": 2, "number": 2, "repeat": 1}}
    result = driver("-m=experiment", "-c=" + json.dumps(config))
    assert result.returncode == 0, result.stderr[-2000:]
    rows = list(csv.DictReader(open(tmp_path / "t" / "throughput" / "summary.csv")))
    assert [r["tuner"] for r in rows] == ["random", "xgb", "metaschedule"]
    assert all(int(r["trials"]) == 8 and float(r["trials_per_s"]) > 0 for r in rows)
    assert float(rows[0]["peak_rss_mib"]) > 100  # the tuning process and its workers
    assert "xgb" in (tmp_path / "t" / "throughput" / "ratios.txt").read_text()


def test_set_overrides_keys_of_the_config_file(tmp_path):
    path, _ = tiny_config(tmp_path)
    result = driver("-m=tune", f"-c={path}", "--set", "autotuner_settings.trials=3", "--set",
                    "autotuner_settings.save_name=set")
    assert result.returncode == 0, result.stderr[-2000:]
    assert len((tmp_path / "out" / "set-mm.json").read_text().splitlines()) == 3
    _bad(driver("-m=tune", f"-c={path}", "--set", "autotuner_settings.trials=0"), "autotuner_settings.trials", ">= 1")
    _bad(driver("-m=tune", f"-c={path}", "--set", "trials"), "--set takes KEY=VALUE")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "*.json"))),
                         ids=lambda p: os.path.basename(p))
def test_every_shipped_config_loads(path):
    """The shipped configs pass the config check (a bfloat16 one may say, in its one line, that this
    CPU lacks AVX512-BF16); a pretrained model's weights are where the config looks for them."""
    from autotvm import AutoTVMError
    from tools.config import load_config
    from tools.models import _default_pretrained_path

    try:
        config = load_config(path)
    except AutoTVMError as err:
        assert "bf16" in os.path.basename(path) and "AVX512-BF16" in str(err), err
        return
    for spec in config.models:
        if spec.pretrained:
            assert spec.path or _default_pretrained_path(spec.model), spec
