"""What each harp.toml section may hold, and the checked reads every section parser uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_harp.config.settings import ConfigError
from slurm_harp.core.policy import Mode

# The keys each section accepts; any other is refused by name (docs/configuration.md lists them
# all: tests/unit/test_docs.py).
SCHEMA: dict[str, set[str]] = {
    "": {"server", "store", "policy", "history", "training", "guard", "billing", "advice"},
    "advice": {"socket", "max_connections", "gpu_memory_headroom", "partition"},
    "advice.partition": {"name", "gpu_memory_gb"},
    "billing": {"price", "currency", "mode", "partition"},
    "billing.partition": {"name", "price", "weights"},
    "guard": {
        "heartbeat",
        "state",
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
# The longest period any key may give. Longer ones passed the checks and broke later: a wait past
# ~2.1e6 s overflows select()'s millisecond timeout (`harp guard` died after its first poll), one
# of 1e12 s threading's (the daemon's history thread died), and a guard.stale_seconds of 1e300 took
# a dead guard for alive for good. No site needs a poll, lead, grace or staleness beyond a day.
MOST_SECONDS = 86400.0
# TOML's integers: 64-bit signed.
INT64 = (-(2**63), 2**63 - 1)
# Sections that are arrays of tables ([[...]]): their keys are documented with the array.
ARRAY_TABLES = frozenset({"policy.rule", "billing.partition", "advice.partition"})


class Reader:
    """Checked reads from one file's sections: every error names the file and the key."""

    def __init__(self, path: Path | str) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {problem}")

    def table(self, data: Any, section: str) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail(section or "(top level)", "must be a table")
        allowed = SCHEMA[section]
        for key in data:
            if key not in allowed:
                where = f"{section}.{key}" if section else key
                raise self.fail(where, f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return data

    def get(self, data: Mapping[str, Any], section: str, key: str, kind: type, default: Any) -> Any:
        if key not in data:
            return default
        value = data[key]
        if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
            # tomllib reads integers of any size, TOML's are 64-bit: float() of one of 309 digits
            # or more raised OverflowError, a traceback in place of an error naming the key.
            raise self.fail(
                f"{section}.{key}",
                f"must be within TOML's 64-bit integers, got one of {len(str(abs(value)))} digits",
            )
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
        """A period in seconds, at least ``least`` (0 would make a poll loop spin) and at most
        MOST_SECONDS."""
        value = float(self.get(data, section, key, float, default))
        if value < least:
            raise self.fail(f"{section}.{key}", f"must be a number of seconds >= {least:g}, got {value:g}")
        if value > MOST_SECONDS:
            raise self.fail(
                f"{section}.{key}", f"must be a number of seconds <= {MOST_SECONDS:g} (a day), got {value:g}"
            )
        return value

    def path_value(self, data: Mapping[str, Any], section: str, key: str, default: Path) -> Path:
        """A path that must be there: Path("") is ".", the working directory, no file of harp's."""
        path = self.optional_path(data, section, key, "", str(default))
        assert path is not None  # a default was given
        return path

    def optional_path(
        self, data: Mapping[str, Any], section: str, key: str, without: str, default: str | None = None
    ) -> Path | None:
        """A path, or ``default`` when the key is left out (None: no path); ``without``: what leaving
        it out means, said when it is blank."""
        text = self.get(data, section, key, str, default)
        if text is None:
            return None
        if not text.strip():
            raise self.fail(f"{section}.{key}", f"must be a path{without}, got an empty string")
        if "\0" in text:  # TOML's "\u0000": every open() of it raised ValueError, a traceback at start
            raise self.fail(f"{section}.{key}", f"must be a path, got one holding a NUL character: {text!r}")
        if not Path(text).is_absolute():
            # Resolved against the working directory: check-config's where it is run, a service's /
            # under systemd (read-only under ProtectSystem=strict), so what was checked is not used.
            raise self.fail(
                f"{section}.{key}",
                f"must be an absolute path (a relative one would be found from the working directory, "
                f"/ for a service), got {text!r}",
            )
        return Path(text)

    def mode(self, value: Any, key: str) -> Mode:
        try:
            return Mode(value)
        except ValueError:
            modes = ", ".join(m.value for m in Mode)
            raise self.fail(key, f"mode must be one of {modes}; got {value!r}") from None

    def names(self, data: Mapping[str, Any], key: str, what: str) -> frozenset[str]:
        """A list of names, each one ``what`` (a user, an account) as one_name reads it."""
        value = data.get(key.rpartition(".")[2], [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"expected a list of names, got {value!r}")
        for i, name in enumerate(value):
            self.one_name(f"{key}[{i}]", name, what, "per entry: list each on its own:")
        return frozenset(value)

    def one_name(self, where: str, name: str, what: str, instead: str, blank: str = "") -> str:
        """``name`` as one ``what`` (a user, an account, a partition), matched exactly as a job's is:
        "a,b" (a job's `-p a,b` is matched partition by partition), "" or " a" passed and matched no
        job. ``instead``: how to give two names; ``blank``: what leaving the key out means."""
        article = "an" if what[0] in "aeio" else "a"  # an account, a partition, a user
        if "," in name:
            names = ", ".join(repr(n.strip()) for n in name.split(","))
            raise self.fail(where, f"one {what} {instead} {names}")
        if not name.strip():
            raise self.fail(where, f"must name {article} {what}, got {name!r}{blank}")
        if name != name.strip():
            raise self.fail(where, f"must be {article} {what}'s name without spaces around it, got {name!r}")
        return name


def positive(r: Reader, key: str, value: int) -> int:
    if value < 1:
        raise r.fail(key, f"must be >= 1, got {value}")
    return value
