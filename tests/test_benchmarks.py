"""benchmarks/models.py: tune and benchmark each config, one table; overrides and a step time limit."""

import json
import os
import re
import subprocess
import sys

from autotvm.env import host_cores
from autotvm.env import find_nvcc
from test_driver import ROOT, project_env, tiny_config


def models(*args, cwd):
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "models.py"), *args], capture_output=True,
                          text=True, cwd=cwd, env=project_env(), timeout=600)


def test_the_table_has_a_row_per_model_with_its_trials_and_a_stopped_step_is_a_note(tmp_path):
    path, config = tiny_config(tmp_path)
    out = tmp_path / "models.md"
    # a save_name of --set's: the table reads the benchmark where the driver wrote it
    common = ["--configs", path, "--out", str(out), "--set", 'run_settings.variants=["pytorch-eager","tvm-tuned"]',
              "--set", "autotuner_settings.save_name=s"]
    result = models(*common, "--set", "autotuner_settings.trials=4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    row = next(line for line in out.read_text().splitlines() if line.startswith("| mm "))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "float32" and "pytorch-eager" in cells[2] and float(cells[3]) > 0
    assert cells[6] == "4"  # the trials in the log: the override reached the driver
    assert int(cells[7]) > 0 and int(cells[8]) > 0  # the tune's and the benchmark's wall seconds
    assert (tmp_path / "out" / "s-mm-benchmark.json").exists()
    # a step past --timeout is stopped with a note, and the next goes on (here: none); the table keeps its header
    result = models(*common, "--set", "autotuner_settings.trials=400", "--timeout", "1", cwd=tmp_path)
    assert result.returncode == 0 and "-m=tune stopped after 1 s; skipped" in result.stdout, result.stdout[-2000:]
    log = tmp_path / "out" / "s-mm.json"
    assert all(json.loads(line) for line in log.read_text().splitlines())  # every line a whole record


def test_the_cuda_build_benchmark_checks_and_builds_without_a_gpu(tmp_path):
    """benchmarks/cuda_builds.py: a CUDA model's tasks and the functions its build calls counted, its
    configs checked (tiles first, then the replay, which must agree) and built on this machine's
    CPU, nvcc compiling them where it is installed; their single-knob neighbours lowered and compared."""
    config = json.dumps({"models": [{"name": "mlp", "type": "torch", "model": "mlp", "width": 64, "batch": 4}],
                         "target": "cuda"})
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "cuda_builds.py"), "--config", config,
                             "--functions", "2", "--checks", "60", "--builds", "2", "--workers", "4", "--neighbours", "1"],
                            capture_output=True, text=True, cwd=tmp_path, env=project_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "configs the check and the replay disagree on, registers and gathers aside: 0" in result.stdout, \
        result.stdout[-2000:]
    assert "a batch of 4 on 4 workers waits" in result.stdout, result.stdout[-2000:]
    assert re.search(r"mlp: [1-9]\d* tasks, a run calls [1-9]\d* functions", result.stdout), result.stdout[-2000:]
    nvcc = re.search(r"builds on one core: mean ([\d.]+) s \(([\d.]+) s of it in nvcc\)", result.stdout)
    assert (nvcc is not None) == (find_nvcc() is not None), result.stdout[-2000:]
    assert nvcc is None or 0 < float(nvcc[2]) < float(nvcc[1])
    same = re.search(r"(\d+) of the (\d+) that pass the check lower to their config's CUDA source", result.stdout)
    assert same is not None and int(same[1]) <= int(same[2]), result.stdout[-2000:]
    # a batch through the tune's own builder, one worker a core
    workers = min(4, host_cores())
    assert f"a batch of {workers} builds through the tune's builder on {workers} workers:" in result.stdout
    assert f"{workers} built (workers busy" in result.stdout, result.stdout[-2000:]


def test_the_cuda_compiler_benchmark_compares_nvcc_and_nvrtc_or_names_what_it_needs(tmp_path):
    """benchmarks/cuda_compilers.py: where nvcc, NVRTC (cuda-bindings) and cuobjdump are installed, a
    CUDA model's kernel is compiled three ways and the code compared; elsewhere one line names what
    is missing, without a traceback."""
    config = json.dumps({"models": [{"name": "mlp", "type": "torch", "model": "mlp", "width": 64, "batch": 4}],
                         "target": "cuda"})
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "cuda_compilers.py"), "--config", config,
                             "--functions", "1", "--kernels", "2"],
                            capture_output=True, text=True, cwd=tmp_path, env=project_env(), timeout=600)
    if result.returncode == 0:
        assert re.search(r"2 kernels compiled one after another on one core: mean \(median\) s, nvcc [\d.]+",
                         result.stdout), result.stdout[-2000:]
        assert re.search(r"nvcc's and NVRTC's code differ in \d of 2 kernels", result.stdout), result.stdout[-2000:]
        assert "the precompiled header's code is neither of theirs in 0" in result.stdout, result.stdout[-2000:]
    else:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: cuda_compilers.py needs "), result.stderr[-2000:]


def test_ctrl_c_ends_with_one_line_the_table_so_far_and_whole_records(tmp_path):
    """Ctrl-C reaches the command's process group: the driver logs its trials in flight and ends,
    the command writes what it has and says so in one line, without a traceback."""
    import signal
    import time

    path, _ = tiny_config(tmp_path)
    out = tmp_path / "models.md"
    log = tmp_path / "out" / "t-mm.json"
    # started with SIGINT ignored, as a script's background job is: the signal still stops it
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "benchmarks", "models.py"), "--configs", path,
                                "--out", str(out), "--set", "autotuner_settings.trials=400"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               env=project_env(), start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 300
    while not (log.exists() and log.read_text().count("\n") >= 4) and time.monotonic() < deadline:
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "interrupted" in stdout and "Traceback" not in stderr + stdout, stdout[-2000:] + stderr[-2000:]
    assert out.exists()  # the table, here with no finished config
    assert all(json.loads(line) for line in log.read_text().splitlines())  # every line a whole record
