"""A pserver started by hand writes the port it serves on to ``/tmp/paddle.<pid>.port``, as
Fluid 1.8's ``RPCServer::SavePort``: Paddle's own listen_and_serv tests start one on port 0
with a program built by hand (``optimize_blocks=[block]``) and wait for that file."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

SERVER = textwrap.dedent("""
    import dask_fluid as fluid
    program = fluid.Program()
    with fluid.program_guard(program, fluid.Program()):
        block = program._create_block(program.global_block().idx)
        program._rollback()
        program.global_block().append_op(
            type="listen_and_serv", inputs={"X": []}, outputs={},
            attrs={"optimize_blocks": [block], "endpoint": "127.0.0.1:0", "Fanin": 1,
                   "distributed_mode": 0, "grad_to_block_id": []})
    fluid.Executor(fluid.CPUPlace()).run(program)
""")


def test_a_pserver_started_by_hand_writes_the_port_it_serves_on():
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    path = f"/tmp/paddle.{proc.pid}.port"
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no port file within 60 s"
            time.sleep(0.1)
        with open(path) as f:
            port = int(f.read())
        assert port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass  # it listens there
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if os.path.exists(path):  # killed: nobody removed it
            os.remove(path)
