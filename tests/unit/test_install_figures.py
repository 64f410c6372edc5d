"""The figures docs/install.md quotes for `harp report` on the bundled trace in shadow mode
(experiments/shadow_report.py makes the store and the picture), recomputed from the reference model."""

from __future__ import annotations

import re
from pathlib import Path

from experiments.shadow_report import WINDOW_DAYS, shadow_store
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.evaluation.site_report import ModeRow, site_report
from tests.conftest import REPO

SAID = re.compile(
    r"would change (?P<changed>[\d,]+) of the (?P<jobs>[\d,]+) jobs: rewrite mode would cut "
    r"(?P<rewrite_cut>[\d.]+) % of the waste and kill (?P<killed>\d+) jobs \((?P<killed_share>[\d.]+) %\), "
    r"whose kills would lose more core-hours than the cut saves \((?P<net>[\d,]+) net\); extend mode "
    r"keeps a (?P<extend_cut>[\d.]+) % cut and kills none"
)


def test_the_shadow_report_figures_the_install_guide_quotes(tmp_path: Path) -> None:
    said = SAID.search(" ".join((REPO / "docs" / "install.md").read_text().split()))
    assert said, "install.md no longer quotes the shadow report's figures as this test reads them"
    latest = shadow_store(tmp_path / "kth-shadow.db")
    since = latest - WINDOW_DAYS * 86400
    with JobStore(tmp_path / "kth-shadow.db", readonly=True) as store:
        report = site_report(list(store.records(ended_since=since)), Policy(), since)
    rows = {row.mode: row for row in report.modes}
    asked = report.modes[0].waste_core_h
    rewrite, extend = rows[Mode.REWRITE], rows[Mode.EXTEND]

    def cut(row: ModeRow) -> str:
        return f"{100.0 * (asked - row.waste_core_h) / asked:.1f}"

    assert (f"{report.jobs:,}", f"{rewrite.changed:,}") == (said["jobs"], said["changed"])
    assert (cut(rewrite), str(rewrite.killed)) == (said["rewrite_cut"], said["killed"])
    assert f"{100.0 * rewrite.killed / report.timed:.2f}" == said["killed_share"]
    net = asked - rewrite.waste_core_h - rewrite.lost_core_h
    assert net < 0 and f"{-net:,.0f}" == said["net"]
    assert (cut(extend), extend.killed) == (said["extend_cut"], 0)
