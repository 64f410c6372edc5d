"""The [server], [policy], [history], [training] and [guard] sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_harp.config.endpoints import metrics_address, metrics_port, server_tcp
from slurm_harp.config.reader import Reader, positive
from slurm_harp.config.settings import (
    MAX_THREADS,
    MAX_TREES,
    REFIT,
    GuardSettings,
    HistorySettings,
    ServerSettings,
    TrainingSettings,
)
from slurm_harp.core.extension import EXTENSIONS
from slurm_harp.core.policy import DEFAULT_FLOORS, LIMITS, Policy, Rule
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import BY
from slurm_harp.core.text import lowered

_FLOOR_KEYS = {"time_minutes": Target.TIME, "memory_mb": Target.MEMORY, "cpus": Target.CPUS}


def read_server(r: Reader, srv: Mapping[str, Any]) -> ServerSettings:
    d = ServerSettings()

    def get(key: str, kind: type) -> Any:
        return r.get(srv, "server", key, kind, getattr(d, key))

    mode_text = r.get(srv, "server", "socket_mode", str, f"{d.socket_mode:04o}")
    try:
        socket_mode = int(mode_text, 8)
    except ValueError:
        raise r.fail(
            "server.socket_mode", f"expected an octal string like '0660', got {mode_text!r}"
        ) from None
    if socket_mode & ~0o777:
        raise r.fail("server.socket_mode", f"not a permission mode: {mode_text!r}")
    if socket_mode & 0o007:
        raise r.fail("server.socket_mode", "must not grant access to others (only SlurmUser's group)")
    socket_group = get("socket_group", str)
    if socket_group is not None and socket_mode & 0o060 != 0o060:
        # A SlurmUser other than root connects through the group: with '0600' every connect failed,
        # and the plugin let every job through unchanged, saying nothing.
        raise r.fail(
            "server.socket_mode",
            f"must let server.socket_group ({socket_group}) read and write the socket, which SlurmUser "
            f"connects through (e.g. '0660'), got {mode_text!r}",
        )
    return ServerSettings(
        socket=r.path_value(srv, "server", "socket", d.socket),
        socket_mode=socket_mode,
        socket_group=socket_group,
        tcp=server_tcp(r, get("tcp", str)),
        max_workers=positive(r, "server.max_workers", get("max_workers", int)),
        grace_seconds=r.seconds(srv, "server", "grace_seconds", d.grace_seconds, 0.0),
        metrics_address=metrics_address(r, "server", get("metrics_address", str)),
        metrics_port=metrics_port(r, "server", get("metrics_port", int)),
        store_poll_seconds=r.seconds(srv, "server", "store_poll_seconds", d.store_poll_seconds, 1.0),
        predict_lane=get("predict_lane", bool),
    )


def read_guard(r: Reader, g: Mapping[str, Any]) -> GuardSettings:
    d = GuardSettings()

    def seconds(key: str, least: float) -> float:
        return r.seconds(g, "guard", key, getattr(d, key), least)

    poll, lead = seconds("poll_seconds", 1.0), seconds("lead_seconds", 30.0)
    if lead < 2 * poll:
        raise r.fail(
            "guard.lead_seconds", f"must be at least twice guard.poll_seconds ({poll:g}), got {lead:g}"
        )
    stale = seconds("stale_seconds", 2.0)
    if stale < 2 * poll:
        raise r.fail(
            "guard.stale_seconds", f"must be at least twice guard.poll_seconds ({poll:g}), got {stale:g}"
        )
    address = metrics_address(r, "guard", r.get(g, "guard", "metrics_address", str, d.metrics_address))
    port = metrics_port(r, "guard", r.get(g, "guard", "metrics_port", int, None))
    extension = r.get(g, "guard", "extension", str, d.extension)
    if extension not in EXTENSIONS:
        raise r.fail("guard.extension", f"must be one of {', '.join(EXTENSIONS)}, got {extension!r}")
    return GuardSettings(
        heartbeat=r.path_value(g, "guard", "heartbeat", d.heartbeat),
        state=r.path_value(g, "guard", "state", d.state),
        poll_seconds=poll,
        lead_seconds=lead,
        stale_seconds=stale,
        max_updates_per_poll=_max_updates(r, g, d.max_updates_per_poll),
        metrics_address=address,
        metrics_port=port,
        extension=extension,
    )


# guard.max_updates_per_poll bounds one poll's scontrol calls on slurmctld: any value passed (10**18
# too), which was no bound. 10,000 is 50 times the default.
MOST_UPDATES_PER_POLL = 10_000


def _max_updates(r: Reader, g: Mapping[str, Any], default: int) -> int:
    value: int = r.get(g, "guard", "max_updates_per_poll", int, default)
    if value > MOST_UPDATES_PER_POLL:
        raise r.fail("guard.max_updates_per_poll", f"must be <= {MOST_UPDATES_PER_POLL}, got {value}")
    return positive(r, "guard.max_updates_per_poll", value)


def read_training(r: Reader, tr: Mapping[str, Any]) -> TrainingSettings:
    d = TrainingSettings()  # the defaults, written once

    def get(key: str, kind: type) -> Any:
        return r.get(tr, "training", key, kind, getattr(d, key))

    def count(key: str, most: int | None = None) -> int:
        value = positive(r, f"training.{key}", get(key, int))
        if most is not None and value > most:
            raise r.fail(f"training.{key}", f"must be <= {most}, got {value}")
        return value

    budget = get("kill_budget", float)
    if not 0.0 <= budget < 1.0:
        raise r.fail("training.kill_budget", f"must be a fraction in [0, 1), got {budget}")
    tolerance = get("tolerance", float)
    if not 0.0 <= tolerance <= 100.0:
        raise r.fail("training.tolerance", f"must be in [0, 100] points, got {tolerance}")
    rate = get("learning_rate", float)
    if not 0.0 < rate <= 1.0:
        raise r.fail("training.learning_rate", f"must be in (0, 1], got {rate}")
    return TrainingSettings(
        kill_budget=budget,
        tolerance=tolerance,
        keep=count("keep"),
        max_jobs=count("max_jobs"),
        threads=count("threads", MAX_THREADS),
        refit=_refit(r, tr),
        trees=count("trees", MAX_TREES),
        learning_rate=rate,
        ladder_rows=count("ladder_rows"),
        calibrate_by=_calibrate_by(r, get("calibrate_by", str)),
    )


def _calibrate_by(r: Reader, value: str) -> str:
    if value not in BY:
        raise r.fail("training.calibrate_by", f"must be one of {', '.join(BY)}; got {value!r}")
    return value


def _refit(r: Reader, tr: Mapping[str, Any]) -> str:
    """A REFIT name; true (earlier versions' refit on every job) is "full", false "off"."""
    value = tr.get("refit", REFIT[0])
    if isinstance(value, bool):
        return REFIT[0] if value else "off"
    if value not in REFIT:
        raise r.fail("training.refit", f"must be one of {', '.join(REFIT)} (or true, false); got {value!r}")
    return str(value)


# The longest window of history a key may give. 1e15 days passed, and `now - days * 86400` then
# overflowed SQLite's 64-bit integers on every poll: the daemon served with no history at all and
# without its harp_outcome_* figures, while check-config said ok.
MOST_DAYS = 3660


def read_history(r: Reader, hist: Mapping[str, Any]) -> HistorySettings:
    db = r.optional_path(hist, "history", "db", " (leave the key out for no history)")
    poll = r.seconds(hist, "history", "poll_seconds", 60.0, 0.1)

    def days(key: str, default: int) -> int:
        value = positive(r, f"history.{key}", r.get(hist, "history", key, int, default))
        if value > MOST_DAYS:
            raise r.fail(
                f"history.{key}", f"must be a number of days <= {MOST_DAYS} (ten years), got {value}"
            )
        return value

    return HistorySettings(
        db=db,
        window_days=days("window_days", 30),
        poll_seconds=poll,
        outcome_window_days=days("outcome_window_days", 7),
    )


def read_policy(r: Reader, pol: Mapping[str, Any]) -> Policy:
    quantile = r.get(pol, "policy", "quantile", float, 0.9)
    if not 0.0 < quantile < 1.0:
        raise r.fail("policy.quantile", f"must be between 0 and 1, got {quantile}")
    min_gain = r.get(pol, "policy", "min_gain", float, 0.1)
    if not 0.0 <= min_gain < 1.0:
        raise r.fail("policy.min_gain", f"must be in [0, 1), got {min_gain}")
    limits = r.get(pol, "policy", "limits", str, "calibrated")
    if limits not in LIMITS:
        raise r.fail("policy.limits", f"must be one of {', '.join(LIMITS)}, got {limits!r}")
    floors = dict(DEFAULT_FLOORS)
    for key, value in r.table(pol.get("floor", {}), "policy.floor").items():
        number = r.get({key: value}, "policy.floor", key, float, None)
        if number < 0:
            raise r.fail(f"policy.floor.{key}", f"must be >= 0, got {number}")
        floors[_FLOOR_KEYS[key]] = number
    rules = []
    raw_rules = pol.get("rule", [])
    if not isinstance(raw_rules, list):
        raise r.fail("policy.rule", "must be an array of tables ([[policy.rule]])")
    for i, raw in enumerate(raw_rules):
        rule = r.table(raw, "policy.rule")
        key = f"policy.rule[{i}]"
        if "mode" not in rule:
            raise r.fail(f"{key}.mode", "missing")
        if "partition" not in rule and "account" not in rule:
            raise r.fail(key, "needs a partition and/or an account to match")
        rules.append(
            Rule(
                mode=r.mode(rule["mode"], f"{key}.mode"),
                partition=_one_name(r, rule, key, "partition"),
                account=_account(_one_name(r, rule, key, "account")),
            )
        )
    return Policy(
        default_mode=r.mode(pol.get("mode", "shadow"), "policy.mode"),
        rules=tuple(rules),
        quantile=quantile,
        min_gain=min_gain,
        floors=floors,
        require_history=r.get(pol, "policy", "require_history", bool, True),
        limits=limits,
        opt_out_users=r.names(pol, "policy.opt_out_users", "user"),
        opt_out_accounts=frozenset(map(lowered, r.names(pol, "policy.opt_out_accounts", "account"))),
    )


def _one_name(r: Reader, rule: Mapping[str, Any], key: str, field: str) -> str | None:
    """A rule's partition or account (None: any), one name as Reader.one_name reads it."""
    name: str | None = r.get(rule, key, field, str, None)
    if name is None:
        return None
    instead = "per rule: write a [[policy.rule]] for each of"
    return r.one_name(f"{key}.{field}", name, field, instead, " (leave the key out to match any)")


def _account(name: str | None) -> str | None:
    """An account as a job's is matched: in lower case, as Slurm keeps it (core.text.LOWERED_FIELDS)."""
    return None if name is None else lowered(name)
