"""RPCRunner measures through TVM's RPC tracker with two servers on 127.0.0.1."""

import time

import pytest
import tvm.rpc.tracker
import tvm.rpc.server

import autotvm
from autotvm.measure.local import servers_for_key
from autotvm.tuner import RandomTuner


@pytest.fixture(scope="module")
def tracker_with_two_servers():
    tracker = tvm.rpc.tracker.Tracker(host="127.0.0.1", port=9190, port_end=9290, silent=True)
    servers = [tvm.rpc.server.Server(host="127.0.0.1", port=9300, port_end=9400, key="test-cpu",
                                     tracker_addr=("127.0.0.1", tracker.port), silent=True) for _ in range(2)]
    deadline = time.time() + 30
    while servers_for_key("127.0.0.1", tracker.port, "test-cpu") < 2 and time.time() < deadline:
        time.sleep(0.5)
    yield tracker
    for server in servers:
        server.terminate()
    tracker.terminate()


def test_rpc_runner_measures_through_the_tracker(tracker_with_two_servers, builder, matmul_task, tmp_path):
    assert servers_for_key("127.0.0.1", tracker_with_two_servers.port, "test-cpu") == 2
    runner = autotvm.RPCRunner("test-cpu", "127.0.0.1", tracker_with_two_servers.port, number=2, repeat=1,
                               timeout=20)
    assert runner.n_parallel == 2
    log = tmp_path / "rpc.json"
    try:
        tuner = RandomTuner(matmul_task, seed=0)
        tuner.tune(4, autotvm.measure_option(builder, runner), callbacks=[autotvm.callback.log_to_file(str(log))])
    finally:
        runner.close()
    assert len(tuner.history) == 4
    assert all(row["error_no"] == 0 for row in tuner.history), tuner.history
    assert tuner.best_flops > 0


def test_rpc_runner_without_a_tracker_is_a_clear_error_not_a_run_of_failures(builder, matmul_task):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    runner = autotvm.RPCRunner("test-cpu", "127.0.0.1", port, number=1, repeat=1)
    start = time.time()
    with pytest.raises(autotvm.AutoTVMError, match=f"cannot reach the RPC tracker at 127.0.0.1:{port}"):
        RandomTuner(matmul_task, seed=0).tune(4, autotvm.measure_option(builder, runner))
    assert time.time() - start < 30  # not TVM's minute of retries per trial


def test_rpc_runner_with_no_server_for_its_key_is_a_clear_error(tracker_with_two_servers, builder, matmul_task):
    runner = autotvm.RPCRunner("no-such-device", "127.0.0.1", tracker_with_two_servers.port, number=1, repeat=1)
    tuner = RandomTuner(matmul_task, seed=0)
    with pytest.raises(autotvm.AutoTVMError, match="no server for key 'no-such-device'"):
        tuner.tune(4, autotvm.measure_option(builder, runner))
    assert tuner.history == []
