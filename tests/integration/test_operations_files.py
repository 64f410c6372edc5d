"""deploy/prometheus and deploy/grafana against the metrics the code exports: promtool checks and
unit-tests the alert rules and lints the exposition, every metric the rules and the dashboard
name is one the daemon or the guard exports, and docs/install.md lists the daemon's, as exported."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.decision import Action, Reason
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.guard.guard_metrics import GuardMetrics
from slurm_harp.server.outcome_metrics import OutcomeMetrics
from slurm_harp.server.serving_metrics import ServingMetrics
from tests.conftest import REPO, required_tool

RULES = REPO / "deploy" / "prometheus" / "harp-alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "slurm-harp.json"
NAME = re.compile(r"\b(harp_[a-z_]+)")


def promtool() -> str:
    return required_tool("promtool", "prometheus")


def registries(tmp_path: Path) -> dict[str, CollectorRegistry]:
    """The daemon's and the guard's metrics, with every family filled in."""
    daemon = CollectorRegistry()
    serving = ServingMetrics(daemon)
    serving.latency.observe(0.001)
    serving.bad_requests.inc()
    serving.failures.inc()
    serving.decisions.labels("time", "annotate", "shadow", "shadow").inc()
    serving.reloads.labels("time", "loaded").inc()
    serving.serving({"time": "v1"}, {"time": 1.7e9}, {"time": 0.01})
    outcome = OutcomeMetrics(daemon, lambda _: Target.TIME)
    with JobStore(tmp_path / "jobs.sqlite") as store:
        tag = "harp:rewrite,t!=60,t0=600,v=v1"
        now = int(__import__("time").time())
        request = JobRequest(partition="batch", min_cpus=2, submit_time=now - 600)
        store.upsert([JobRecord("1", request, "COMPLETED", 1800, end_time=now - 60, harp_tag=tag)], "sacct")
        assert outcome.refresh(store, force=True)
    guard = CollectorRegistry()
    metrics = GuardMetrics(guard)
    metrics.margin.observe(60)
    metrics.polls.labels("ok").inc()
    metrics.poll_duration.observe(0.1)
    metrics.shortened.set(1)
    metrics.last_success.set(1.7e9)
    return {"daemon": daemon, "guard": guard}


def expositions(tmp_path: Path) -> dict[str, bytes]:
    """What the daemon's and the guard's /metrics serve, with every family filled in."""
    return {name: generate_latest(registry) for name, registry in registries(tmp_path).items()}


def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    tool = promtool()
    for argv in (["check", "rules", RULES.name], ["test", "rules", "harp-alerts.test.yml"]):
        done = subprocess.run([tool, *argv], cwd=RULES.parent, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout


def test_the_exposition_passes_promtool_check_metrics(tmp_path: Path) -> None:
    tool = promtool()
    for name, text in expositions(tmp_path).items():
        done = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, timeout=60)
        assert done.returncode == 0 and not done.stdout.strip(), (name, done.stdout + done.stderr)


def test_rules_and_dashboard_name_only_exported_metrics(tmp_path: Path) -> None:
    exported = {m for text in expositions(tmp_path).values() for m in NAME.findall(text.decode())}
    assert "harp_outcome_ratio_bucket" in exported and "harp_outcome_jobs" in exported
    in_rules = set(NAME.findall(RULES.read_text()))
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    in_dashboard = {m for e in exprs for m in NAME.findall(e)}
    assert in_rules - exported == set(), "alert rules name metrics nobody exports"
    assert in_dashboard - exported == set(), "the dashboard names metrics nobody exports"
    assert len(dashboard["panels"]) >= 8 and all(p["targets"] for p in dashboard["panels"])


# The outcome gauges as the primary and the backup controller both export them: each harvests the
# same jobs, but names their model versions by its own store (a version it did not publish, the
# other controller's, is "unknown"). Each dashboard query of them must count every job once.
VERSIONS = {"ctl1": "20261206T031207.123456Z", "ctl2": "unknown"}
OUTCOMES = {
    'harp_outcome_jobs{target="time",partition="batch"}': 200,
    'harp_outcome_killed_jobs{target="time",partition="batch"}': 3,
    'harp_outcome_underpredicted_ratio{target="time",partition="batch"}': 0.05,
    'harp_outcome_saved_core_seconds{target="time",partition="batch"}': 7200,
    'harp_outcome_ratio_bucket{target="time",partition="batch",le="0.5"}': 100,
    'harp_outcome_ratio_bucket{target="time",partition="batch",le="1.0"}': 180,
    'harp_outcome_ratio_bucket{target="time",partition="batch",le="+Inf"}': 200,
    # Rewrite mode lowers memory too: its kills, out of memory, count against its own budget.
    'harp_outcome_jobs{target="memory",partition="batch"}': 100,
    'harp_outcome_killed_jobs{target="memory",partition="batch"}': 30,
    'harp_outcome_underpredicted_ratio{target="memory",partition="batch"}': 0.4,
    'harp_outcome_saved_core_seconds{target="memory",partition="batch"}': 0,
    'harp_outcome_ratio_bucket{target="memory",partition="batch",le="0.5"}': 20,
    'harp_outcome_ratio_bucket{target="memory",partition="batch",le="1.0"}': 60,
    'harp_outcome_ratio_bucket{target="memory",partition="batch",le="+Inf"}': 100,
    # The serving time model's own budget, which the recording rule takes over the 1 % default; no
    # memory model exports one, so memory's is the default.
    'harp_model_kill_budget_ratio{target="time"}': 0.02,
}
SHOWN = {  # (panel, legend): [(labels, value)]
    ("Accuracy: used / predicted (median, 90th percentile)", "{{target}} median"): [
        ('{target="time"}', 0.5),
        ('{target="memory"}', 0.875),
    ],
    ("Accuracy: used / predicted (median, 90th percentile)", "{{target}} p90"): [
        ('{target="time"}', 1.0),
        ('{target="memory"}', 1.0),
    ],
    ("Under-predicted jobs (UPP)", "{{target}}"): [('{target="time"}', 0.05), ('{target="memory"}', 0.4)],
    ("Jobs killed by harp vs the kill budget", "{{target}} {{partition}}"): [
        ('{target="time",partition="batch"}', 0.015),
        ('{target="memory",partition="batch"}', 0.3),
    ],
    ("Jobs killed by harp vs the kill budget", "{{target}} budget"): [
        ('harp:kill_budget:ratio{target="time"}', 0.02),
        ('harp:kill_budget:ratio{target="memory"}', 0.01),
    ],
    ("Core-hours taken off reservations", "{{partition}}"): [('{partition="batch"}', 2.0)],
}


def test_the_dashboard_counts_each_job_once_across_the_two_controllers(tmp_path: Path) -> None:
    """Real Prometheus (promtool) evaluates the dashboard's outcome queries over both controllers'
    series, each under its own version names; the kill budget comes from the alert rules'
    recording rule, its one home, which takes the serving model's exported budget per target."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = {
        (p["title"], t["legendFormat"]): t["expr"]
        for p in dashboard["panels"]
        for t in p["targets"]
        if "harp_outcome_" in t["expr"] or "kill_budget" in t["expr"]
    }
    assert set(queries) == set(SHOWN)
    series = [
        {
            "series": name.replace("{", f'{{job="slurm-harp",instance="{host}:9817",version="{version}",', 1),
            "values": f"{value}x10",
        }
        for name, value in OUTCOMES.items()
        for host, version in VERSIONS.items()
    ]
    exprs: list[dict[str, object]] = [
        {
            "expr": queries[key].replace("$partition", ".*"),
            "eval_time": "5m",
            "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
        }
        for key, samples in SHOWN.items()
    ]
    _promtool_exprs(tmp_path, series, exprs)


def _promtool_exprs(tmp_path: Path, series: list[dict[str, str]], exprs: list[dict[str, object]]) -> None:
    """promtool (real Prometheus) evaluates ``exprs`` (promql_expr_test items) over ``series``."""
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": exprs}],
    }
    (tmp_path / "dashboard.test.yml").write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [promtool(), "test", "rules", "dashboard.test.yml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_the_decisions_panel_shows_each_target_at_the_submission_rate(tmp_path: Path) -> None:
    """One submission is one decision per target: summed over the targets, the panel showed three
    times the submissions per second. One submission a second, every target annotated in shadow."""
    dashboard = json.loads(DASHBOARD.read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"].startswith("Decisions by")]
    (query,) = panel["targets"]
    assert panel["fieldConfig"]["defaults"]["unit"] == "reqps"
    assert "{{target}}" in query["legendFormat"]
    labels = 'action="annotate",reason="shadow",mode="shadow"'
    series = [
        {"series": f'harp_decisions_total{{job="slurm-harp",instance="ctl1:9817",target="{t}",{labels}}}',
         "values": "0+60x20"}
        for t in ("time", "memory", "cpus")
    ]  # fmt: skip
    shown = [
        {"labels": f'{{target="{t}",action="annotate",reason="shadow"}}', "value": 1}
        for t in ("cpus", "memory", "time")
    ]
    _promtool_exprs(tmp_path, series, [{"expr": query["expr"], "eval_time": "15m", "exp_samples": shown}])


def documented_metrics(text: str) -> dict[str, set[str] | None]:
    """The metrics of the tables of a document: name -> its labels where the row gives them."""
    found: dict[str, set[str] | None] = {}
    for row in re.findall(r"^\| (`harp_.*?) \|", text, re.M):
        for name, labels in re.findall(r"`(harp_[a-z_]+)(?:\{([a-z_,]+)\})?`", row):
            found[name] = set(labels.split(",")) if labels else None
    return found


def test_the_install_guide_documents_every_daemon_metric_as_exported(tmp_path: Path) -> None:
    """docs/install.md's metric tables are the daemon's /metrics: each family, its labels, the
    label values and the outcome gauges' labels the prose names."""
    text = (REPO / "docs" / "install.md").read_text()
    documented = documented_metrics(text)
    exported: dict[str, set[str]] = {}
    for family in registries(tmp_path)["daemon"].collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        exported[name] = {k for s in family.samples for k in s.labels if k != "le"}
    assert set(documented) == set(exported), "docs/install.md and the daemon's metrics differ"
    for name, labels in documented.items():
        assert labels is None or labels == exported[name], name
    unlabelled = {n for n, labels in documented.items() if labels is None and exported[n]}
    per = re.search(r"per `(\w+)`, `(\w+)` and model `(\w+)` \(never per user or job\)", text)
    assert per, "docs/install.md no longer says what the outcome gauges are per"
    assert unlabelled and all(n.startswith("harp_outcome_") for n in unlabelled)
    assert all(exported[n] == set(per.groups()) for n in unlabelled)
    actions = re.search(r"`action` ([a-z_, ]+);", text)
    assert actions and set(actions.group(1).split(", ")) == {a.value for a in Action}
    reasons = re.search(r"`reason` why a target was left alone \(([a-z_, ]+), \.\.\.\)", text)
    assert reasons and set(reasons.group(1).split(", ")) <= {r.value for r in Reason}


def documented_scrape_configs() -> list[dict[str, Any]]:
    """The scrape jobs docs/install.md gives ("Scraping": its one YAML block with scrape_configs)."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", (REPO / "docs" / "install.md").read_text(), re.S | re.M)
    (config,) = [yaml.safe_load(b) for b in blocks if "scrape_configs:" in b]
    jobs: list[dict[str, Any]] = config["scrape_configs"]
    return jobs


def test_the_install_guide_scrapes_the_jobs_the_alerts_select_on_the_roles_ports() -> None:
    """HarpDaemonDown and HarpGuardDown select `up{job="slurm-harp"}` and `up{job="slurm-harp-guard"}`:
    a scrape job of another name (tests/integration/test_prometheus.py's was `harp`) never makes them
    fire. The guide gives those jobs, on the ports the role and deploy/config/harp.toml set."""
    jobs = {job["job_name"]: job for job in documented_scrape_configs()}
    selected = set(re.findall(r'\bjob="([^"]+)"', RULES.read_text()))
    assert set(jobs) == selected == {"slurm-harp", "slurm-harp-guard"}
    role = yaml.safe_load((REPO / "deploy/ansible/roles/slurm_harp/defaults/main.yml").read_text())
    shipped = tomllib.loads((REPO / "deploy/config/harp.toml").read_text())
    ports = {
        "slurm-harp": {role["slurm_harp_metrics_port"], shipped["server"]["metrics_port"]},
        "slurm-harp-guard": {role["slurm_harp_guard_metrics_port"], shipped["guard"]["metrics_port"]},
    }
    for name, job in jobs.items():
        (port,) = ports[name]
        targets = [t for c in job["static_configs"] for t in c["targets"]]
        assert targets and all(t.endswith(f":{port}") for t in targets), (name, targets)
