"""The one feature map, used by training and by the daemon: JobRequest (+ history) -> float32 row.

A row is the request's own features (REQUEST_FEATURE_NAMES), the causal history features of
core/history.py (HISTORY_FEATURE_NAMES: training passes history_matrix(records), the daemon a
HistoryIndex row; without history those columns are NaN), then the request against that history
(DERIVED_FEATURE_NAMES): log(request / recent use) of the same user+name or user. A tree splits
on one column at a time, so "asks far more than this job name ever ran" is one split on a
derived column, and a staircase of splits on the two columns apart.
Only what is known at submit time goes in. NaN marks a value the user did not give, except
GPUs and the array flag, where "not given" means none / not an array (0), as Slurm reads it, and
the node count, where it means one node, as accounting records it (ReqNodes=1), and the time
limit, where it means the partition's default the request carries (default_time_limit_minutes), as
accounting records it (Timelimit), and the memory, where it means the default slurmctld gives the job
(default_mem_per_cpu_mb, default_mem_per_node_mb) and for all of a node's (--mem=0, or no default)
that node's memory (node_mem_mb), as accounting records it (ReqMem); a GPU count no
request can hold is unknown (NaN), like a negative
size.
Counts and sizes are log1p-scaled (trees do not care; it keeps later linear models sane).
Hour of day and day of week (Monday = 0) are in UTC: the daemon and the traces agree on UTC,
and a site's local offset is a constant shift that trees absorb.
Categorical values (user, account, ...) are hashed with CRC-32 into [0, 1): stable across
processes, machines and Python versions, unlike hash(); no vocabulary needs to be saved.
"""

from __future__ import annotations

import logging
import math
import re
import zlib
from collections.abc import Sequence

import numpy as np

from slurm_harp.core.history import HISTORY_FEATURE_NAMES
from slurm_harp.core.key_history import rounded
from slurm_harp.core.request import JobRequest

REQUEST_FEATURE_NAMES: tuple[str, ...] = (
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
# (name, request column, history column): log1p(request) - log1p(use) of the same resource.
_DERIVED: tuple[tuple[str, str, str], ...] = (
    ("limit_over_name_log_max_s", "log_time_limit_min", "h30d_name_log_max_s"),
    ("limit_over_name_log_median_s", "log_time_limit_min", "h30d_name_log_median_s"),
    ("limit_over_name_log_last_s", "log_time_limit_min", "h30d_name_log_last_s"),
    ("limit_over_user_log_max_s", "log_time_limit_min", "h30d_user_log_max_s"),
    ("limit_over_user_log_median_s", "log_time_limit_min", "h30d_user_log_median_s"),
    ("mem_over_name_log_max_mb", "log_mem_per_node_mb", "h30d_name_log_max_mem_mb"),
    ("mem_over_user_log_last_mb", "log_mem_per_node_mb", "h30d_user_log_last_mem_mb"),
    ("cpus_over_name_log_last", "log_cpus", "h30d_name_log_last_cpus"),
    ("cpus_over_user_log_last", "log_cpus", "h30d_user_log_last_cpus"),
)
DERIVED_FEATURE_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _DERIVED)
FEATURE_NAMES: tuple[str, ...] = REQUEST_FEATURE_NAMES + HISTORY_FEATURE_NAMES + DERIVED_FEATURE_NAMES
_R = len(REQUEST_FEATURE_NAMES)
_H = len(HISTORY_FEATURE_NAMES)
_NAN_HISTORY = [math.nan] * _H
# The time limit is in minutes, the history in seconds: derived() converts it once per row.
_LIMIT = REQUEST_FEATURE_NAMES.index("log_time_limit_min")
# Per derived column: (request column, history column); _LIMIT stands for the limit in seconds.
_SPEC = tuple(
    (REQUEST_FEATURE_NAMES.index(own), HISTORY_FEATURE_NAMES.index(past)) for _, own, past in _DERIVED
)

log = logging.getLogger(__name__)

_NAN = math.nan
_HASH_SCALE = 1.0 / 2**32
# "gres/gpu:2", "gres/gpu:a100:2", "gres:gpu:2" (older spelling) in a TRES-per-node string.
_GPU_TRES = re.compile(r"gres[/:]gpu(?::[^,:=]+)?[:=](\d+)")
# The most GPUs a request can hold: gpus_per_node is a uint32 in harp.v1. A longer digit string in
# tres_per_node is not converted (float() of hundreds of digits overflows, int() of thousands raises).
_MAX_GPUS = 2**32 - 1
_MAX_GPU_DIGITS = len(str(_MAX_GPUS))


def _hash(value: str | None) -> float:
    return _NAN if value is None else zlib.crc32(value.encode("utf-8")) * _HASH_SCALE


def _log(value: int | None) -> float:
    return _NAN if value is None or value < 0 else math.log1p(value)


def _gpus(request: JobRequest) -> float:
    gpus = request.gpus_per_node
    if gpus is not None:
        return float(gpus) if 0 <= gpus <= _MAX_GPUS else _unknown_gpus("gpus_per_node")
    tres = request.tres_per_node
    if not tres:
        return 0.0
    counts = _GPU_TRES.findall(tres)
    if any(len(n.lstrip("0")) > _MAX_GPU_DIGITS for n in counts):
        return _unknown_gpus("tres_per_node")
    total = sum(int(n) for n in counts)
    return float(total) if total <= _MAX_GPUS else _unknown_gpus("tres_per_node")


def _unknown_gpus(field: str) -> float:
    """A GPU count no request can hold: unknown, logged naming the request's field (and not the
    model, which would be blamed for the overflow otherwise)."""
    log.warning("%s: GPU count out of range (0 to %d); read as unknown", field, _MAX_GPUS)
    return _NAN


def _nodes(request: JobRequest) -> int | None:
    """The node count, a missing (or 0) one read as 1 node, as JobRequest.requested reads it: sbatch
    without -N sends none, and accounting records ReqNodes=1 for such a job (training's records from
    sacct always have one: ReqNodes, else NNodes). A negative count stays unknown."""
    return request.min_nodes or 1


def _mem_per_node(request: JobRequest) -> float:
    """The memory per node the job asks, else the default slurmctld gives it, and for all of a node's
    (a 0) that node's memory: what accounting records as its ReqMem (training's requests have it)."""
    if request.asks_memory:
        per_node, per_cpu = request.mem_per_node_mb, request.mem_per_cpu_mb
    else:
        per_node, per_cpu = request.default_mem_per_node_mb, request.default_mem_per_cpu_mb
    if per_node == 0 or per_cpu == 0:
        per_node, per_cpu = request.node_mem_mb, None
    if per_node is not None:
        return math.log1p(per_node) if per_node >= 0 else _NAN
    if per_cpu is not None and request.min_cpus is not None:
        nodes = request.min_nodes if request.min_nodes and request.min_nodes > 0 else 1
        return math.log1p(max(per_cpu * request.min_cpus / nodes, 0.0))
    return _NAN


def row(request: JobRequest) -> list[float]:
    """One request's own features, in REQUEST_FEATURE_NAMES order."""
    submit = request.submit_time
    user = request.user_key
    return [
        _log(request.effective_time_limit_minutes),
        _log(request.time_min_minutes),
        _log(request.min_cpus),
        _log(_nodes(request)),
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


def derived(own: Sequence[float], history: Sequence[float]) -> list[float]:
    """The DERIVED_FEATURE_NAMES values of one row from its request and history columns as stored
    (float32 values), NaN where either side is (or the difference is not finite). Plain Python:
    one path for training and serving, a few µs per row."""
    limit_s = math.log1p(math.expm1(own[_LIMIT]) * 60.0)
    out = []
    for at, of in _SPEC:
        difference = (limit_s if at == _LIMIT else own[at]) - history[of]
        # On the history's 1/1024 grid (key_history.rounded): exact in float32, as tree splits need.
        out.append(rounded(difference) if math.isfinite(difference) else _NAN)
    return out


def vectorize(requests: Sequence[JobRequest], history: np.ndarray | None = None) -> np.ndarray:
    """Features of ``requests`` as a float32 array of shape (n, len(FEATURE_NAMES)).

    ``history`` is the (n, len(HISTORY_FEATURE_NAMES)) history of the same requests, row for row
    (history.history_matrix or HistoryIndex.row); None leaves the history (and derived) columns NaN."""
    n = len(requests)
    if history is not None and history.shape != (n, _H):
        raise ValueError(f"history has shape {history.shape}, expected {(n, _H)}")
    out = np.empty((n, len(FEATURE_NAMES)), dtype=np.float32)
    out[:, _R : _R + _H] = np.nan if history is None else history
    for i, request in enumerate(requests):
        out[i, :_R] = row(request)
        past = _NAN_HISTORY if history is None else history[i].tolist()
        out[i, _R + _H :] = derived(out[i, :_R].tolist(), past)
    return out
