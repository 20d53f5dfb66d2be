"""The layer sampler of the gateway benchmark (``benchmarks/_layers.py``): honest shares."""

from __future__ import annotations

import contextlib
import dis
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any

import numpy as np
import pytest

from benchmarks import _layers


def _busy_python() -> None:
    start = time.thread_time()
    total = 0
    while time.thread_time() - start < 0.0004:
        for i in range(50):
            total += i


_VECTOR = np.random.default_rng(0).random(200_000, dtype=np.float32)
_OUT = np.empty_like(_VECTOR)


def _array_work() -> None:
    # A ufunc: native, single-threaded (a BLAS product could use threads of its own).
    for _ in range(4):
        np.multiply(_VECTOR, 1.5, out=_OUT)


def _socket_calls(pair: tuple[socket.socket, socket.socket]) -> None:
    for _ in range(60):
        pair[0].send(b"x" * 200)
        with contextlib.suppress(BlockingIOError):
            pair[1].recv(65536)


def test_the_sampler_charges_each_function_about_its_true_share_of_a_threads_cpu() -> None:
    """The main thread alternating pure-Python work, numpy calls, socket calls and
    sleeps: the share of its CPU the sampler charges each is within a few points of what
    the thread's own clock measured around each. (A sampling thread that had to take the
    GIL charged the Python work 0.07 of a true 0.44: the samples landed on the socket
    calls, where the GIL is let go.)"""
    pair = socket.socketpair()
    pair[1].setblocking(False)
    truth = {"python": 0.0, "numpy": 0.0, "socket": 0.0}
    work: tuple[tuple[str, Callable[[], None]], ...] = (
        ("python", _busy_python),
        ("numpy", _array_work),
        ("socket", lambda: _socket_calls(pair)),
    )
    sampler = _layers.Sampler(0.002)
    previous = signal.getsignal(signal.SIGALRM)
    sampler.install_handler()
    try:
        sampler.start()
        while sampler.samples < 500:
            for name, fn in work:
                t = time.thread_time()
                fn()
                truth[name] += time.thread_time() - t
            # Waiting too, as a server that is not saturated does: a sample that finds
            # the thread asleep charges nothing to what it did before.
            time.sleep(0.002)
        sampler.stop()
    finally:
        sampler.active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for s in pair:
            s.close()
    report = sampler.report()
    charged = {"python": 0.0, "numpy": 0.0, "socket": 0.0}
    for entry in report["top"]:
        where = entry["where"]
        if "_busy_python" in where:
            charged["python"] += entry["cpu_s"]
        elif "-> np.multiply" in where:
            charged["numpy"] += entry["cpu_s"]
        elif "_socket_calls" in where:
            charged["socket"] += entry["cpu_s"]
    true_total = sum(truth.values())
    charged_total = sum(charged.values())
    assert report["idle_samples"] > 0
    assert charged_total > 0.8 * report["sampled_cpu_s"]
    for name, used in truth.items():
        assert abs(charged[name] / charged_total - used / true_total) < 0.2, (charged, truth)


def _code_offset(fn: Callable[..., Any], opname: str) -> tuple[CodeType, int]:
    code = fn.__code__
    offsets = [i.offset for i in dis.get_instructions(code) if i.opname == opname]
    return code, offsets[-1]


def _tantivy_search(searcher: Any, query: Any) -> Any:
    return searcher.search(query, limit=3).hits


def _product(a: Any, b: Any) -> Any:
    return a @ b


def _numpy_call(n: int) -> Any:
    return np.zeros(n)


def test_a_native_call_is_named_by_the_call_its_frame_is_making() -> None:
    classifier = _layers._Classifier()
    assert classifier._callee(*_code_offset(_tantivy_search, "CALL")) == "searcher.search"
    assert classifier._callee(*_code_offset(_product, "BINARY_OP")) == "@"
    assert classifier._callee(*_code_offset(_numpy_call, "CALL")) == "np.zeros"


@pytest.mark.parametrize(
    ("path", "layer"),
    [
        ("/site-packages/trio_websocket/_impl.py", "transport"),
        ("/site-packages/wsproto/connection.py", "transport"),
        ("/site-packages/trio/_core/_run.py", None),
        ("/lib/python3.11/json/encoder.py", "json"),
        ("/repo/claw/gateway/_session.py", "gateway"),
        ("/repo/claw/memory/_guard.py", "guard"),
        ("/repo/claw/_currency.py", None),
        ("/repo/claw_memory/_runtime.py", "provider"),
        ("/repo/claw_memory/_search.py", "index"),
        ("/repo/claw_memory/_ranking.py", "ranking"),
        ("/repo/claw_memory/_generation.py", None),
        ("/repo/claw/plugin_sdk/search/_static_embedder.py", "embedding"),
        ("/repo/claw/plugin_sdk/search/_lexical.py", "ranking"),
        ("/repo/claw/state/sqlite/_commit_watch.py", "state"),
        ("/site-packages/numpy/_core/fromnumeric.py", "numpy"),
    ],
)
def test_each_module_has_the_layer_the_benchmark_reports(path: str, layer: str | None) -> None:
    assert _layers._path_layer(path) == layer


def test_the_sampler_is_off_unless_the_benchmark_passes_its_pipe() -> None:
    root = Path(__file__).resolve().parents[2]
    code = (
        "import threading, benchmarks._layers as l; l.install(); "
        "print(sorted(t.name for t in threading.enumerate()))"
    )
    env = {k: v for k, v in os.environ.items() if k != _layers.ENV}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
        env=env,
    ).stdout
    assert "claw-bench-layers" not in out
