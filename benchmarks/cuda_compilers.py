"""nvcc and NVRTC on the same CUDA kernels, without a GPU: how long each takes and the code each makes.

    pip install cuda-bindings nvidia-cuda-nvrtc nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm  # NVRTC; reading code
    python benchmarks/cuda_compilers.py --config configs/cuda-resnet-18.json --precision float32

For the config's model, random configs of its costliest functions that pass the tune's check are
lowered for ``--arch`` (default sm_90, an H100/H200), and each kernel source is compiled one after
another in this process, as TVM's callback compiles it (``tvm.support.nvcc.compile_cuda``): by nvcc,
by NVRTC as TVM's default has it, and by NVRTC with the precompiled header of the headers TVM's
kernels include that the project's NVRTC compiles use (``autotvm.env.NVRTC_PRECOMPILED_HEADER``;
created by its first compile in the process, then reused). cuobjdump reads each kernel's registers
and stack (local memory) from nvcc's and NVRTC's code, and the machine code of the NVRTC compiles is
compared (plain NVRTC twice: its compiles of a kernel may differ from one another in which registers
they use). NVRTC finds the CUDA headers through ``CUDA_PATH`` (a toolkit's root, with
``targets/<arch>/include/cccl``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "cuda-resnet-18.json"))
    parser.add_argument("--precision", default=None, help="float32 or float16 (default: the config's)")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--functions", type=int, default=5, help="the costliest functions to sample")
    parser.add_argument("--kernels", type=int, default=3, help="accepted configs compiled per function")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    import tabulate

    import autotvm
    from autotvm.env import find_cuda_tool
    from tools.config import load_config
    from tools.models import model_tasks

    tools = {name: find_cuda_tool(name) for name in ("nvcc", "cuobjdump", "nvdisasm")}
    tools["cuda-bindings"] = _has_nvrtc()
    missing = [name for name, found in tools.items() if not found]
    if missing:
        sys.exit(f"error: cuda_compilers.py needs {', '.join(missing)} (pip install cuda-bindings nvidia-cuda-nvrtc "
                 "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; nvcc: pip install -e '.[cuda]')")
    # TVM runs the nvcc on the PATH, cuobjdump the nvdisasm on it
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(tools["nvcc"]), os.path.dirname(tools["nvdisasm"]),
                                          os.environ.get("PATH", "")])
    cuobjdump = tools["cuobjdump"]
    config = load_config(args.config)
    precision = args.precision or config.run_settings.precision
    target = autotvm.make_target({"kind": "cuda", "arch": args.arch})
    rng = np.random.default_rng(args.seed)
    rows, kernels = [], []
    with target, tempfile.TemporaryDirectory(prefix="cuda-compilers-") as scratch:
        for spec in config.models:
            _, _, _, tasks = model_tasks(spec, target, precision)
            for task in sorted(tasks, key=lambda t: -t.weight * t.flop)[: args.functions]:
                for source in _sources(task, target, args.kernels, rng):
                    kernels.append(_compile_each_way(source, cuobjdump, scratch))
                    rows.append([task.name[:36], *kernels[-1]["row"]])
    if not kernels:
        sys.exit("error: no config of these functions passed the check; raise --kernels or try another --seed")
    print(tabulate.tabulate(rows, headers=["function", "nvcc s", "NVRTC s", "NVRTC, header precompiled s",
                                           "nvcc registers / stack", "NVRTC registers / stack"]))
    seconds = {key: [k[key] for k in kernels] for key in ("nvcc", "nvrtc", "precompiled")}
    reused = seconds["precompiled"][1:] or seconds["precompiled"]  # the first compile creates the header
    print(f"{config.models[0].name} {precision} for {args.arch}, {len(kernels)} kernels compiled one after another "
          f"on one core: mean (median) s, nvcc {np.mean(seconds['nvcc']):.2f} ({np.median(seconds['nvcc']):.2f}), "
          f"NVRTC {np.mean(seconds['nvrtc']):.2f} ({np.median(seconds['nvrtc']):.2f}), NVRTC with the precompiled "
          f"header {np.mean(reused):.2f} ({np.median(reused):.2f}) after "
          f"its first compile ({seconds['precompiled'][0]:.2f}, creating the header)")
    print(f"nvcc's and NVRTC's code differ in {sum(k['differ'] for k in kernels)} of {len(kernels)} kernels: registers "
          f"in {sum(k['registers'] for k in kernels)}, stack in {sum(k['stack'] for k in kernels)} (local memory only "
          f"with NVRTC in {sum(k['only_nvrtc_stack'] for k in kernels)}, only with nvcc in "
          f"{sum(k['only_nvcc_stack'] for k in kernels)}); two plain NVRTC compiles of a kernel differ in "
          f"{sum(k['nvrtc_varies'] for k in kernels)}; the precompiled header's code is neither of theirs in "
          f"{sum(not k['same_with_header'] for k in kernels)}")


def _has_nvrtc() -> bool:
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError:
        return False
    return True


def _sources(task: Any, target: Any, count: int, rng: np.random.Generator) -> list[str]:
    """The CUDA source of up to ``count`` random configs of ``task`` that pass the tune's check."""
    import tvm

    from autotvm.measure.workers import cuda_sources

    sources: list[str] = []
    for _ in range(50 * count):
        if len(sources) >= count:
            break
        config = task.config_space.get(int(rng.integers(task.config_space.range_length)))
        if task.check(config) is not None:
            continue
        try:
            lib = tvm.compile(task.instantiate(config), target=target)
        except Exception:  # a config TVM's code generator refuses: a failed trial in a tune
            continue
        sources += cuda_sources(lib)
    return sources


def _compile_each_way(source: str, cuobjdump: str, scratch: str) -> dict:
    from tvm.support import nvcc as tvm_nvcc

    from autotvm.env import NVRTC_PRECOMPILED_HEADER

    def timed(compiler: str, extra: str = "") -> tuple[bytes, float]:
        os.environ["TVM_CUDA_NVRTC_EXTRA_OPTS"] = extra
        start = time.perf_counter()
        binary = bytes(tvm_nvcc.compile_cuda(source, target_format="cubin", compiler=compiler))
        return binary, time.perf_counter() - start

    by_nvcc, nvcc_s = timed("nvcc")
    by_nvrtc, nvrtc_s = timed("nvrtc")
    again, _ = timed("nvrtc")  # NVRTC's compiles of one kernel may differ in which registers they use
    by_header, header_s = timed("nvrtc", NVRTC_PRECOMPILED_HEADER)
    os.environ.pop("TVM_CUDA_NVRTC_EXTRA_OPTS")
    a, b, b2, c = (_read(binary, cuobjdump, scratch) for binary in (by_nvcc, by_nvrtc, again, by_header))
    stack_a, stack_b = sum(s for _, s in a["usage"]), sum(s for _, s in b["usage"])
    return {"nvcc": nvcc_s, "nvrtc": nvrtc_s, "precompiled": header_s,
            "differ": a["sass"] != b["sass"], "registers": [r for r, _ in a["usage"]] != [r for r, _ in b["usage"]],
            "stack": stack_a != stack_b, "only_nvrtc_stack": stack_a == 0 < stack_b, "only_nvcc_stack": stack_b == 0 < stack_a,
            "same_with_header": c["sass"] in (b["sass"], b2["sass"]), "nvrtc_varies": b["sass"] != b2["sass"],
            "row": [f"{nvcc_s:.2f}", f"{nvrtc_s:.2f}", f"{header_s:.2f}", _usage(a["usage"]), _usage(b["usage"])]}


def _read(binary: bytes, cuobjdump: str, scratch: str) -> dict:
    """Each kernel's (registers, stack bytes), and the machine code without addresses or encodings."""
    path = os.path.join(scratch, "kernel.cubin")
    with open(path, "wb") as out:
        out.write(binary)
    usage = subprocess.run([cuobjdump, "-res-usage", path], capture_output=True, text=True, check=True).stdout
    sass = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, check=True).stdout
    return {"usage": [(int(r), int(s)) for r, s in re.findall(r"REG:(\d+) STACK:(\d+)", usage)],
            "sass": [line.split("*/", 1)[1].split("/*")[0].strip() for line in sass.splitlines()
                     if re.match(r"\s*/\*[0-9a-f]{4}\*/", line)]}


def _usage(usage: list) -> str:
    return ", ".join(f"{r} / {s}" for r, s in usage)


if __name__ == "__main__":
    main()
