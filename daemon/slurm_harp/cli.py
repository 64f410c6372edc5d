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
    code: int = args.func(args)
    return code


def _escape_undecodable(stream: TextIO) -> None:
    """A file name that is not UTF-8 (its bytes held as surrogates) printed as logging prints it
    on stderr, ``\\udcff`` (commands.terminal's escape), not a UnicodeEncodeError after the work
    is done: under a UTF-8 locale stdout's errors are "strict"."""
    if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
        stream.reconfigure(errors="backslashreplace")


if __name__ == "__main__":
    sys.exit(main())
