"""Subcommands of the `harp` command line; each module exposes register(subparsers)."""
