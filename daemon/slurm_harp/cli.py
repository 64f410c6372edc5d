"""The `harp` command line: one subcommand per module in slurm_harp.commands."""

from __future__ import annotations

import argparse
import importlib
import io
import logging
import os
import sys
from typing import TextIO

from slurm_harp import __version__
from slurm_harp.server import grpc_core

# Before any subcommand imports grpc (grpcio reads its core settings once, on import).
grpc_core.configure()

COMMANDS = (
    "serve", "guard", "train", "demo", "harvest", "importer", "evaluate", "models", "nightly", "simulate",
    "explain", "report", "check_config", "advise",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harp", description="Right-size Slurm job requests.")
    parser.add_argument("--version", action="version", version=f"slurm-harp {__version__}")
    parser.add_argument(
        "--log-level", default=os.environ.get("HARP_LOG_LEVEL", "INFO"), help="default: %(default)s"
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"slurm_harp.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
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
