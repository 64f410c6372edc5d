"""A real Prometheus server scrapes the daemon's and the guard's /metrics, under the scrape jobs
docs/install.md gives, and can query what they served and what the alert rules select."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from slurm_harp.core.request import Target
from slurm_harp.model.store import ModelStore
from tests.conftest import required_tool
from tests.integration.harp_client import Client
from tests.integration.test_daemon import make_daemon
from tests.integration.test_guard_reload import guard_toml
from tests.integration.test_operations_files import RULES, documented_scrape_configs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
    return result


def value(port: int, expr: str) -> float | None:
    """The value of ``expr``'s one series, None while Prometheus has none (or is not up yet)."""
    try:
        found = query(port, expr)
    except OSError:
        return None
    assert len(found) <= 1, found
    return float(found[0]["value"][1]) if found else None


def wait_for(port: int, expr: str, wanted: float, log: Path) -> None:
    deadline = time.monotonic() + 60
    while value(port, expr) != wanted:
        assert time.monotonic() < deadline, (expr, log.read_text()[-2000:])
        time.sleep(0.5)


def a_guard_without_slurmctld(tmp: Path, metrics_port: int) -> subprocess.Popen[bytes]:
    """`harp guard` where slurmctld is down: squeue and the other tools fail as Slurm's do."""
    tools = tmp / "bin"
    tools.mkdir()
    for tool in ("squeue", "scontrol", "sacctmgr", "sinfo"):
        (tools / tool).write_text(
            "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n"
        )
        (tools / tool).chmod(0o755)
    conf = tmp / "guard.toml"
    conf.write_text(guard_toml(tmp, "guard", 1, f"metrics_port = {metrics_port}\n"))
    return subprocess.Popen(
        [sys.executable, "-m", "slurm_harp.cli", "guard", "--config", str(conf)],
        stderr=(tmp / "guard.log").open("wb"),
        env={**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"},
    )


def test_prometheus_scrapes_serving_metrics(tmp_path: Path, trained_store: Path) -> None:
    """Under docs/install.md's scrape jobs, the series the alert rules select exist: HarpDaemonDown and
    HarpGuardDown can fire. The guard runs without slurmctld: up, its polls failing and counted."""
    binary = required_tool("prometheus", "prometheus")
    metrics_port, guard_port, prom_port = free_port(), free_port(), free_port()
    daemon = make_daemon(tmp_path, trained_store, metrics_port=metrics_port)
    daemon.start()
    guard = a_guard_without_slurmctld(tmp_path, guard_port)
    ports = {"slurm-harp": metrics_port, "slurm-harp-guard": guard_port}
    jobs = [
        {"job_name": name, "static_configs": [{"targets": [f"127.0.0.1:{ports[name]}"]}]}
        for name in (job["job_name"] for job in documented_scrape_configs())
    ]
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = tmp_path / "prometheus.log"
    prom = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    try:
        with Client(tmp_path / "harp.sock") as client:
            for _ in range(5):
                client.predict(time_limit_minutes=3 * 24 * 60, min_cpus=32)
        wait_for(prom_port, 'sum(harp_decisions_total{target="time",action="rewrite"})', 5, log)
        info = query(prom_port, "harp_model_info")
        assert info and info[0]["metric"]["target"] == "time"
        current = ModelStore(trained_store).current_dir(Target.TIME)
        assert current is not None
        card = json.loads((current / "card.json").read_text())
        (budget,) = query(prom_port, 'harp_model_kill_budget_ratio{target="time"}')
        assert float(budget["value"][1]) == card["calibration"]["kill_budget"]
        assert budget["metric"]["version"] == current.name
        assert float(query(prom_port, "harp_predict_duration_seconds_count")[0]["value"][1]) == 5
        # Each `up{job=...}` an alert rule selects is a series of this scrape, the target up.
        selectors = set(re.findall(r'up\{job="[^"]+"\}', RULES.read_text()))
        assert selectors == {'up{job="slurm-harp"}', 'up{job="slurm-harp-guard"}'}
        for selector in selectors:
            wait_for(prom_port, selector, 1, log)
        # The guard without slurmctld: up, its polls failing, never a good one (HarpGuardStale's).
        failed = 'harp_guard_polls_total{job="slurm-harp-guard",result="failed"}'
        deadline = time.monotonic() + 60
        while (value(prom_port, failed) or 0) < 2:
            assert time.monotonic() < deadline, (tmp_path / "guard.log").read_text()[-2000:]
            time.sleep(0.5)
        assert value(prom_port, "harp_guard_last_success_timestamp_seconds") == 0
        assert guard.poll() is None
        # Stopped, the guard is what HarpGuardDown's expression selects: up 0.
        guard.terminate()
        guard.wait(timeout=30)
        wait_for(prom_port, 'up{job="slurm-harp-guard"}', 0, log)
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        guard.terminate()
        guard.wait(timeout=30)
        daemon.stop(grace=0)
