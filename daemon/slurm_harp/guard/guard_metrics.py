"""Prometheus metrics of `harp guard`. The registry is passed in, never global."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Results of one extension attempt (the `result` label of harp_guard_extensions_total).
EXTENDED = "extended"  # the limit was raised (short of the user's request)
REACHED_REQUEST = "reached_request"  # the limit was raised to the user's own request
CAPPED = "capped"  # raised, but a site bound (reservation, MaxTime, MaxWall) stopped it short
REFUSED_BOUND = "refused_bound"  # a site bound left no room: not raised
GONE = "gone"  # the job ended between the listing and the update
FAILED = "failed"  # scontrol refused or failed
RESULTS = (EXTENDED, REACHED_REQUEST, CAPPED, REFUSED_BOUND, GONE, FAILED)

# Margin left at extension time: from a few seconds (a late guard) to hours.
MARGIN_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
POLL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GuardMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.extensions = Counter(
            "harp_guard_extensions",
            "Extension attempts on jobs harp shortened, by result.",
            ["result"],
            registry=registry,
        )
        for result in RESULTS:
            self.extensions.labels(result)
        self.margin = Histogram(
            "harp_guard_extension_margin_seconds",
            "Time a job had left before its limit when the guard extended it.",
            buckets=MARGIN_BUCKETS,
            registry=registry,
        )
        self.polls = Counter(
            "harp_guard_polls",
            (
                "Polls of the running jobs, by result: ok, failed (no listing, every extension failed,"
                " or the heartbeat not written)."
            ),
            ["result"],
            registry=registry,
        )
        self.poll_duration = Histogram(
            "harp_guard_poll_duration_seconds",
            "Time one poll took: listing, deciding and extending.",
            buckets=POLL_BUCKETS,
            registry=registry,
        )
        self.shortened = Gauge(
            "harp_guard_shortened_jobs",
            "Running jobs whose limit is below their user's own request (harp may still extend them).",
            registry=registry,
        )
        self.history_jobs = Gauge(
            "harp_guard_extension_history_jobs",
            "Ended jobs the conditional extension learns from (0: Tsafrir's steps only).",
            registry=registry,
        )
        self.poll_period = Gauge(
            "harp_guard_poll_period_seconds",
            "The time between two polls ([guard] poll_seconds): how old the last good poll may be.",
            registry=registry,
        )
        self.update_seconds = Gauge(
            "harp_guard_update_seconds",
            "Time one scontrol update takes (a moving mean): under a backlog, jobs fall due earlier by it.",
            registry=registry,
        )
        self.last_success = Gauge(
            "harp_guard_last_success_timestamp_seconds",
            "Unix time of the last good poll (the heartbeat refreshed).",
            registry=registry,
        )
