"""The daemon's TOML configuration, validated once into a frozen Settings object.

Every error names the offending key and the file, so a sysadmin can fix it without reading code.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_harp.advice.billing import Mode as BillingMode
from slurm_harp.advice.billing import Weights, parse_weights
from slurm_harp.advice.tariff import PartitionPrice, Prices
from slurm_harp.core.extension import DEFAULT_LEAD_S, EXTENSIONS
from slurm_harp.core.policy import DEFAULT_FLOORS, LIMITS, Mode, Policy, Rule
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import BY

DEFAULT_PATH = Path("/etc/slurm-harp/harp.toml")
DEFAULT_SOCKET = Path("/run/slurm-harp/harp.sock")
DEFAULT_STORE = Path("/var/lib/slurm-harp/models")
# Where `harp advise` looks for the advice socket when nothing else says ([advice] socket is unset
# by default: no advice socket).
DEFAULT_ADVICE_SOCKET = Path("/run/slurm-harp/advice.sock")
# learning.fitting.Refit's values, default first (tested equal): this reader imports no learning.
REFIT = ("full", "update", "off")


class ConfigError(ValueError):
    """A configuration problem, with the key and file in the message."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    socket: Path = DEFAULT_SOCKET
    socket_mode: int = 0o660
    socket_group: str | None = None
    tcp: str | None = None  # "host:port"; off by default
    max_workers: int = 8
    grace_seconds: float = 5.0
    metrics_address: str = "127.0.0.1"
    metrics_port: int | None = None
    store_poll_seconds: float = 30.0
    # Predict answered in grpc core's polling thread instead of the worker pool (server.unary_lane).
    predict_lane: bool = True


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """Where the daemon reads job history from: the harvester's job store (None = no history)."""

    db: Path | None = None
    window_days: int = 30  # how far back to seed; history features look back HORIZON_DAYS
    poll_seconds: float = 60.0
    outcome_window_days: int = 7  # the accuracy figures cover the jobs that ended this recently


@dataclass(frozen=True, slots=True)
class TrainingSettings:
    """What `harp nightly` trains with and how it promotes (see learning.promotion)."""

    kill_budget: float = 0.01  # fraction of validation jobs the calibrated rule may newly kill
    tolerance: float = 0.5  # waste-cut points a challenger may lose to the champion and still win
    keep: int = 5  # model versions kept per target (the serving one always)
    max_jobs: int = 500_000  # train on the most recent N jobs of the store
    threads: int = 1  # LightGBM threads: the head node runs slurmctld too
    refit: str = "full"  # one of REFIT: how the published models meet the newest jobs
    trees: int = 200  # boosting rounds per quantile model (as `harp train --trees`)
    learning_rate: float = 0.05
    ladder_rows: int = 100_000  # the quantile ladder learns from N training jobs spread over the window
    calibrate_by: str = "none"  # one of core.safety_rule.BY: "partition" for a risk per rung and partition


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """`harp guard`: extends the running jobs that harp shortened (time_min and extend modes).

    The daemon reads only ``heartbeat`` and ``stale_seconds``: a job is shortened only while the
    guard refreshed its heartbeat within ``stale_seconds``."""

    heartbeat: Path = Path("/run/slurm-harp-guard/heartbeat")
    poll_seconds: float = 5.0
    lead_seconds: float = DEFAULT_LEAD_S  # extend a job once less than this is left of its limit
    stale_seconds: float = 30.0
    max_updates_per_poll: int = 200  # bounds one poll's work on slurmctld; the rest wait a poll
    metrics_address: str = "127.0.0.1"
    metrics_port: int | None = None
    # How a due job is extended (core.extension): "conditional" learns from the recently ended jobs
    # of history.db (accounting.extension_file), with Tsafrir's steps where they say too little.
    extension: str = "conditional"


@dataclass(frozen=True, slots=True)
class AdviceSettings:
    """The advice for users (docs/advice.md): its socket, which any user may open."""

    socket: Path | None = None  # None: no advice socket
    max_connections: int = 64  # open advice connections at most; a user has at most a quarter
    # partition -> one GPU's memory in bytes, for the ZeRO check ([[advice.partition]] gpu_memory_gb)
    gpu_memory_bytes: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    store: Path = DEFAULT_STORE
    policy: Policy = field(default_factory=Policy)
    source: Path | None = None
    history: HistorySettings = field(default_factory=HistorySettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    guard: GuardSettings = field(default_factory=GuardSettings)
    billing: Prices = field(default_factory=Prices)
    advice: AdviceSettings = field(default_factory=AdviceSettings)


_SCHEMA: dict[str, set[str]] = {
    "": {"server", "store", "policy", "history", "training", "guard", "billing", "advice"},
    "advice": {"socket", "max_connections", "partition"},
    "advice.partition": {"name", "gpu_memory_gb"},
    "billing": {"price", "currency", "mode", "partition"},
    "billing.partition": {"name", "price", "weights"},
    "guard": {
        "heartbeat",
        "poll_seconds",
        "lead_seconds",
        "stale_seconds",
        "max_updates_per_poll",
        "metrics_address",
        "metrics_port",
        "extension",
    },
    "training": {
        "kill_budget",
        "tolerance",
        "keep",
        "max_jobs",
        "threads",
        "refit",
        "trees",
        "learning_rate",
        "ladder_rows",
        "calibrate_by",
    },
    "server": {
        "socket",
        "socket_mode",
        "socket_group",
        "tcp",
        "max_workers",
        "grace_seconds",
        "metrics_address",
        "metrics_port",
        "store_poll_seconds",
        "predict_lane",
    },
    "store": {"path"},
    "history": {"db", "window_days", "poll_seconds", "outcome_window_days"},
    "policy": {
        "mode",
        "quantile",
        "min_gain",
        "floor",
        "rule",
        "require_history",
        "limits",
        "opt_out_users",
        "opt_out_accounts",
    },
    "policy.floor": {"time_minutes", "memory_mb", "cpus"},
    "policy.rule": {"partition", "account", "mode"},
}
# Sections that are arrays of tables ([[...]]): their keys are documented with the array.
ARRAY_TABLES = frozenset({"policy.rule", "billing.partition", "advice.partition"})
_FLOOR_KEYS = {"time_minutes": Target.TIME, "memory_mb": Target.MEMORY, "cpus": Target.CPUS}


class _Reader:
    def __init__(self, path: Path | str) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {problem}")

    def table(self, data: Any, section: str) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail(section or "(top level)", "must be a table")
        allowed = _SCHEMA[section]
        for key in data:
            if key not in allowed:
                where = f"{section}.{key}" if section else key
                raise self.fail(where, f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return data

    def get(self, data: Mapping[str, Any], section: str, key: str, kind: type, default: Any) -> Any:
        if key not in data:
            return default
        value = data[key]
        # bool is an int in Python; a sysadmin writing `true` for a number is an error.
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                return float(value)
            raise self.fail(f"{section}.{key}", f"expected {kind.__name__}, got {value!r}")
        # TOML has nan and inf; every range check below is false for nan, so refuse them here.
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(f"{section}.{key}", f"must be a finite number, got {value!r}")
        return value

    def seconds(self, data: Mapping[str, Any], section: str, key: str, default: float, least: float) -> float:
        """A period in seconds, at least ``least`` (0 would make a poll loop spin)."""
        value = float(self.get(data, section, key, float, default))
        if value < least:
            raise self.fail(f"{section}.{key}", f"must be a number of seconds >= {least:g}, got {value:g}")
        return value

    def mode(self, value: Any, key: str) -> Mode:
        try:
            return Mode(value)
        except ValueError:
            modes = ", ".join(m.value for m in Mode)
            raise self.fail(key, f"mode must be one of {modes}; got {value!r}") from None

    def names(self, data: Mapping[str, Any], key: str) -> frozenset[str]:
        """A list of names (users, accounts)."""
        value = data.get(key.rpartition(".")[2], [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, f"expected a list of names, got {value!r}")
        return frozenset(value)


def parse(data: Mapping[str, Any], path: Path | str = "<config>") -> Settings:
    r = _Reader(path)
    top = r.table(data, "")
    srv = r.table(top.get("server", {}), "server")
    mode_text = r.get(srv, "server", "socket_mode", str, "0660")
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
    metrics_port = r.get(srv, "server", "metrics_port", int, None)
    if metrics_port is not None and not 0 <= metrics_port < 65536:
        raise r.fail("server.metrics_port", f"out of range: {metrics_port}")
    tcp = r.get(srv, "server", "tcp", str, None)
    if tcp is not None and not tcp.rpartition(":")[2].isdigit():
        raise r.fail("server.tcp", f"expected host:port, got {tcp!r}")
    server = ServerSettings(
        socket=Path(r.get(srv, "server", "socket", str, str(DEFAULT_SOCKET))),
        socket_mode=socket_mode,
        socket_group=r.get(srv, "server", "socket_group", str, None),
        tcp=tcp,
        max_workers=_positive(r, "server.max_workers", r.get(srv, "server", "max_workers", int, 8)),
        grace_seconds=r.seconds(srv, "server", "grace_seconds", 5.0, 0.0),
        metrics_address=r.get(srv, "server", "metrics_address", str, "127.0.0.1"),
        metrics_port=metrics_port,
        store_poll_seconds=r.seconds(srv, "server", "store_poll_seconds", 30.0, 1.0),
        predict_lane=r.get(srv, "server", "predict_lane", bool, True),
    )
    store = r.table(top.get("store", {}), "store")
    return Settings(
        server=server,
        store=Path(r.get(store, "store", "path", str, str(DEFAULT_STORE))),
        policy=_policy(r, r.table(top.get("policy", {}), "policy")),
        source=Path(path) if not str(path).startswith("<") else None,
        history=_history(r, r.table(top.get("history", {}), "history")),
        training=_training(r, r.table(top.get("training", {}), "training")),
        guard=_guard(r, r.table(top.get("guard", {}), "guard")),
        billing=_billing(r, r.table(top.get("billing", {}), "billing")),
        advice=_advice(r, r.table(top.get("advice", {}), "advice"), server.socket),
    )


def _advice(r: _Reader, a: Mapping[str, Any], submission_socket: Path) -> AdviceSettings:
    path = r.get(a, "advice", "socket", str, None)
    if path is not None and not path.strip():
        raise r.fail("advice.socket", "must be a path (leave the key out for no advice socket)")
    if path is not None and Path(path) == submission_socket:
        raise r.fail("advice.socket", "must not be server.socket: that one is SlurmUser's alone")
    raw = a.get("partition", [])
    if not isinstance(raw, list):
        raise r.fail("advice.partition", "must be an array of tables ([[advice.partition]])")
    memory: dict[str, float] = {}
    for i, item in enumerate(raw):
        t, key = r.table(item, "advice.partition"), f"advice.partition[{i}]"
        name = r.get(t, key, "name", str, "")
        if not name.strip():
            raise r.fail(f"{key}.name", "missing: the Slurm partition this describes")
        if name in memory:
            raise r.fail(f"{key}.name", f"partition {name!r} is listed twice")
        gb = r.get(t, key, "gpu_memory_gb", float, None)
        if gb is None or gb <= 0:
            raise r.fail(f"{key}.gpu_memory_gb", "must be a number of GB > 0 (one GPU's memory)")
        memory[name] = gb * 1e9
    return AdviceSettings(
        socket=None if path is None else Path(path),
        max_connections=_positive(
            r, "advice.max_connections", r.get(a, "advice", "max_connections", int, 64)
        ),
        gpu_memory_bytes=memory,
    )


def _billing(r: _Reader, b: Mapping[str, Any]) -> Prices:
    d = Prices()
    price = _price(r, "billing", r.get(b, "billing", "price", float, d.price))
    currency = r.get(b, "billing", "currency", str, d.currency)
    if not currency.strip():
        raise r.fail("billing.currency", 'must name what prices are in (e.g. "EUR", "SU")')
    mode_text = r.get(b, "billing", "mode", str, None)
    modes = [m.value for m in BillingMode]
    if mode_text is not None and mode_text not in modes:
        raise r.fail(
            "billing.mode",
            f"must be one of {', '.join(modes)} (or unset: Slurm's PriorityFlags); got {mode_text!r}",
        )
    raw = b.get("partition", [])
    if not isinstance(raw, list):
        raise r.fail("billing.partition", "must be an array of tables ([[billing.partition]])")
    partitions: list[PartitionPrice] = []
    for i, item in enumerate(raw):
        t, key = r.table(item, "billing.partition"), f"billing.partition[{i}]"
        name = r.get(t, key, "name", str, "")
        if not name.strip():
            raise r.fail(f"{key}.name", "missing: the Slurm partition this prices")
        if any(p.name == name for p in partitions):
            raise r.fail(f"{key}.name", f"partition {name!r} is listed twice")
        own_price = r.get(t, key, "price", float, None)
        weights = _weights(r, f"{key}.weights", r.get(t, key, "weights", str, None))
        if own_price is None and weights is None:
            raise r.fail(key, "needs a price and/or weights")
        own = None if own_price is None else _price(r, key, own_price)
        partitions.append(PartitionPrice(name=name, price=own, weights=weights))
    return Prices(
        price=price,
        currency=currency,
        mode=None if mode_text is None else BillingMode(mode_text),
        partitions=tuple(partitions),
    )


def _price(r: _Reader, section: str, value: float) -> float:
    if value < 0:
        raise r.fail(f"{section}.price", f"must be >= 0 (per billed unit-hour), got {value:g}")
    return value


def _weights(r: _Reader, key: str, text: str | None) -> Weights | None:
    if text is None:
        return None
    try:
        return parse_weights(text)
    except ValueError as exc:
        raise r.fail(key, str(exc)) from None


def _guard(r: _Reader, g: Mapping[str, Any]) -> GuardSettings:
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
    port = r.get(g, "guard", "metrics_port", int, None)
    if port is not None and not 0 <= port < 65536:
        raise r.fail("guard.metrics_port", f"out of range: {port}")
    extension = r.get(g, "guard", "extension", str, d.extension)
    if extension not in EXTENSIONS:
        raise r.fail("guard.extension", f"must be one of {', '.join(EXTENSIONS)}, got {extension!r}")
    return GuardSettings(
        heartbeat=Path(r.get(g, "guard", "heartbeat", str, str(d.heartbeat))),
        poll_seconds=poll,
        lead_seconds=lead,
        stale_seconds=stale,
        max_updates_per_poll=_positive(
            r,
            "guard.max_updates_per_poll",
            r.get(g, "guard", "max_updates_per_poll", int, d.max_updates_per_poll),
        ),
        metrics_address=r.get(g, "guard", "metrics_address", str, d.metrics_address),
        metrics_port=port,
        extension=extension,
    )


def _training(r: _Reader, tr: Mapping[str, Any]) -> TrainingSettings:
    d = TrainingSettings()  # the defaults, written once

    def get(key: str, kind: type) -> Any:
        return r.get(tr, "training", key, kind, getattr(d, key))

    def positive(key: str) -> int:
        return _positive(r, f"training.{key}", get(key, int))

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
        keep=positive("keep"),
        max_jobs=positive("max_jobs"),
        threads=positive("threads"),
        refit=_refit(r, tr),
        trees=positive("trees"),
        learning_rate=rate,
        ladder_rows=positive("ladder_rows"),
        calibrate_by=_calibrate_by(r, get("calibrate_by", str)),
    )


def _calibrate_by(r: _Reader, value: str) -> str:
    if value not in BY:
        raise r.fail("training.calibrate_by", f"must be one of {', '.join(BY)}; got {value!r}")
    return value


def _refit(r: _Reader, tr: Mapping[str, Any]) -> str:
    """A REFIT name; true (earlier versions' refit on every job) is "full", false "off"."""
    value = tr.get("refit", REFIT[0])
    if isinstance(value, bool):
        return REFIT[0] if value else "off"
    if value not in REFIT:
        raise r.fail("training.refit", f"must be one of {', '.join(REFIT)} (or true, false); got {value!r}")
    return str(value)


def _history(r: _Reader, hist: Mapping[str, Any]) -> HistorySettings:
    db = r.get(hist, "history", "db", str, None)
    if db is not None and not db.strip():
        raise r.fail("history.db", "must be a path (leave the key out for no history)")
    poll = r.seconds(hist, "history", "poll_seconds", 60.0, 0.1)
    return HistorySettings(
        db=None if db is None else Path(db),
        window_days=_positive(r, "history.window_days", r.get(hist, "history", "window_days", int, 30)),
        poll_seconds=poll,
        outcome_window_days=_positive(
            r, "history.outcome_window_days", r.get(hist, "history", "outcome_window_days", int, 7)
        ),
    )


def _policy(r: _Reader, pol: Mapping[str, Any]) -> Policy:
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
                partition=r.get(rule, key, "partition", str, None),
                account=r.get(rule, key, "account", str, None),
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
        opt_out_users=r.names(pol, "policy.opt_out_users"),
        opt_out_accounts=r.names(pol, "policy.opt_out_accounts"),
    )


def _positive(r: _Reader, key: str, value: int) -> int:
    if value < 1:
        raise r.fail(key, f"must be >= 1, got {value}")
    return value


def load(path: Path | str) -> Settings:
    """Read and validate ``path``; raise ConfigError naming the problem."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    return parse(data, p)
