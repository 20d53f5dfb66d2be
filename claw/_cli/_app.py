"""``claw``'s entry point: parse, run the command under Trio, report failures."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

import trio
from threadpoolctl import threadpool_limits

from .._errors import ClawError
from . import _demo, _doctor, _mcp, _memory, _serve, _sessions
from ._common import EXIT_ERROR, EXIT_OK, CliError, UsageError, emit_json
from ._errors import broken_pipe, error_code, innermost, one_line
from ._parser import build_parser

Runner = Callable[[argparse.Namespace, TextIO, TextIO, list[str]], Awaitable[int]]

_COMMANDS: dict[str, Runner] = {
    "memory": _memory.run,
    "sessions": _sessions.run,
    "doctor": _doctor.run,
    "serve": _serve.run,
    "mcp": _mcp.run,
    "demo": _demo.run_demo_command,
    "init": lambda args, out, err, warnings: _init(args, out),
}


async def _init(args: argparse.Namespace, out: TextIO) -> int:
    return _demo.run_init(args, out)


async def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]) -> int:
    runner = _COMMANDS.get(args.command)
    if runner is None:  # pragma: no cover - argparse accepts only the commands above
        raise CliError(f"unknown command {args.command!r}")
    return await runner(args, out, err, warnings)


class _WarningLines(logging.Handler):
    """Prints claw's warnings as ``claw: warning: ...`` and keeps them for ``doctor``."""

    def __init__(self, err: TextIO) -> None:
        super().__init__(logging.WARNING)
        self.err = err
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().strip().splitlines()[0]
        self.messages.append(message)
        self.err.write(f"claw: warning: {message}\n")


@contextmanager
def _warnings_to(err: TextIO) -> Iterator[_WarningLines]:
    handler = _WarningLines(err)
    loggers = [logging.getLogger("claw"), logging.getLogger("claw_memory")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _silence_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the exit flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run ``claw`` with ``argv``; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    arguments = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--json" in arguments
    debug = "--debug" in arguments
    try:
        with _warnings_to(err) as warnings:
            args = build_parser().parse_args(arguments)
            debug = args.debug
            # One BLAS thread: claw runs its own concurrency (searches share products,
            # large products are split across the worker pool), and BLAS threads that
            # spin between calls only take CPU from the event loop (claw serve answered
            # 17% more requests per second with them off). This is our own process; as
            # a library, claw leaves the host application's BLAS settings alone.
            with threadpool_limits(limits=1, user_api="blas"):
                code = trio.run(_dispatch, args, out, err, warnings.messages)
            out.flush()
            return code
    except KeyboardInterrupt:
        err.write("claw: interrupted\n")
        return 130
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        if broken_pipe(exc):
            if out is sys.stdout:
                _silence_stdout()
            return EXIT_OK
        internal = not isinstance(innermost(exc), ClawError | OSError | ValueError | LookupError)
        if debug and not isinstance(exc, UsageError):
            raise
        message = one_line(exc)
        if isinstance(exc, UsageError):
            exc.parser.print_usage(err)
            err.write(f"{exc.parser.prog}: error: {message}\n")
        elif internal:
            err.write(
                f"claw: internal error ({type(innermost(exc)).__name__}): {message}; "
                "rerun with --debug\n"
            )
        else:
            err.write(f"claw: error: {message}\n")
        if wants_json:
            try:
                emit_json(out, {"error": {"code": error_code(exc), "message": message}})
                out.flush()
            except BrokenPipeError:
                _silence_stdout()
        return EXIT_ERROR
