"""The oracle of autograder/judging/oracle.py, which answers a graded kernel's calls to withheld
functions: it answers as data and records each call, what it returns crosses the wire as
itself, and it caps requests, replies and the time a call takes."""
import json

import pytest
from borrowed_helpers import short_folder

from autograder.judging import oracle as oracle_module


@pytest.fixture
def short_dir():
    with short_folder() as folder:
        yield folder


def test_the_grader_answers_as_data_and_records_each_call(short_dir, monkeypatch):
    from threeaxes.data_parallel import plan_buckets
    from threeaxes.grading.wire import oracle as client

    oracle = oracle_module.Oracle({"threeaxes.data_parallel.buckets:plan_buckets"}, short_dir)
    try:
        monkeypatch.setenv(client.ENV, oracle.socket_path)
        got = client.call("threeaxes.data_parallel.buckets:plan_buckets", ([8, 4, 4], 8), {})
        assert got == plan_buckets([8, 4, 4], 8)
        with pytest.raises(PermissionError):     # only what this drop withholds
            client.call("threeaxes.cost.planner:search", (), {})
        # a request is data: a function of a package the grader does not trust stays a placeholder
        evil = {"path": "threeaxes.data_parallel.buckets:plan_buckets",
                "args": {"__tuple__": [{"__import__": "os:system"}, 8]}, "kwargs": {"__dict__": []}}
        reply = oracle.answer(json.dumps(evil).encode())
        assert "__raised__" in reply
        assert oracle.calls == ["threeaxes.data_parallel.buckets:plan_buckets"] * 2
    finally:
        oracle.close()


def test_what_the_cost_model_returns_crosses_the_wire_as_itself():
    """Withheld functions return NamedTuples (plan's results) and Fractions (schedules' bubbles)."""
    from fractions import Fraction

    from threeaxes.cost import get_cluster, get_model, model_state_bytes, plan
    from threeaxes.grading import wire

    result = plan(get_model("13B"), get_cluster("a100-80gb", n_nodes=4), 512, dp=4, tp=8, pp=1, micro_batch=1)
    for value in (model_state_bytes(1e9, dp=2, zero_stage=1), Fraction(3, 11), result):
        back = wire.Answers(None).decode(json.loads(json.dumps(wire.encode(value))))
        assert type(back) is type(value) and back == value


# -- the oracle's limits ----------------------------------------------------------------------
def _ask(socket_path, data: bytes, timeout=60):
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(socket_path)
        try:
            s.sendall(data)
        except OSError:            # refused before the whole request went: the reply is waiting
            pass
        return json.loads(s.makefile("rb").readline())


def test_the_oracle_caps_requests_replies_and_the_time_a_call_takes(short_dir):
    import threading

    oracle = oracle_module.Oracle({"time:sleep", "operator:mul", "operator:add"}, short_dir, timeout=3)
    try:
        # an endless line: read up to the cap, then refused; the grader holds no more of it
        stop, sent = threading.Event(), [0]

        def endless():
            import socket

            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(oracle.socket_path)
                chunk = b"x" * (1 << 20)
                try:
                    while not stop.is_set() and sent[0] < 256 << 20:
                        s.sendall(chunk)
                        sent[0] += len(chunk)
                except OSError:
                    pass
        writer = threading.Thread(target=endless)
        writer.start()
        writer.join(30)
        stop.set()
        assert not writer.is_alive() and sent[0] < oracle_module.MAX_REQUEST_BYTES + (16 << 20), sent[0]
        assert "over" in oracle.answer(b"x" * (oracle_module.MAX_REQUEST_BYTES + 1))
        # a small request whose answer would be huge: refused in the worker, not sent
        big = {"path": "operator:mul", "args": {"__tuple__": ["x" * 1000, 20_000]}, "kwargs": {"__dict__": []}}
        reply = _ask(oracle.socket_path, json.dumps(big).encode() + b"\n")
        assert reply["__raised__"][0][0] == "MemoryError" and "MiB" in reply["__raised__"][1]
        # a call that runs too long is stopped (its worker killed); the next call is answered
        slow = {"path": "time:sleep", "args": {"__tuple__": [600]}, "kwargs": {"__dict__": []}}
        reply = _ask(oracle.socket_path, json.dumps(slow).encode() + b"\n")
        assert reply["__raised__"][0][0] == "TimeoutError"   # the worker's limit, not the 600 s
        add = {"path": "operator:add", "args": {"__tuple__": [2, 3]}, "kwargs": {"__dict__": []}}
        assert _ask(oracle.socket_path, json.dumps(add).encode() + b"\n") == 5
    finally:
        oracle.close()
