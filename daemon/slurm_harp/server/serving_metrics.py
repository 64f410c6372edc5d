"""Prometheus metrics of the serving path. The registry is passed in, never global."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from slurm_harp.core.decision import Decision

# Serving is sub-millisecond: the client's default buckets (5 ms .. 10 s) would put everything in one.
LATENCY_BUCKETS = (5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 5e-2, 0.25, 1.0)


class ServingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.latency = Histogram(
            "harp_predict_duration_seconds",
            "Time to answer one Predict call inside the daemon.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.decisions = Counter(
            "harp_decisions",
            "Per-target outcomes of Predict calls.",
            ["target", "action", "reason", "mode"],
            registry=registry,
        )
        self._decision_children: dict[tuple[str, str, str, str], Counter] = {}
        self.bad_requests = Counter(
            "harp_bad_requests",
            "Predict calls whose request could not be read (answered with no action).",
            registry=registry,
        )
        self.failures = Counter(
            "harp_predict_failures",
            "Predict calls that raised inside the daemon (answered with no action).",
            registry=registry,
        )
        self.model_info = Gauge(
            "harp_model_info",
            "Serving model version per target (value is always 1).",
            ["target", "version"],
            registry=registry,
        )
        self.model_created = Gauge(
            "harp_model_created_timestamp_seconds",
            "When the serving model version per target was trained (its card's created time).",
            ["target", "version"],
            registry=registry,
        )
        self.kill_budget = Gauge(
            "harp_model_kill_budget_ratio",
            "The share of jobs the serving model's rule was calibrated to newly kill at most, per "
            "target (its card's calibration.kill_budget: training.kill_budget when it was trained).",
            ["target", "version"],
            registry=registry,
        )
        self.reloads = Counter(
            "harp_model_reloads",
            "Model load attempts by result (loaded, rejected).",
            ["target", "result"],
            registry=registry,
        )

    def observe(self, decision: Decision) -> None:
        for t in decision.targets:
            # The enums are StrEnums: strings already (Enum.value is a slow descriptor).
            key = (t.target, t.action, t.reason, decision.mode)
            # .labels() validates and locks on every call; the label sets are few and never cleared.
            child = self._decision_children.get(key)
            if child is None:
                child = self._decision_children[key] = self.decisions.labels(*key)
            child.inc()

    def serving(
        self,
        versions: dict[str, str],
        created: dict[str, float] | None = None,
        budgets: dict[str, float] | None = None,
    ) -> None:
        """The versions now serving per target, when each was trained and its kill budget (where
        its card says)."""
        for gauge in (self.model_info, self.model_created, self.kill_budget):
            gauge.clear()
        for target, version in versions.items():
            self.model_info.labels(target, version).set(1)
            if created and target in created:
                self.model_created.labels(target, version).set(created[target])
            if budgets and target in budgets:
                self.kill_budget.labels(target, version).set(budgets[target])
