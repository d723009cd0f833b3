"""Tune your own PyTorch model and use the result in your program.

    python examples/own_model.py    # about a minute on 2 cores

PyTorch -> torch.export -> Relax -> one task per tunable function -> tune each -> build with the
best records -> run in the Relax VM -> export a shared library.
"""

import os

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

import autotvm
from rl_tuner import GADQNTuner

# 1. your model, exported; detach_params moves the weights out of the module
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).eval()
example = torch.randn(16, 256)
with torch.no_grad():
    mod = from_exported_program(torch.export.export(model, (example,)), keep_params_as_input=True)
mod, detached = relax.frontend.detach_params(mod)
# detached["main"] holds the weights: the trailing parameters of "main", in order; bind them by name
names = [var.name for var in mod["main"].params]
params = dict(zip(names[len(names) - len(detached["main"]):], detached["main"]))

# 2. one task per tunable function, for this machine's CPU (the target takes its mcpu and cores)
target = autotvm.make_target("llvm")
tasks = autotvm.task.extract_from_program(mod, target, params)

# 3. tune every task into one log
os.makedirs("results", exist_ok=True)
LOG = "results/own_model.json"
option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2), runner=autotvm.LocalRunner(number=3))
for task in tasks:
    tuner = GADQNTuner(task, seed=0)
    tuner.tune(n_trial=min(16, len(task.config_space)), measure_option=option,
               callbacks=[autotvm.callback.log_to_file(LOG)])

# 4. build with the best records, for the same target the tasks were tuned for
with autotvm.apply_history_best(LOG):
    exe = autotvm.build_program(mod, tasks[0].target, params)

# 5. run it in the Relax VM with the threads it was tuned for (TVM's runtime alone would take one
#    thread per two x86 cores), and check it against PyTorch
autotvm.use_runtime_threads(tasks[0].target)  # before the first kernel runs; TVM_NUM_THREADS wins
vm = relax.VirtualMachine(exe, tvm.cpu())
out = vm["main"](tvm.runtime.tensor(example.numpy()))[0]  # the outputs, as a tuple
np.testing.assert_allclose(out.numpy(), model(example).detach().numpy(), rtol=1e-4, atol=1e-4)
print("median ms:", 1e3 * np.median(vm.time_evaluator("main", tvm.cpu(), number=10, repeat=5)(
    tvm.runtime.tensor(example.numpy())).results))

# 6. ship it: a shared library any TVM runtime loads with tvm.runtime.load_module
exe.export_library("results/own_model.so")
print(f"wrote {LOG} (records) and results/own_model.so (the tuned model)")
