"""Prediction accuracy from real outcomes: jobs run through our plugin on a real cluster (one partition
in rewrite mode, one in shadow), `harp harvest` reads them from real sacct (their tags with them), the
daemon computes the figures from the job store, and a real Prometheus scrapes them. Every value is
checked against what accounting says about the jobs."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.core.request import Target
from slurm_harp.core.tag import parse_tag
from slurm_harp.model.store import ModelStore
from tests.conftest import REPO, required_tool
from tests.e2e.cluster import TERMINAL_STATES, SlurmCluster, StartCluster
from tests.e2e.daemon_process import DaemonProcess, plugin_config
from tests.e2e.harvesting import harvest
from tests.integration.lua_driver import PLUGIN_ROOMY_MS
from tests.integration.test_prometheus import free_port, query

# The bundled trace's median model cuts a 2-hour request (to tens of minutes); this cluster's users
# have no job history, so the rule that history is needed before a rewrite is off.
POLICY = (
    'limits = "quantile"\nquantile = 0.5\nrequire_history = false\n[policy.floor]\ntime_minutes = 1\n'
    '[[policy.rule]]\npartition = "debug"\nmode = "rewrite"\n'
)
ENDLESS = ("", "Unknown")
FIELDS = ["JobIDRaw", "State", "Partition", "ElapsedRaw", "NCPUS", "End", "AdminComment"]


@pytest.fixture(scope="module")
def site(
    start_module_cluster: StartCluster, trained_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SlurmCluster, DaemonProcess, Path, int]]:
    work = tmp_path_factory.mktemp("outcomes")
    store = work / "store"
    shutil.copytree(trained_store, store)
    plugin_conf = plugin_config(work, deadline_ms=PLUGIN_ROOMY_MS, breaker_seconds=1)
    cluster = start_module_cluster(
        job_submit_lua=(REPO / "plugin" / "job_submit.lua").read_text(),
        extra_conf_files={"harp_plugin.lua": plugin_conf},
        nodes=2,
    )
    port = free_port()
    history = f'[history]\ndb = "{work / "jobs.sqlite"}"\npoll_seconds = 0.2\n'
    daemon = DaemonProcess(
        work, store, "shadow", extra=POLICY + history, server_extra=f"metrics_port = {port}\n"
    )
    daemon.start()
    try:
        yield cluster, daemon, work, port
    finally:
        daemon.stop()


def settled_rows(cluster: SlurmCluster, ids: list[int], timeout: float = 120.0) -> list[dict[str, str]]:
    deadline = time.monotonic() + timeout
    while True:
        rows = cluster.sacct_rows(ids, FIELDS, allocations_only=True)
        done = [
            r for r in rows if r["State"].split()[0] in TERMINAL_STATES and r["End"] not in ("", "Unknown")
        ]
        if len(done) == len(ids) and all(r["Partition"] for r in done):
            return done
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)


def test_accuracy_of_real_jobs_reaches_prometheus(
    site: tuple[SlurmCluster, DaemonProcess, Path, int],
) -> None:
    binary = required_tool("prometheus", "prometheus")
    cluster, _daemon, work, port = site
    ids = []
    for partition, sleep in [("debug", 2), ("debug", 3), ("debug", 2), ("batch", 2), ("batch", 4)]:
        res = cluster.sbatch(
            ["-p", partition, "-t", "120", "-J", f"acc-{partition}"], f"#!/bin/sh\nsleep {sleep}\n"
        )
        assert res.job_id is not None, res.stderr
        ids.append(res.job_id)
    rows = settled_rows(cluster, ids)
    tags = {r["JobIDRaw"]: parse_tag(r["AdminComment"]) for r in rows}
    assert all(t is not None and "t" in t.values for t in tags.values()), rows
    assert {t.mode for t in tags.values() if t is not None} == {"rewrite", "shadow"}
    harvest(cluster, work / "jobs.sqlite")
    explain_a_real_job(cluster, _daemon, next(r for r in rows if r["Partition"] == "debug"))
    report_on_real_jobs(work, _daemon, rows)

    # What the figures must be, from accounting alone.
    expected_ratio: dict[str, float] = {}
    expected_saved = 0.0
    for r in rows:
        tag = tags[r["JobIDRaw"]]
        assert tag is not None
        value = tag.values["t"]
        expected_ratio[r["Partition"]] = (
            expected_ratio.get(r["Partition"], 0.0) + int(r["ElapsedRaw"]) / 60 / value
        )
        if tag.flags.get("t") == "!":
            expected_saved += (tag.own["t"] - value) * 60 * int(r["NCPUS"])
    assert expected_saved > 0, [r["AdminComment"] for r in rows]  # the debug jobs were lowered from 2 hours

    prom_port = free_port()
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: harp\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    prom = subprocess.Popen(
        [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=(work / "prometheus.log").open("wb"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                jobs = query(prom_port, 'sum by (partition) (harp_outcome_jobs{target="time"})')
            except OSError:
                jobs = []
            if sum(float(j["value"][1]) for j in jobs) == len(rows):
                break
            assert time.monotonic() < deadline, (work / "daemon.log").read_text()[-2000:]
            time.sleep(0.5)
        counted = {j["metric"]["partition"]: float(j["value"][1]) for j in jobs}
        assert counted == {"debug": 3.0, "batch": 2.0}
        for partition, ratio_sum in expected_ratio.items():
            (got,) = query(prom_port, f'harp_outcome_ratio_gsum{{target="time",partition="{partition}"}}')
            assert math.isclose(float(got["value"][1]), ratio_sum, rel_tol=1e-9), (partition, got)
        (saved,) = query(prom_port, 'sum(harp_outcome_saved_core_seconds{target="time"})')
        assert math.isclose(float(saved["value"][1]), expected_saved, rel_tol=1e-9)
        (killed,) = query(prom_port, 'sum(harp_outcome_killed_jobs{target="time"})')
        assert float(killed["value"][1]) == 0
        (under,) = query(prom_port, 'max(harp_outcome_underpredicted_ratio{target="time"})')
        assert float(under["value"][1]) == 0  # sleeps of seconds against minutes predicted
        versions = {m["metric"]["version"] for m in query(prom_port, "harp_outcome_jobs")}
        served = {m["metric"]["version"] for m in query(prom_port, 'harp_model_info{target="time"}')}
        assert versions == served  # each tag's version matched to the time model
        (age,) = query(prom_port, 'time() - harp_model_created_timestamp_seconds{target="time"}')
        assert 0 < float(age["value"][1]) < 7 * 86400
        # The kill budget the alert and the dashboard read is the serving card's.
        current = ModelStore(work / "store").current_dir(Target.TIME)
        assert current is not None
        card = json.loads((current / "card.json").read_text())
        (budget,) = query(prom_port, 'harp_model_kill_budget_ratio{target="time"}')
        assert budget["metric"]["version"] == current.name
        assert float(budget["value"][1]) == card["calibration"]["kill_budget"]
    finally:
        prom.terminate()
        prom.wait(timeout=30)


def explain_a_real_job(cluster: SlurmCluster, daemon: DaemonProcess, row: dict[str, str]) -> None:
    """`harp explain` on a job harp lowered, through real sacct, with the daemon's configuration."""
    bin_dir = os.path.dirname(sys.executable)
    env = cluster.env | {"PATH": f"{cluster.env['PATH']}:/usr/bin:{bin_dir}"}
    argv = [
        sys.executable,
        "-m",
        "slurm_harp.cli",
        "explain",
        row["JobIDRaw"],
        "--config",
        str(daemon.config),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    tag = parse_tag(row["AdminComment"])
    assert tag is not None
    assert f"job {row['JobIDRaw']}: user root, partition debug" in done.stdout
    assert f"time: lowered to {tag.values['t']} min from the user's 120 min" in done.stdout
    assert "serving now" in done.stdout and "q0.5 prediction for this job:" in done.stdout
    assert "policy now: mode rewrite for partition debug" in done.stdout


def report_on_real_jobs(work: Path, daemon: DaemonProcess, rows: list[dict[str, str]]) -> None:
    """`harp report` on the harvested store: every job is in it, by partition, as accounting has it."""
    out = work / "report"
    argv = [sys.executable, "-m", "slurm_harp.cli", "report", "--db", str(work / "jobs.sqlite")]
    argv += ["--since", "1d", "--out", str(out), "--config", str(daemon.config)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (out / "index.html").read_text()
    assert f"{len(rows)} jobs, {len(rows)} tagged" in done.stdout, done.stdout
    for partition in {r["Partition"] for r in rows}:
        assert f"<td>{partition}</td>" in page, partition
    assert sorted(p.suffix for p in out.iterdir()).count(".png") >= 3
