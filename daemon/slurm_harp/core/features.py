"""The one feature map, used by training and by the daemon: JobRequest -> float32 row.

Only what is known at submit time goes in. NaN marks a value the user did not give, except
GPUs and the array flag, where "not given" means none / not an array (0), as Slurm reads it.
Counts and sizes are log1p-scaled (trees do not care; it keeps later linear models sane).
Hour of day and day of week (Monday = 0) are in UTC: the daemon and the traces agree on UTC,
and a site's local offset is a constant shift that trees absorb.
Categorical values (user, account, ...) are hashed with CRC-32 into [0, 1): stable across
processes, machines and Python versions, unlike hash(); no vocabulary needs to be saved.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence

import numpy as np

from slurm_harp.core.request import JobRequest

FEATURE_NAMES: tuple[str, ...] = (
    "log_time_limit_min",
    "log_time_min_min",
    "log_cpus",
    "log_nodes",
    "log_tasks",
    "log_cpus_per_task",
    "log_mem_per_node_mb",
    "gpus_per_node",
    "is_array",
    "submit_hour_utc",
    "submit_dow_utc",
    "hash_user",
    "hash_account",
    "hash_partition",
    "hash_qos",
    "hash_job_name",
    "hash_work_dir",
    "hash_script_signature",
)

_NAN = math.nan
_HASH_SCALE = 1.0 / 2**32
# "gres/gpu:2", "gres/gpu:a100:2", "gres:gpu:2" (older spelling) in a TRES-per-node string.
_GPU_TRES = re.compile(r"gres[/:]gpu(?::[^,:=]+)?[:=](\d+)")


def stable_hash(value: str) -> float:
    """CRC-32 of the UTF-8 bytes, scaled into [0, 1)."""
    return zlib.crc32(value.encode("utf-8")) * _HASH_SCALE


def _hash(value: str | None) -> float:
    return _NAN if value is None else zlib.crc32(value.encode("utf-8")) * _HASH_SCALE


def _log(value: int | None) -> float:
    return _NAN if value is None or value < 0 else math.log1p(value)


def _gpus(request: JobRequest) -> float:
    if request.gpus_per_node is not None:
        return float(request.gpus_per_node)
    tres = request.tres_per_node
    if tres:
        return float(sum(int(n) for n in _GPU_TRES.findall(tres)))
    return 0.0


def _mem_per_node(request: JobRequest) -> float:
    if request.mem_per_node_mb is not None:
        return math.log1p(request.mem_per_node_mb) if request.mem_per_node_mb >= 0 else _NAN
    if request.mem_per_cpu_mb is not None and request.min_cpus is not None:
        nodes = request.min_nodes if request.min_nodes and request.min_nodes > 0 else 1
        return math.log1p(max(request.mem_per_cpu_mb * request.min_cpus / nodes, 0.0))
    return _NAN


def row(request: JobRequest) -> list[float]:
    """One request's features, in FEATURE_NAMES order."""
    submit = request.submit_time
    user = request.user_name
    if user is None and request.user_id is not None:
        user = str(request.user_id)
    return [
        _log(request.time_limit_minutes),
        _log(request.time_min_minutes),
        _log(request.min_cpus),
        _log(request.min_nodes),
        _log(request.num_tasks),
        _log(request.cpus_per_task),
        _mem_per_node(request),
        _gpus(request),
        1.0 if request.is_array else 0.0,
        _NAN if submit is None else float((submit // 3600) % 24),
        _NAN if submit is None else float((submit // 86400 + 3) % 7),  # 1970-01-01 was a Thursday
        _hash(user),
        _hash(request.account),
        _hash(request.partition),
        _hash(request.qos),
        _hash(request.job_name),
        _hash(request.work_dir),
        _hash(request.script_signature),
    ]


def vectorize(requests: Sequence[JobRequest]) -> np.ndarray:
    """Features of ``requests`` as a float32 array of shape (n, len(FEATURE_NAMES))."""
    if len(requests) == 1:
        return np.array([row(requests[0])], dtype=np.float32)
    out = np.empty((len(requests), len(FEATURE_NAMES)), dtype=np.float32)
    for i, request in enumerate(requests):
        out[i] = row(request)
    return out
