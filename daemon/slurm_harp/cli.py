"""The `harp` command line: one subcommand per module in slurm_harp.commands."""

from __future__ import annotations

import argparse
import importlib
import io
import logging
import os
import sys
from typing import TextIO

from slurm_harp import LOG_FORMAT, __version__
from slurm_harp.server import grpc_core

# Before any subcommand imports grpc (grpcio reads its core settings once, on import).
grpc_core.configure()

COMMANDS = (
    "serve", "guard", "train", "demo", "harvest", "importer", "evaluate", "models", "nightly", "simulate",
    "explain", "report", "check_config", "advise",
)  # fmt: skip
LEVEL_VARIABLE = "HARP_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harp", description="Right-size Slurm job requests.")
    parser.add_argument("--version", action="version", version=f"slurm-harp {__version__}")
    parser.add_argument(
        "--log-level",
        type=log_level,
        default=None,
        help=f"one of {', '.join(LEVELS)} (default: ${LEVEL_VARIABLE} if set, else INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"slurm_harp.commands.{name}").register(subparsers)
    return parser


def log_level(text: str) -> str:
    """``text`` as a level logging knows (any case), or the usage error naming the levels."""
    level = text.strip().upper()
    if level not in logging.getLevelNamesMapping():
        raise argparse.ArgumentTypeError(f"not a log level: {text!r} (one of {', '.join(LEVELS)})")
    return level


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = args.log_level
    if level is None:
        # A unit's Environment= typo must be plain at once, not a traceback nor a silent INFO.
        try:
            level = log_level(os.environ.get(LEVEL_VARIABLE, "INFO"))
        except argparse.ArgumentTypeError as exc:
            print(f"harp: ${LEVEL_VARIABLE}: {exc}", file=sys.stderr)
            return 2
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    _escape_undecodable(sys.stdout)
    if sys.stdout is None:  # started with its stdout closed: print() writes nothing, fails nothing
        code: int = args.func(args)
        return code
    return _watching_stdout(args)


def _escape_undecodable(stream: TextIO) -> None:
    """A file name that is not UTF-8 (its bytes held as surrogates) printed as logging prints it
    on stderr, ``\\udcff`` (commands.terminal's escape): under a UTF-8 locale stdout's errors are
    "strict" (a UnicodeEncodeError after the work is done), under C, C.UTF-8 or POSIX they are
    "surrogateescape" (the raw byte, whatever the terminal makes of it)."""
    if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape"):
        stream.reconfigure(errors="backslashreplace")


class _WatchedStdout:
    """sys.stdout, keeping the last error a write or flush of it raised: an OSError a command let
    out is told from another by this, and output lost while the command went on (a failing print
    it caught, logged) is still said at the end."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as exc:
            self.failed = exc
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            self.failed = exc
            raise

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


def _watching_stdout(args: argparse.Namespace) -> int:
    """``args.func``'s exit code, or 1 when it said 0 but its stdout could not be written (a full
    disk behind a redirect, a closed pipe): one line on stderr, none for a reader that stopped
    reading (`harp models | head -1`). 1 as Python's signal docs recommend on EPIPE (141 would say
    harp was killed by SIGPIPE, which Python ignores: it gets the error instead)."""
    watched = _WatchedStdout(sys.stdout)
    sys.stdout = watched  # type: ignore[assignment]
    try:
        code: int = args.func(args)
        watched.flush()  # here, not at exit, where Python's own flush would print a traceback
    except OSError as exc:
        if exc is not watched.failed:  # not stdout's: a bug, shown with its traceback
            raise
        code = 1
    finally:
        sys.stdout = watched.stream
    if watched.failed is None:
        return code
    _discard_stdout()
    if not isinstance(watched.failed, BrokenPipeError):
        print(
            f"harp: cannot write standard output: {watched.failed.strerror or watched.failed}",
            file=sys.stderr,
        )
    return code or 1


def _discard_stdout() -> None:
    """Point stdout's file descriptor at /dev/null, as Python's signal docs do after EPIPE: Python
    flushes stdout again at exit, and what it still holds would fail again, with a traceback."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # a stream of no descriptor (a test's capture): nothing to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
