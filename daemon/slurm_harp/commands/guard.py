"""`harp guard`: extend the running jobs harp shortened (time_min and extend modes) until SIGTERM.

Run it on the controller host beside the daemon, as SlurmUser or root (raising a running job's
limit needs an operator); deploy/systemd/slurm-harp-guard.service does. SIGHUP re-reads the
configuration; a bad file is logged and the running one kept.
"""

from __future__ import annotations

import argparse
import logging

from prometheus_client import CollectorRegistry

from slurm_harp.accounting import extension_file
from slurm_harp.commands.arguments import config_option, settings_at
from slurm_harp.commands.signal_wait import SignalWait
from slurm_harp.config import ConfigError, Settings, load
from slurm_harp.config.start_only import GUARD_KEYS, guard_part
from slurm_harp.guard.extension_history import ExtensionHistory
from slurm_harp.guard.guard_metrics import GuardMetrics
from slurm_harp.guard.loop import Guard
from slurm_harp.guard.slurm import run_command
from slurm_harp.server.metrics_http import MetricsServer, bind_problem

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("guard", help="extend the running jobs harp shortened, up to their own limits")
    config_option(p, "TOML configuration (the [guard] section)")
    p.add_argument(
        "--once",
        action="store_true",
        help="one poll, then exit (0 if it listed the jobs and not every extension it tried failed)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_at(args.config)
    if settings is None:
        return 2
    registry = CollectorRegistry()
    if not args.once and not _serve_metrics(settings, registry):
        return 1
    guard = Guard(settings.guard, run_command, GuardMetrics(registry), history=history_of(settings))
    if args.once:
        return _once(guard)
    with SignalWait() as signals:
        log.info(
            "guarding shortened jobs: poll %g s, lead %g s, heartbeat %s, extension %s",
            settings.guard.poll_seconds, settings.guard.lead_seconds, settings.guard.heartbeat,
            _extension_of(settings, guard),
        )  # fmt: skip
        while signals.stop is None:
            if signals.reload:
                signals.reload = False
                reload(args.config, guard, settings)
            try:
                guard.poll()  # the first poll catches up on every job shortened while the guard was down
            except Exception:
                log.exception("poll failed; retrying next period")
            signals.wait(guard.settings.poll_seconds)
        # What it saw within the last minute, for the next guard; inside the block, where a second
        # SIGTERM is caught and cannot cut the save short.
        guard.close()
    log.info("stopped")
    return 0


def _serve_metrics(settings: Settings, registry: CollectorRegistry) -> bool:
    """Start the Prometheus endpoint if one is configured; False, said on one line naming the key
    and the address (as `harp serve` says its own), when it cannot be bound (a port in use)."""
    port, address = settings.guard.metrics_port, settings.guard.metrics_address
    if port is None:
        return True
    try:
        MetricsServer(address, port, registry)  # bounded: not prometheus_client's thread per connection
    except OSError as exc:
        log.error("not starting: %s", bind_problem("guard", address, port, exc))
        return False
    return True


def _once(guard: Guard) -> int:
    """--once: 0 for a good poll (its heartbeat written); 1 otherwise, an OSError that escapes the
    poll or the save said on one line (the loop logs it and polls on)."""
    try:
        try:
            report = guard.poll()
        finally:
            guard.close()  # what it saw, for the next guard, whatever the poll did
    except OSError as exc:
        log.error("poll failed: %s", exc)
        return 1
    return 0 if report is not None and report.good else 1


def reload(path: str, guard: Guard, started: Settings) -> None:
    """SIGHUP: the file's history.db and [guard] at once, but for the metrics endpoint, which stays
    as ``started``; a bad file keeps the running configuration."""
    try:
        fresh = load(path)
    except ConfigError as exc:
        log.error("SIGHUP: keeping the previous configuration: %s", exc)
        return
    except Exception:  # a reader's bug must not end the guard
        log.exception("SIGHUP: keeping the previous configuration: reading %s failed", path)
        return
    guard.configure(fresh.guard, history_of(fresh))
    if guard_part(fresh) != guard_part(started):
        log.warning("SIGHUP: %s change only after a restart", " and ".join(f"guard.{k}" for k in GUARD_KEYS))
    log.info("SIGHUP: configuration reloaded")


def history_of(settings: Settings) -> ExtensionHistory:
    """The conditional extension's history: the file the harvester writes beside history.db."""
    db = settings.history.db
    return ExtensionHistory(None if db is None else extension_file.path_for(db))


def _extension_of(settings: Settings, guard: Guard) -> str:
    if guard.history is None:
        return "by Tsafrir's steps"
    if guard.history.path is None:
        return "conditional, but no history.db: by Tsafrir's steps"
    return f"conditional on {guard.history.path} (Tsafrir's steps where it knows too few jobs)"
