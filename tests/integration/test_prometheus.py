"""A real Prometheus server scrapes the daemon's /metrics and can query what it served."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from slurm_harp.core.request import Target
from slurm_harp.model.store import ModelStore
from tests.conftest import required_tool
from tests.integration.harp_client import Client
from tests.integration.test_daemon import make_daemon


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
    return result


def test_prometheus_scrapes_serving_metrics(tmp_path: Path, trained_store: Path) -> None:
    binary = required_tool("prometheus", "prometheus")
    metrics_port, prom_port = free_port(), free_port()
    daemon = make_daemon(tmp_path, trained_store, metrics_port=metrics_port)
    daemon.start()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: harp\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    prom = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    try:
        with Client(tmp_path / "harp.sock") as client:
            for _ in range(5):
                client.predict(time_limit_minutes=3 * 24 * 60, min_cpus=32)
        deadline = time.monotonic() + 60
        while True:
            try:
                rewrites = query(prom_port, 'sum(harp_decisions_total{target="time",action="rewrite"})')
            except OSError:
                rewrites = []
            if rewrites and float(rewrites[0]["value"][1]) == 5:
                break
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()[-2000:]
            time.sleep(0.5)
        info = query(prom_port, "harp_model_info")
        assert info and info[0]["metric"]["target"] == "time"
        current = ModelStore(trained_store).current_dir(Target.TIME)
        assert current is not None
        card = json.loads((current / "card.json").read_text())
        (budget,) = query(prom_port, 'harp_model_kill_budget_ratio{target="time"}')
        assert float(budget["value"][1]) == card["calibration"]["kill_budget"]
        assert budget["metric"]["version"] == current.name
        assert float(query(prom_port, "harp_predict_duration_seconds_count")[0]["value"][1]) == 5
        assert query(prom_port, 'up{job="harp"}')[0]["value"][1] == "1"
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        daemon.stop(grace=0)
