"""The daemon's settings: one frozen dataclass per harp.toml section, with their defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurm_harp.advice.gpu_memory import HEADROOM
from slurm_harp.advice.tariff import Prices
from slurm_harp.core.extension import DEFAULT_LEAD_S
from slurm_harp.core.policy import Policy

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
    # Predict answered in grpcio's polling thread instead of the worker pool (server.unary_lane).
    predict_lane: bool = True


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """Where the daemon reads job history from: the harvester's job store (None = no history)."""

    db: Path | None = None
    window_days: int = 30  # how far back to seed; history features look back HORIZON_DAYS
    poll_seconds: float = 60.0
    outcome_window_days: int = 7  # the accuracy figures cover the jobs that ended this recently


# The most trees and threads a training takes, in harp.toml as on the command line: a slip (1e18
# trees, 1e11 threads) ran for ever or ended in libgomp's out-of-memory abort.
MAX_TREES = 100_000
MAX_THREADS = 256


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
    # What the guard saw of its jobs' limits, for a restarted guard (guard.seen_file): it must outlive
    # the guard, unlike the heartbeat's runtime directory.
    state: Path = Path("/var/lib/slurm-harp-guard/limits.json")
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
    # open advice connections at most; a user has at most a quarter, and when all are taken a user
    # holding fewer than another takes that one's longest-idle connection (server/relay_slots.py)
    max_connections: int = 64
    # partition -> one GPU's memory in bytes, for the ZeRO check ([[advice.partition]] gpu_memory_gb)
    gpu_memory_bytes: Mapping[str, float] = field(default_factory=dict)
    # the part of each GPU's memory a training's model states may not take (advice/gpu_memory.py)
    gpu_memory_headroom: float = HEADROOM


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
