"""The [advice] and [billing] sections: what users are told and what their jobs cost."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_harp.advice.billing import Mode as BillingMode
from slurm_harp.advice.billing import Weights, parse_weights
from slurm_harp.advice.gpu_memory import HEADROOM
from slurm_harp.advice.tariff import PartitionPrice, Prices
from slurm_harp.config.reader import Reader, positive
from slurm_harp.config.settings import AdviceSettings

# One GPU's memory in GB is below this (a petabyte; the Ansible role's preflight has the same
# bound): 1e300 passed, and its bytes were inf, where the docs say numbers are finite.
MOST_GPU_MEMORY_GB = 1e6
# Open advice connections at most: each is served by a thread of its own (server/advice_socket.py),
# so this bounds the threads users can make the daemon hold. 1e19 passed before.
MOST_CONNECTIONS = 4096
# A price per billed unit-hour, and a weight per unit of a TRES, is below this: the bound the Ansible
# role's preflight puts on prices. Real ones are below a thousand; 1e12 of each, times the most a job
# holds here (2**53 MB) and a year of hours, stays far inside a float, where 1e308 made every cost
# inf (and a price of 0 NaN).
MOST_PRICE = 1e12
MOST_WEIGHT = 1e12


def read_advice(r: Reader, a: Mapping[str, Any], submission_socket: Path) -> AdviceSettings:
    path = r.optional_path(a, "advice", "socket", " (leave the key out for no advice socket)")
    if path is not None and _same_file(path, submission_socket):
        raise r.fail(
            "advice.socket", f"must not be server.socket ({submission_socket}): that one is SlurmUser's alone"
        )
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
        if gb is None or not 0 < gb < MOST_GPU_MEMORY_GB:
            raise r.fail(
                f"{key}.gpu_memory_gb",
                f"must be a number of GB > 0 and below {MOST_GPU_MEMORY_GB:.0f} (one GPU's memory)",
            )
        memory[name] = gb * 1e9
    headroom = r.get(a, "advice", "gpu_memory_headroom", float, HEADROOM)
    if not 0.0 <= headroom < 1.0:
        raise r.fail(
            "advice.gpu_memory_headroom",
            f"must be a fraction of a GPU's memory, 0 to below 1; got {headroom:g}",
        )
    return AdviceSettings(
        socket=path,
        max_connections=_max_connections(r, a),
        gpu_memory_bytes=memory,
        gpu_memory_headroom=headroom,
    )


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: by their real paths, with every symbolic link (a
    /var/run that is /run) and ``..`` resolved. Their text alone let ``/var/run/x.sock`` pass for
    another file than ``/run/x.sock``: check-config said ok, and `harp serve` found its own
    submission socket on the advice socket's path and refused to start."""
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def _max_connections(r: Reader, a: Mapping[str, Any]) -> int:
    value = positive(r, "advice.max_connections", r.get(a, "advice", "max_connections", int, 64))
    if value > MOST_CONNECTIONS:
        raise r.fail("advice.max_connections", f"must be <= {MOST_CONNECTIONS}, got {value}")
    return value


def read_billing(r: Reader, b: Mapping[str, Any]) -> Prices:
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


def _price(r: Reader, section: str, value: float) -> float:
    if not 0 <= value < MOST_PRICE:
        why = f"must be >= 0 and below {MOST_PRICE:g} (per billed unit-hour), got {value:g}"
        raise r.fail(f"{section}.price", why)
    return value


def _weights(r: Reader, key: str, text: str | None) -> Weights | None:
    if text is None:
        return None
    try:
        weights = parse_weights(text)
    except ValueError as exc:
        raise r.fail(key, str(exc)) from None
    for name, weight in weights.per_unit.items():
        if weight >= MOST_WEIGHT:
            raise r.fail(key, f"the weight of {name} must be below {MOST_WEIGHT:g} a unit, got {weight:g}")
    return weights
