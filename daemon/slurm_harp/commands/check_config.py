"""`harp check-config FILE`: read a harp.toml as the daemon, the guard and nightly would, and say
whether it is good (exit 0) or what is wrong (exit 2), changing nothing. It checks the host too (the
socket's group exists), as `harp serve` does before it binds. Ansible's template module
runs it before it installs a new harp.toml (deploy/ansible), so a bad file never replaces a good one.
A file some command cannot use but the daemon can (no history.db: `harp nightly` refuses it) is good,
with a warning that says what follows; so is a guard endpoint on the daemon's port where no mode runs
the guard.

`--start-only` prints instead, as JSON, what of the file each service reads only at start
(config/start_only.py): the role compares it before and after writing a new harp.toml, and restarts
a service whose part changed rather than reloading it (SIGHUP re-reads the rest).
"""

from __future__ import annotations

import argparse
import json
import logging

from slurm_harp.commands.arguments import settings_at
from slurm_harp.config.endpoints import idle_guard_clash
from slurm_harp.config.start_only import by_unit
from slurm_harp.server.socket_path import start_problem

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("check-config", help="check a harp.toml without using it")
    p.add_argument("file", help="the configuration to check")
    p.add_argument(
        "--start-only",
        action="store_true",
        help="print, as JSON per service, the settings it reads only at start (a change needs a restart)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_at(args.file)  # logs the problem, naming the key, when there is one
    if settings is None:
        return 2
    if args.start_only:
        print(json.dumps(by_unit(settings), sort_keys=True))
        return 0
    if (problem := start_problem(settings)) is not None:  # this host is where it will serve
        log.error("%s", problem)
        return 2
    if settings.guard.heartbeat.is_dir():  # no beat could replace it: every poll would fail
        log.error(
            "%s: guard.heartbeat: %s is a directory, not the file the guard writes",
            args.file,
            settings.guard.heartbeat,
        )
        return 2
    if settings.history.db is None:  # good for `harp serve`, not for the nightly: said, not refused
        log.warning(
            "%s: no history.db: the daemon serves without history features, and `harp nightly` "
            "refuses to run (it harvests into and trains from that job store)",
            args.file,
        )
    if (clash := idle_guard_clash(settings)) is not None:  # said, not refused: no guard listens yet
        log.warning(
            "%s: %s: %s: no mode here runs the guard, but one started for a time_min or extend mode "
            "could not listen (give each its own port)",
            args.file,
            clash.key,
            clash,
        )
    print(f"{args.file}: ok (policy mode {settings.policy.default_mode.value})")
    return 0
