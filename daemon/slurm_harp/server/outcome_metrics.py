"""Prediction accuracy in Prometheus, from the jobs that ran (evaluation/outcomes.py).

Recomputed from the job store every ``period_s`` over the jobs that ended within ``window_s``, so
the figures are gauges over a sliding window (a gauge histogram for the ratios), and a restart of
the daemon loses nothing. Labels are target, partition and model version only: never users or jobs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.request import Target
from slurm_harp.evaluation.outcomes import Key, Outcome, outcomes

LABELS = ("target", "partition", "version")
DAY_S = 86400


class OutcomeMetrics(Collector):
    def __init__(
        self,
        registry: CollectorRegistry,
        owner: Callable[[str], Target | None],
        *,
        window_s: float = 7 * DAY_S,
        period_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._owner = owner
        self.window_s = window_s
        self.period_s = period_s
        self._clock = clock
        self._figures: dict[Key, Outcome] = {}
        self._computed_at: float | None = None
        self._latest_end: int | None = None
        self._lock = threading.Lock()
        registry.register(self)

    def refresh(self, store: JobStore, force: bool = False) -> bool:
        """Recompute from ``store`` when ``period_s`` has passed (or ``force``); True if it did."""
        now = self._clock()
        if not force and self._computed_at is not None and now - self._computed_at < self.period_s:
            return False
        figures = outcomes(store.records(ended_since=int(now - self.window_s), tagged=True), self._owner)
        latest = store.latest_end()
        with self._lock:
            self._figures, self._computed_at, self._latest_end = figures, now, latest
        return True

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collect() is cheap: no need to run it at registration

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            figures, computed_at, latest = dict(self._figures), self._computed_at, self._latest_end
        ratio = GaugeHistogramMetricFamily(
            "harp_outcome_ratio",
            "Used / harp's value (prediction or limit) of the jobs that ended in the window.",
            labels=LABELS,
        )
        jobs = GaugeMetricFamily(
            "harp_outcome_jobs", "Jobs with a harp prediction that ended in the window.", labels=LABELS
        )
        under = GaugeMetricFamily(
            "harp_outcome_underpredicted_ratio",
            "Share of those jobs that used more than harp's value (UPP).",
            labels=LABELS,
        )
        killed = GaugeMetricFamily(
            "harp_outcome_killed_jobs",
            "Jobs that timed out at a time limit harp lowered, before their user's own limit.",
            labels=LABELS,
        )
        saved = GaugeMetricFamily(
            "harp_outcome_saved_core_seconds",
            "(User's limit - harp's limit) x CPUs, in core-seconds, of the jobs harp lowered that "
            "finished within its limit.",
            labels=LABELS,
        )
        for key, outcome in sorted(figures.items()):
            labels = list(key)
            ratio.add_metric(labels, outcome.cumulative(), outcome.ratio_sum)
            jobs.add_metric(labels, outcome.jobs)
            under.add_metric(labels, outcome.underpredicted_ratio)
            killed.add_metric(labels, outcome.killed)
            saved.add_metric(labels, outcome.saved_core_seconds)
        yield from (ratio, jobs, under, killed, saved)
        yield GaugeMetricFamily(
            "harp_outcome_window_seconds", "The window the outcome figures cover.", value=self.window_s
        )
        if computed_at is not None:
            yield GaugeMetricFamily(
                "harp_outcome_computed_timestamp_seconds",
                "When the outcome figures were last computed from the job store.",
                value=computed_at,
            )
        if latest is not None:
            yield GaugeMetricFamily(
                "harp_jobstore_latest_end_timestamp_seconds",
                "The latest end time of a harvested job: a harvest that stopped shows here.",
                value=latest,
            )
