"""Where a server's CPU goes, layer by layer: a stack sampler weighted by thread CPU.

:func:`install` runs in a benchmark's server process (``claw serve``, the echo server),
on its main thread before it starts serving, when the environment names a command pipe
(``CLAW_BENCH_LAYERS=READ_FD,WRITE_FD``); without it, it does nothing. It takes
``SIGALRM`` and starts a control thread that blocks on the pipe: nothing runs until the
benchmark says ``start``. While sampling, a real-time interval timer (5 ms on average,
jittered so that nothing periodic in the server is sampled in step) interrupts the main
thread, whose handler copies the stack of every Python thread (its own: the frame the
signal interrupted) and reads each thread's own CPU clock (``pthread_getcpuclockid``).
``stop`` answers one JSON line: the process's CPU over the interval (every thread,
``time.process_time``), what each layer was charged, what the sampler itself used
(excluded from the layers and from the main thread's CPU) and the functions that used
the most.

When a sample is taken must not depend on what the server is doing. A sampling thread
of its own would need the GIL to read the stacks, and a busy thread keeps the GIL until
its next blocking call (Python's switch interval is 5 ms): nearly every sample would land
on a socket send or an epoll wait (a thread alternating pure-Python work with socket
calls had its Python share measured at 0.07 for a true 0.44). A signal is handled by the
main thread itself, at the next instruction boundary wherever it is: in Python code at
once, in a native call (tantivy, numpy, a socket call) as it returns, with the frame
still at the call. claw's request path runs on the main (trio) thread; the other threads
(the commit watcher, trio's worker threads) are sampled at the same instants, wherever
the GIL left them. Each thread's CPU is shared out over its layers in proportion to the
samples that found it working there (a thread found waiting: in trio's epoll wait, a
lock, ``select`` or ``sleep``, is not working). ``tests/benchmarks/test_layers.py``
checks the shares against a thread's own clock around pure-Python work, numpy calls and
socket calls: typically within 0.05, though on a loaded machine socket-bound work has
come out up to 0.15 above its share (the samples are spread evenly in wall time, and
time in system calls is not all CPU time).

A stack's layer is that of its innermost frame that belongs to one (frames of trio,
attrs-generated code, the standard library and claw's kernel helpers, such as the
capability registry and the currency checker, count for their caller):

=============  ==========================================================================
transport      trio-websocket, wsproto; the main thread in trio alone (its run loop:
               epoll, scheduling; trio's socket code)
json           the standard ``json`` module (frames decoded, answers encoded)
gateway        ``claw/gateway`` (the session, the protocol, parameter checks, minting)
conversion     the functions that turn ranked rows into hits and hits into the wire form
guard          ``claw/memory`` (the host's memory guard and its currency checks)
provider       Memory Core's provider handle and service, the SDK provider skeleton
index          Memory Core's search bookkeeping (follow, freshness, the page)
embedding      the query's embedding (the embedders of ``claw.plugin_sdk.search``)
ranking        ``claw_memory/_ranking``, ``_lexical``, ``_schedule``, the SDK's search
               helpers (the Python around tantivy and numpy)
tantivy        a call into tantivy (native, no Python frame): found by the call the
               innermost frame is making, ``searcher.search(...)``, ``Query.term_query``
numpy          numpy's own Python functions, ``np.`` calls and matrix products (``@``)
state          ``claw/state`` (the session store: its reads, the commit watch's polling)
other          threads and code in none of the above
=============  ==========================================================================

A native call has no frame of its own: the innermost Python frame is then at the
instruction making it (a ``CALL``, or ``BINARY_OP @``), and the callee is read from
that instruction's source span (cached per code object and offset). numpy methods
called on arrays (``a.astype``) are not told apart from other methods and count for
the frame's layer. The process CPU the Python threads' clocks do not account for
(threads without Python frames, threads that ended between two samples) is reported
as ``unsampled``.
"""

from __future__ import annotations

import collections
import dis
import json
import linecache
import os
import random
import re
import signal
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Any

ENV = "CLAW_BENCH_LAYERS"
LAYERS = (
    "transport",
    "json",
    "gateway",
    "conversion",
    "guard",
    "provider",
    "index",
    "embedding",
    "ranking",
    "tantivy",
    "numpy",
    "state",
    "other",
)
#: The layers around the search that issue 27 budgets together.
AROUND_SEARCH = ("gateway", "conversion", "guard", "provider")

# Functions that convert: ranked rows to neutral hits, neutral hits to the wire.
_CONVERSION = {
    "claw_memory/_runtime.py": {"neutral_hit"},
    "claw/gateway/_memory.py": {"_wire_hit", "_v2_payload", "_v1_payload", "_v1_result"},
}
# Path rules, first match wins; ``None``: the frame counts for its caller.
_RULES: tuple[tuple[re.Pattern[str], str | None], ...] = tuple(
    (re.compile(pattern), layer)
    for pattern, layer in (
        (r"/(trio_websocket|wsproto|h11)/", "transport"),
        (r"/trio/", None),
        (r"/json/", "json"),
        (r"/numpy/", "numpy"),
        (r"/claw/gateway/", "gateway"),
        (r"/claw/memory/", "guard"),
        (
            r"/claw/plugin_sdk/search/_(static_embedder|wordpiece|hash_embedder"
            r"|embedding_input|http_embedder|st_embedder)\.py$",
            "embedding",
        ),
        (r"/claw/plugin_sdk/search/", "ranking"),
        (r"/claw/plugin_sdk/_provider\.py$", "provider"),
        (r"/claw_memory/_(runtime|plugin)\.py$", "provider"),
        (r"/claw_memory/_(ranking|lexical|schedule)\.py$", "ranking"),
        (r"/claw_memory/_(generation|published|records|types|view)\.py$", None),
        (r"/claw_memory/", "index"),
        (r"/claw/state/", "state"),
    )
)
# A native call the innermost frame of these layers makes is tantivy's when its callee
# is one of these (tantivy's Searcher, Query, TextAnalyzer and Index methods).
_TANTIVY_CALLS = frozenset(
    {
        "search",
        "fast_field_values",
        "doc_freq",
        "doc",
        "searcher",
        "reload",
        "analyze",
        "term_query",
        "term_set_query",
        "boolean_query",
        "boost_query",
        "all_query",
    }
)
# A thread whose innermost frame is in one of these calls is waiting (trio's epoll wait,
# a lock or condition, select, sleep): see Sampler.
_IDLE_CALLS = frozenset({"poll", "acquire", "select", "sleep"})
IDLE = "idle"
_NATIVE_FROM = frozenset({"ranking", "index", "provider", "embedding"})
_CALLS = frozenset({"CALL", "PRECALL", "CALL_FUNCTION_EX"})
_LOADS = frozenset(
    {"LOAD_METHOD", "LOAD_ATTR", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF"}
)


def _path_layer(filename: str) -> str | None:
    name = filename.replace(os.sep, "/")
    for pattern, layer in _RULES:
        if pattern.search(name):
            return layer
    return None


def _short(filename: str) -> str:
    name = filename.replace(os.sep, "/")
    for root in ("claw_memory/", "claw/", "trio_websocket/", "wsproto/", "trio/", "numpy/"):
        at = name.rfind("/" + root)
        if at >= 0:
            return name[at + 1 :]
    return "/".join(name.rsplit("/", 2)[-2:])


def _call_sites(code: CodeType) -> dict[int, str]:
    """Each call (and matrix product) of ``code`` by offset: the callee's source text.

    A call's callee is the last load before it that starts where the call expression
    starts (``tantivy.Query.term_query(...)``: the load of ``term_query`` spans
    ``tantivy.Query.term_query``); its text is read from the source line.
    """
    sites: dict[int, str] = {}
    loads: dict[tuple[int | None, int | None], dis.Instruction] = {}
    for ins in dis.get_instructions(code):
        pos = ins.positions
        if ins.opname == "BINARY_OP" and ins.argrepr.startswith("@"):
            sites[ins.offset] = "@"
        elif pos is None:
            continue
        elif ins.opname in _LOADS:
            loads[(pos.lineno, pos.col_offset)] = ins
        elif ins.opname in _CALLS:
            callee = loads.get((pos.lineno, pos.col_offset))
            cpos = callee.positions if callee is not None else None
            if callee is None or cpos is None:
                continue
            line = linecache.getline(code.co_filename, cpos.lineno or 0).encode()
            text = line[cpos.col_offset : cpos.end_col_offset].decode(errors="replace")
            sites[ins.offset] = "".join(text.split()) or str(callee.argval)
    return sites


class _Classifier:
    """A stack's layer and the function charged (cached per code object and offset)."""

    def __init__(self) -> None:
        self._code: dict[CodeType, tuple[str | None, str, bool]] = {}
        self._calls: dict[CodeType, dict[int, str]] = {}

    def _code_layer(self, code: CodeType) -> tuple[str | None, str, bool]:
        """A code object's layer, its name for the report, and whether it is trio's."""
        found = self._code.get(code)
        if found is None:
            layer = _path_layer(code.co_filename)
            short = _short(code.co_filename)
            if code.co_name in _CONVERSION.get(short, ()):
                layer = "conversion"
            trio = "/trio/" in code.co_filename.replace(os.sep, "/")
            found = self._code[code] = (layer, f"{short}:{code.co_name}", trio)
        return found

    def _callee(self, code: CodeType, offset: int) -> str | None:
        """What the instruction at ``offset`` calls natively: ``"@"`` for a matrix
        product, else the dotted callee of a call (``"searcher.search"``); ``None``
        for any other instruction. Every call site of a code object is read at once,
        the first time the code is seen."""
        calls = self._calls.get(code)
        if calls is None:
            calls = self._calls[code] = _call_sites(code)
        return calls.get(offset)

    def classify(self, codes: list[CodeType], lasti: int, *, main: bool) -> tuple[str, str]:
        """The layer of a thread's stack (its code objects, innermost first, the
        innermost at offset ``lasti``) and the function charged.

        A stack of the ``main`` thread in none (trio's run loop, or trio's socket code
        under a coroutine whose callers could not be followed) is transport's.
        """
        callee = self._callee(codes[0], lasti)
        innermost = self._code_layer(codes[0])[1]
        if callee is not None and callee.rsplit(".", 1)[-1] in _IDLE_CALLS:
            return IDLE, f"{innermost} -> {callee}"
        if callee is not None and (callee == "@" or callee.startswith(("np.", "numpy."))):
            return "numpy", f"{innermost} -> {callee}"
        in_loop = False
        for code in codes:
            layer, where, trio = self._code_layer(code)
            if layer is not None:
                if (
                    callee is not None
                    and layer in _NATIVE_FROM
                    and (
                        callee.startswith("tantivy.")
                        or callee.rsplit(".", 1)[-1] in _TANTIVY_CALLS
                    )
                ):
                    return "tantivy", f"{innermost} -> {callee}"
                return layer, where
            in_loop = in_loop or trio
        return ("transport" if in_loop and main else "other"), innermost


class Sampler:
    """Samples the process's threads on a timer signal handled by the main thread (see
    the module docstring). :meth:`start` and :meth:`stop` may be called from any
    thread; the handler is installed by :meth:`install_handler`, from the main thread.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.active = False
        self._jitter = random.Random(0)
        self._classifier = _Classifier()
        self._reset()

    def _reset(self) -> None:
        # Per thread: the CPU it used, and how many samples found it working in each
        # (layer, function).
        self._cpu: collections.defaultdict[int, float] = collections.defaultdict(float)
        self._busy: dict[int, collections.Counter[tuple[str, str]]] = {}
        self.idle_samples = 0
        #: The CPU the handler used (on the main thread: left out of its CPU).
        self.sampler_cpu = 0.0
        self.samples = 0
        self.threads_cpu = 0.0
        self._last: dict[int, float] = {}
        self._started_cpu = time.process_time()
        self._started_wall = time.perf_counter()

    def install_handler(self) -> None:
        """Take ``SIGALRM`` (call from the main thread, before it serves)."""
        signal.signal(signal.SIGALRM, self._on_signal)

    def _arm(self) -> None:
        # A jittered period, so that nothing periodic in the server is sampled in step.
        signal.setitimer(signal.ITIMER_REAL, self.interval * self._jitter.uniform(0.5, 1.5))

    def start(self) -> None:
        self._reset()
        self._first = True
        self.active = True
        self._arm()

    def stop(self) -> None:
        self.active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        # A handler already running (on the main thread) finishes within microseconds.
        time.sleep(0.05)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        began = time.thread_time()
        if not self.active:
            return
        try:
            self.sample(frame, charge=not self._first)
            self._first = False
        finally:
            self.sampler_cpu += time.thread_time() - began
            if self.active:
                self._arm()

    def sample(self, main_frame: FrameType | None, *, charge: bool = True) -> None:
        """One look at every thread (``main_frame``: where the main thread was when the
        signal came): where each is, and the CPU it used since the last look."""
        main = threading.main_thread().ident
        me = threading.get_ident()
        # The stacks first, copied before anything that could let the GIL go (a frame
        # object is live: read later, it would show where its thread went meanwhile).
        stacks: list[tuple[int, int, list[CodeType]]] = []
        for ident, current in sys._current_frames().items():
            # This handler's own frame is not the work: the interrupted frame is.
            top = main_frame if ident == me else current
            if top is None:
                continue
            codes = []
            f: FrameType | None = top
            while f is not None:
                codes.append(f.f_code)
                f = f.f_back
            stacks.append((ident, top.f_lasti, codes))
        last: dict[int, float] = {}
        for ident, lasti, codes in stacks:
            # Each thread held a Python thread state when the stacks were copied; one
            # that ended since has no clock any more.
            try:
                now = time.clock_gettime(time.pthread_getcpuclockid(ident))
            except OSError:
                continue
            if ident == me:
                now -= self.sampler_cpu  # the handlers' own CPU is not the thread's
            last[ident] = now
            before = self._last.get(ident)
            if before is None or not charge:
                continue
            used = max(0.0, now - before)
            self.threads_cpu += used
            self._cpu[ident] += used
            layer, where = self._classifier.classify(codes, lasti, main=ident == main)
            if layer == IDLE:
                self.idle_samples += 1
                continue
            busy = self._busy.get(ident)
            if busy is None:
                busy = self._busy[ident] = collections.Counter()
            busy[(layer, where)] += 1
        self._last = last
        if charge:
            self.samples += 1

    def charged(self) -> dict[tuple[str, str], float]:
        """The CPU charged to each (layer, function), every thread together: each
        thread's CPU, shared out in proportion to the samples that found it working in
        each (a thread never found working is ``other``'s)."""
        out: collections.defaultdict[tuple[str, str], float] = collections.defaultdict(float)
        for ident, used in dict(self._cpu).items():
            busy = self._busy.get(ident)
            seen = sum(busy.values()) if busy else 0
            if not busy or seen == 0:
                out[("other", "a thread found waiting at every sample")] += used
                continue
            for key, n in dict(busy).items():
                out[key] += used * n / seen
        return dict(out)

    def report(self) -> dict[str, Any]:
        cpu = time.process_time() - self._started_cpu
        own = self.sampler_cpu
        charged = self.charged()
        layers = dict.fromkeys(LAYERS, 0.0)
        for (layer, _), used in charged.items():
            layers[layer] += used
        top = [
            {"layer": layer, "where": where, "cpu_s": used}
            for (layer, where), used in sorted(charged.items(), key=lambda kv: -kv[1])[:40]
        ]
        return {
            "cpu_s": cpu,
            "wall_s": time.perf_counter() - self._started_wall,
            "sampler_cpu_s": own,
            "sampled_cpu_s": self.threads_cpu,
            "unsampled_cpu_s": max(0.0, cpu - own - self.threads_cpu),
            "samples": self.samples,
            "interval_s": self.interval,
            "idle_samples": self.idle_samples,
            "layers": layers,
            "top": top,
        }


def _serve(sampler: Sampler, read_fd: int, write_fd: int) -> None:
    """The control thread: ``start`` and ``stop`` from the benchmark's pipe."""
    pending = b""
    while True:
        data = os.read(read_fd, 4096)
        if not data:
            return
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            command = line.decode().strip()
            if command == "start":
                sampler.start()
                os.write(write_fd, b"started\n")
            elif command == "stop":
                if sampler.active:
                    sampler.stop()
                os.write(write_fd, (json.dumps(sampler.report()) + "\n").encode())


def install(interval: float = 0.005) -> None:
    """If :data:`ENV` names the command pipe: take ``SIGALRM`` for the sampler and start
    the control thread (else nothing). Call from the main thread before it serves."""
    fds = os.environ.pop(ENV, "")
    if not fds:
        return
    read_fd, write_fd = (int(x) for x in fds.split(","))
    sampler = Sampler(interval)
    sampler.install_handler()
    threading.Thread(
        target=_serve, args=(sampler, read_fd, write_fd), name="claw-bench-layers", daemon=True
    ).start()
