"""Prediction accuracy in Prometheus, from the jobs that ran (evaluation/outcomes.py).

Recomputed from the job store every ``period_s`` over the jobs that ended within ``window_s``, so
the figures are gauges over a sliding window (a gauge histogram for the ratios), and a restart of
the daemon loses nothing. Labels are target, partition and model version only: never users or jobs.

The figures are kept per hour of end time. A refresh asks SQLite for a signature of each hour's
tagged rows within the window (count, sum of ingested_at, newest rowid) and reads again only the
hours whose rows were added, changed, deleted or left the window: the same figures as reading the
whole window, at the cost of what the harvester brought.

Each job is counted once (evaluation.outcomes_by_tag): the same job under two sources of the job
store ends in the same hour, both copies read together. The copies left out are said in one warning
when their number in the window changes, not at every refresh.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slurm_harp.accounting.jobstore import HOUR_S, JobStore
from slurm_harp.core.job_copies import say_copies
from slurm_harp.core.request import Target
from slurm_harp.evaluation.outcomes import Key, Outcome, TagKey, outcomes_by_tag, resolve

LABELS = ("target", "partition", "version")
DAY_S = 86400

# (signature, figures by tag, copies of a job left out)
_Hour = tuple[tuple[int, float, int], dict[TagKey, Outcome], int]


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
        self._hours: dict[int, _Hour] = {}  # by end_time // HOUR_S; only the refreshing thread
        self.hours_read = 0  # hours read from the store since start (how much refreshes cost)
        self._copies_said = 0  # the copies left out in the window when last said
        registry.register(self)

    def refresh(self, store: JobStore, force: bool = False) -> bool:
        """Recompute from ``store`` when ``period_s`` has passed (or ``force``); True if it did."""
        now = self._clock()
        if not force and self._computed_at is not None and now - self._computed_at < self.period_s:
            return False
        since = int(now - self.window_s)
        hours: dict[int, _Hour] = {}
        # The window's first hour counts from ``since``: its signature too, so rows leaving the
        # window change it like rows deleted.
        for hour, signature in sorted(store.tagged_hours(since).items()):
            kept = self._hours.get(hour)
            if kept is not None and kept[0] == signature:
                hours[hour] = kept
                continue
            start, end = max(since, hour * HOUR_S), (hour + 1) * HOUR_S
            rows = store.records(ended_since=start, ended_before=end, tagged=True)
            hours[hour] = (signature, *outcomes_by_tag(rows))
            self.hours_read += 1
        self._hours = hours
        copies = sum(again for _, _, again in hours.values())
        if copies != self._copies_said:
            say_copies(copies, "counted in the outcome metrics")
            self._copies_said = copies
        figures = resolve((part for _, part, _ in hours.values()), self._owner)
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
            "Jobs harp's limits stopped: timed out before their user's own limit at a time limit harp "
            "lowered or Slurm cut toward harp's time_min; out of memory under memory harp lowered.",
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
