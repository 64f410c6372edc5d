"""The daemon's TOML configuration, validated once into a frozen Settings object.

Every error names the offending key and the file, so a sysadmin can fix it without reading code.
The settings and their defaults are in ``settings``, what each section may hold and the checked
reads in ``reader``, each section's parser in ``sections`` and ``advice``, the TCP endpoints (their
addresses, and no two on one port) in ``endpoints``, the guard's lead against the shortest limit harp
sets in ``guard_lead``; what only the host can check (the socket's group exists) in ``host``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_harp.config.advice import read_advice, read_billing
from slurm_harp.config.endpoints import check_ports
from slurm_harp.config.guard_lead import check_guard_lead
from slurm_harp.config.host import check_host, socket_gid
from slurm_harp.config.reader import ARRAY_TABLES, SCHEMA, Reader
from slurm_harp.config.sections import (
    read_guard,
    read_history,
    read_policy,
    read_server,
    read_training,
)
from slurm_harp.config.settings import (
    DEFAULT_ADVICE_SOCKET,
    DEFAULT_PATH,
    DEFAULT_SOCKET,
    DEFAULT_STORE,
    REFIT,
    AdviceSettings,
    ConfigError,
    GuardSettings,
    HistorySettings,
    ServerSettings,
    Settings,
    TrainingSettings,
)
from slurm_harp.regular_file import read_regular

__all__ = [
    "ARRAY_TABLES",
    "DEFAULT_ADVICE_SOCKET",
    "DEFAULT_PATH",
    "DEFAULT_SOCKET",
    "DEFAULT_STORE",
    "REFIT",
    "SCHEMA",
    "AdviceSettings",
    "ConfigError",
    "GuardSettings",
    "HistorySettings",
    "ServerSettings",
    "Settings",
    "TrainingSettings",
    "check_host",
    "load",
    "parse",
    "socket_gid",
]


def parse(data: Mapping[str, Any], path: Path | str = "<config>") -> Settings:
    r = Reader(path)
    top = r.table(data, "")
    server = read_server(r, r.table(top.get("server", {}), "server"))
    store = r.table(top.get("store", {}), "store")
    settings = Settings(
        server=server,
        store=r.path_value(store, "store", "path", DEFAULT_STORE),
        policy=read_policy(r, r.table(top.get("policy", {}), "policy")),
        source=Path(path) if not str(path).startswith("<") else None,
        history=read_history(r, r.table(top.get("history", {}), "history")),
        training=read_training(r, r.table(top.get("training", {}), "training")),
        guard=read_guard(r, r.table(top.get("guard", {}), "guard")),
        billing=read_billing(r, r.table(top.get("billing", {}), "billing")),
        advice=read_advice(r, r.table(top.get("advice", {}), "advice"), server.socket),
    )
    check_ports(r, settings)
    check_guard_lead(r, settings)
    return settings


def load(path: Path | str) -> Settings:
    """Read and validate ``path``; raise ConfigError naming the problem."""
    p = Path(path)
    try:
        text = read_regular(p).decode()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except OSError as exc:  # a FIFO, a directory or a device, no permission, an I/O error
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{p}: not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
        ) from None
    if text.startswith("\ufeff"):  # tomllib's "Invalid statement (at line 1, column 1)" named no BOM
        raise ConfigError(
            f"{p}: begins with a byte order mark (BOM, the bytes ef bb bf), which TOML does not allow: "
            "save it as UTF-8 without a BOM"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    except ValueError as exc:  # an integer of more than sys.int_info's 4300 digits: no TOMLDecodeError
        raise ConfigError(f"{p}: not valid TOML: {str(exc).partition(';')[0]}") from None
    except RecursionError:  # tomllib recurses per nested array or inline table: no TOMLDecodeError
        raise ConfigError(
            f"{p}: nested too deeply to read (arrays or inline tables within each other)"
        ) from None
    return parse(data, p)
