"""`harp report`'s figures on a small job store whose every number is worked out by hand, and its
page: every text from the store escaped, clear messages when there is nothing to report."""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import stat
from pathlib import Path

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from slurm_harp.commands.report import since_time
from slurm_harp.core.job import JobRecord
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation.outcomes import outcomes
from slurm_harp.evaluation.site_report import SiteReport, site_report
from slurm_harp.evaluation.site_report_html import render, when, write_site_report
from slurm_harp.output_dir import OutputDir

V = "20261101T000000.000000Z"
START = 1_790_000_000  # the window opens here; every job of the window ends after it
DAY = 86400


def job(job_id: str, tag: str | None, minutes: float, *, partition: str = "a", state: str = "COMPLETED",
        limit: int = 100, end: int = START + DAY) -> JobRecord:  # fmt: skip
    """Two cores, the user's limit 100 minutes (unless harp lowered it: accounting shows ``limit``)."""
    request = JobRequest(partition=partition, min_cpus=2, time_limit_minutes=limit, submit_time=end - 7200)
    return JobRecord(job_id, request, state, int(minutes * 60), end_time=end, alloc_cpus=2,
                     censored=state == "TIMEOUT", harp_tag=tag)  # fmt: skip


# Policy defaults: time floor 10 min, min_gain 0.1 (a limit must save 10 % of the request).
JOBS = [
    job("1", f"harp:shadow,t=50,v={V}", 40),  # lowered to 50, finishes
    job("2", f"harp:shadow,t=50,v={V}", 70),  # lowered to 50: killed in rewrite, extended in extend
    job("3", f"harp:shadow,t=95,v={V}", 30, partition="b"),  # 95 > 90: no gain, kept at 100
    job("4", f"harp:shadow,t=5,v={V}", 3, partition="b"),  # raised to the floor, 10
    # harp lowered it to 60 in rewrite mode and it timed out there: harp's real kill
    job("5", f"harp:rewrite,t!=60,t0=100,v={V}", 60, partition="b", state="TIMEOUT", limit=60),
    job("6", None, 10),  # harp did not see it
    job("7", "harp:bogus,x=1", 10),  # a tag that does not parse
    job("8", f"harp:shadow,t=50,v={V}", 10, end=START - DAY),  # ended before the window
]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.db"
    with JobStore(path) as store:
        store.merge(JOBS, "slurm")
    return path


def figures(db: Path) -> SiteReport:
    with JobStore(db, readonly=True) as store:
        return site_report(store.records(ended_since=START), Policy(), START)


def test_counts_and_each_modes_figures_by_hand(db: Path) -> None:
    report = figures(db)
    assert (report.jobs, report.untagged, report.unreadable, report.tagged, report.timed) == (7, 1, 1, 5, 5)
    assert report.tag_modes == {"shadow": 4, "rewrite": 1} and report.versions == {V: 5}
    rows = {r.mode: r for r in report.modes}
    h = 2 / 60  # core-hours per minute of a two-core job
    # As asked: 5 jobs x 100 min reserved; waste 60 + 70 + 30 + 97 min of the four that finished, and
    # 40 of job 5, which harp's limit stopped at 60: it counts as finished under its own 100, as in
    # `harp evaluate` and training (core.accuracy.finished_under_request).
    assert rows[Mode.SHADOW].reserved_core_h == pytest.approx(500 * h)
    assert rows[Mode.SHADOW].waste_core_h == pytest.approx(297 * h)
    assert (rows[Mode.SHADOW].changed, rows[Mode.SHADOW].killed) == (0, 0)
    # Limits 50, 50, 100 (kept), 10, 60 (harp's own); job 2 (70 min) no longer fits in 50.
    rewrite = rows[Mode.REWRITE]
    assert rewrite.changed == 4
    assert rewrite.reserved_core_h == pytest.approx(270 * h)
    assert rewrite.waste_core_h == pytest.approx((10 + 70 + 7 + 0) * h)  # jobs 1, 3, 4 (and 5, at 60)
    assert rewrite.killed == 2  # job 2 would be killed; job 5 was
    # Job 2's attempt cut at 50 and its run again under its own 100 leaving 30 unused; job 5's run
    # of 60 and its run again under its 100 leaving 40 unused (its run time standing in, as in the
    # 40 of its waste as asked): the net saving loses job 5's run, 60.
    assert rewrite.lost_core_h == pytest.approx((50 + 30 + 60 + 40) * h)
    # Extend: job 2 is extended 50 -> 51 -> 55 -> 65 -> 80 (Tsafrir's steps, 2 min lead) and ends at
    # 70; job 5 (ran 60 under a 60 limit) would have been extended too, its true run time unknown.
    extend = rows[Mode.EXTEND]
    assert (extend.changed, extend.killed, extend.extended) == (4, 0, 2)
    # Reserved is what each job ends up holding, after the guard's extensions: 50, 80, 100, 10 and
    # job 5's 65 (60 -> 61 -> 65 for a run of at least 60). It was the cut limits' 270 beside the
    # waste after the extensions, less than the 203 used plus the 102 wasted. Now 305: 203 + 102.
    # Job 5 ran in rewrite mode: extend's row does not count its kill.
    assert extend.reserved_core_h == pytest.approx((50 + 80 + 100 + 10 + 65) * h)
    assert extend.waste_core_h == pytest.approx((10 + 10 + 70 + 7 + 5) * h)
    assert float(sum(figures(db).points.actual)) == 203
    # time_min keeps every limit: the same reservations as asked, its gain is in the schedule.
    time_min = rows[Mode.TIME_MIN]
    assert (time_min.changed, time_min.extended) == (4, None)
    assert time_min.waste_core_h == pytest.approx(rows[Mode.SHADOW].waste_core_h)


def test_the_net_saving_counts_what_the_re_run_of_a_killed_job_leaves_unused() -> None:
    """One job, 1 core, asked 100 min, ran 70; rewrite would cut it to 50. Killed at 50, run again
    under its 100, it reserves 50 + 100 for a 70-minute run: 80 unused against 30 as asked, a net
    saving of -50 core-minutes, as training's net cut (core.accuracy.kill_loss) counts it. The page
    said -20: the re-run's 30 unused minutes were left out."""
    request = JobRequest(partition="a", min_cpus=1, time_limit_minutes=100, submit_time=START)
    record = JobRecord("1", request, "COMPLETED", 70 * 60, end_time=START + 70 * 60, alloc_cpus=1,
                       harp_tag=f"harp:shadow,t=50,v={V}")  # fmt: skip
    report = site_report([record], Policy(min_gain=0.0), START)
    assert '<td class="n">-1</td>' in render(report, {}, "defaults")  # -50 core-min in core-hours
    rows = {r.mode: r for r in report.modes}
    asked, rewrite = rows[Mode.SHADOW], rows[Mode.REWRITE]
    assert asked.waste_core_h == pytest.approx(30 / 60)
    assert (rewrite.waste_core_h, rewrite.killed) == (0.0, 1)
    net = asked.waste_core_h - rewrite.waste_core_h - rewrite.lost_core_h
    assert net == pytest.approx(-50 / 60)


def test_a_job_harp_killed_costs_the_net_saving_the_run_it_lost() -> None:
    """One job of 2 cores, asked 100 min; rewrite mode cut it to 30 and Slurm stopped it there. Run
    again under its 100 it leaves 100 - r unused, as it would have as asked: the kill costs the run it
    lost, 30 minutes. The page said +10: its 70 minutes of waste as asked counted as cut, and only the
    30 of its run as lost, so a job harp killed short of half its request showed as a saving."""
    record = job("1", f"harp:rewrite,t!=30,t0=100,v={V}", 30, state="TIMEOUT", limit=30)
    report = site_report([record], Policy(min_gain=0.0), START)
    rows = {r.mode: r for r in report.modes}
    asked, rewrite = rows[Mode.SHADOW], rows[Mode.REWRITE]
    h = 2 / 60
    assert asked.waste_core_h == pytest.approx(70 * h) and rewrite.killed == 1
    net = asked.waste_core_h - rewrite.waste_core_h - rewrite.lost_core_h
    assert net == pytest.approx(-30 * h)
    assert '<td class="n">-1</td>' in render(report, {}, "defaults")  # -1 core-hour, net


def test_jobs_whose_cpus_harp_cut_count_their_users_cpus_and_their_use_at_the_cut() -> None:
    """Rewrite cut 10 jobs from 16 CPUs to 4 (accounting shows 4); each kept its 4 CPUs busy. As
    asked they reserved 16 CPUs x 100 min, not harp's 4; and a job cannot use more CPUs than it holds,
    so none is "slowed": the jobs that used the CPUs harp left them are at its limit, possibly slowed."""
    jobs = []
    for i in range(10):
        request = JobRequest(partition="a", min_cpus=4, time_limit_minutes=100, submit_time=START + i)
        jobs.append(JobRecord(str(i), request, "COMPLETED", 3600, end_time=START + i + 3600, alloc_cpus=4,
                              total_cpu_s=(4 if i < 7 else 2) * 3600.0,
                              harp_tag=f"harp:rewrite,t=90,c!=4,c0=16,v={V}"))  # fmt: skip
    report = site_report(jobs, Policy(), START)
    asked = report.modes[0]
    assert asked.reserved_core_h == pytest.approx(10 * 16 * 100 / 60)
    assert asked.waste_core_h == pytest.approx(10 * 16 * 40 / 60)
    (part,) = report.by_partition
    assert part.used_core_h == pytest.approx(10 * 4 * 60 / 60)  # the run, with the CPUs it held
    (cpus,) = report.other_targets
    assert (cpus.target, cpus.lowered_pct, cpus.harmed_pct) == (Target.CPUS, 100.0, 0.0)
    assert cpus.at_limit_pct == pytest.approx(70.0)  # 7 used all 4; 3 used 2 of them
    page = render(report, {}, "defaults")
    assert "at harp&#x27;s CPU limit (possibly slowed)" in page and '<td class="n">70.0 %</td>' in page


def test_per_partition_waste_and_kills(db: Path) -> None:
    parts = {p.partition: p for p in figures(db).by_partition}
    h = 2 / 60
    a, b = parts["a"], parts["b"]
    assert (a.jobs, a.rewrite_killed, a.harp_killed) == (2, 1, 0)
    assert a.used_core_h == pytest.approx(110 * h) and a.reserved_core_h == pytest.approx(200 * h)
    assert a.waste_core_h == {
        Mode.SHADOW: pytest.approx(90 * h), Mode.EXTEND: pytest.approx(20 * h),
        Mode.REWRITE: pytest.approx(10 * h),
    }  # fmt: skip
    assert (b.jobs, b.rewrite_killed, b.harp_killed) == (3, 1, 1)  # job 5: a rewrite to 60 stops it again
    assert b.used_core_h == pytest.approx(93 * h)
    assert b.waste_core_h[Mode.SHADOW] == pytest.approx((70 + 97 + 40) * h)  # job 5's 40 as finished
    assert b.waste_core_h[Mode.REWRITE] == pytest.approx(77 * h)


def test_plot_points_are_harps_values_against_the_runs(db: Path) -> None:
    points = figures(db).points
    assert points.predicted.tolist() == [50, 50, 95, 5, 60]
    assert points.actual.tolist() == [40, 70, 30, 3, 60]
    assert points.requested.tolist() == [100] * 5  # job 5's own limit, from its tag
    assert points.stopped.tolist() == [False] * 4 + [True]


def test_memory_in_rewrite_mode() -> None:
    def mem(rss: float) -> JobRecord:
        request = JobRequest(min_cpus=1, min_nodes=1, mem_per_node_mb=4000, time_limit_minutes=100)
        return JobRecord("m", request, "COMPLETED", 3600, alloc_cpus=1, max_rss_mb=rss, end_time=START,
                         harp_tag=f"harp:shadow,t=100,m=1500,v={V}")  # fmt: skip

    report = site_report([mem(1000), mem(2000)], Policy(), START)
    (memory,) = report.other_targets
    assert memory.target is Target.MEMORY and memory.jobs == 2
    assert memory.lowered_pct == 100.0 and memory.harmed_pct == 50.0  # 2000 MB does not fit 1500
    # Waste (MB-hours): 3000 + 2000 as asked; 500 after (the killed job's is gone with it).
    assert memory.waste_cut_pct == pytest.approx(90.0)
    assert report.memory_ratios.tolist() == pytest.approx([1000 / 1500, 2000 / 1500])


@pytest.mark.parametrize("peak", [2000, 2100])
def test_memory_harp_lowered_that_ran_out_counts_as_killed(peak: float) -> None:
    """Rewrite mode lowered 10 jobs from 8000 to 2000 MB a node (accounting shows 2000); 3 ran out
    of memory there. They reached harp's limit, and harp killed them: the memory row says 30 %, not
    0 %; outcomes counts them as harp's memory kills. A peak seen past the limit (2100) is killed
    once, not also as newly killed (a job harp's limit stopped counts as finished under its own)."""

    def mem(i: int, rss: float, state: str = "COMPLETED") -> JobRecord:
        request = JobRequest(min_cpus=4, min_nodes=1, mem_per_node_mb=2000, time_limit_minutes=100)
        return JobRecord(str(i), request, state, 3600, alloc_cpus=4, max_rss_mb=rss, end_time=START + i,
                         harp_tag=f"harp:rewrite,t=90,m!=2000,m0=8000,v={V}")  # fmt: skip

    jobs = [mem(i, 1500) for i in range(7)] + [mem(i, peak, "OUT_OF_MEMORY") for i in range(7, 10)]
    (memory,) = site_report(jobs, Policy(), START).other_targets
    assert (memory.jobs, memory.lowered_pct) == (10, 100.0)
    assert memory.harmed_pct == pytest.approx(30.0)
    kills = outcomes(jobs, lambda _: Target.MEMORY)
    assert sum(o.killed for (target, _, _), o in kills.items() if target == "memory") == 3


def test_kills_harp_made_in_extend_and_time_min_show_in_those_modes_rows() -> None:
    """Extend and time_min never kill a job before its user's own limit by design; their rows are where
    a site checks it. Extend mode cut job 1 to 50 min and, the guard down, Slurm stopped it there;
    backfill started job 2 with its limit cut to the time_min 40 and stopped it there. Both rows said
    0 killed: harp's kills were shown under rewrite only."""
    jobs = [
        job("1", f"harp:extend,t!=50,t0=100,v={V}", 50, state="TIMEOUT", limit=50),
        job("2", f"harp:time_min,t~=40,t0=100,v={V}", 40, state="TIMEOUT", limit=40),
        job("3", f"harp:extend,t!=50,t0=100,v={V}", 30),
    ]
    report = site_report(jobs, Policy(), START)
    rows = {r.mode: r for r in report.modes}
    h = 2 / 60
    assert (rows[Mode.EXTEND].killed, rows[Mode.TIME_MIN].killed) == (1, 1)
    # The run each kill lost and its run again under its own 100; a killed job's waste is not the row's.
    assert rows[Mode.EXTEND].lost_core_h == pytest.approx(100 * h)
    assert rows[Mode.TIME_MIN].lost_core_h == pytest.approx(100 * h)
    assert (rows[Mode.SHADOW].killed, rows[Mode.REWRITE].killed) == (0, 2)  # a rewrite stops both again
    page = render(report, {}, "defaults")
    for meaning in ("time_min: the limit is kept", "extend: the limit cut"):
        (line,) = [x for x in page.splitlines() if x.startswith(f"<tr><td>{meaning}")]
        assert '<td class="n kills">1 (33.33 %)</td>' in line
    assert "a count there is of jobs harp did kill while they ran in that mode" in page


HOSTILE = "<script>alert(1)</script>&\"'"


def test_every_text_from_the_store_is_escaped(tmp_path: Path) -> None:
    # A partition is any text a site chose; a version any token without spaces or commas. The
    # partition is also bad TeX: the plots draw it as written.
    jobs = [
        job("1", "harp:shadow,t=50,v=<script>x</script>", 40, partition=HOSTILE),
        job("2", f"harp:shadow,t=50,v={V}", 70, partition="$x^{$"),
    ]
    report = site_report(jobs, Policy(), START, partitions=(HOSTILE,))
    with OutputDir.open(tmp_path) as out:
        page = write_site_report(report, out, policy_from="<b>defaults</b>").read_text()
    assert "<script>" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;&#x27;" in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "&lt;b&gt;defaults&lt;/b&gt;" in page
    assert len(re.findall(r"<table>", page)) == 3
    assert {p.name for p in tmp_path.glob("*.png")} == {
        "modes.png", "partitions.png", "predicted-vs-actual.png", "ratio-cdf.png"
    }  # fmt: skip


def test_nothing_to_report_is_said_on_the_page(tmp_path: Path) -> None:
    empty = render(site_report([], Policy(), START), {}, "defaults")
    assert 'class="problem">No job ended since' in empty
    untagged = render(site_report([job("1", None, 5)], Policy(), START), {}, "defaults")
    assert "None of the 1 jobs that ended since" in untagged and "has a harp tag" in untagged


def test_command_messages_and_exit_codes(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert main(["report", "--db", str(tmp_path / "none.db"), "--out", str(out)]) == 2
    assert "no job store at" in capsys.readouterr().out and not out.exists()
    since = "2026-09-21"  # the day of START: job 8 ended the day before
    assert main(["report", "--db", str(db), "--since", since, "--out", str(out)]) == 0
    assert "5 tagged (1 untagged skipped)" in capsys.readouterr().out
    assert (out / "index.html").is_file() and (out / "modes.png").is_file()
    assert main(["report", "--db", str(db), "--since", "2027-01-01", "--out", str(out)]) == 1
    assert "No job ended since 2027-01-01 00:00 UTC" in capsys.readouterr().out
    # The page says nothing to report: the plots of the run before it, kept, would belie it.
    assert [p.name for p in out.iterdir()] == ["index.html"]
    assert main(["report", "--db", str(db), "--since", since, "--partition", "zz", "--out", str(out)]) == 1
    assert "No job ended since 2026-09-21 00:00 UTC in zz" in capsys.readouterr().out
    untagged = tmp_path / "untagged.db"
    with JobStore(untagged) as store:
        store.merge([job("1", None, 5), job("2", None, 7)], "slurm")
    assert main(["report", "--db", str(untagged), "--since", since, "--out", str(out)]) == 1
    assert "None of the 2 jobs that ended since" in capsys.readouterr().out


def test_a_row_edited_by_hand_is_left_out_of_the_report(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Text in an integer column ended `harp report` in a TypeError traceback; the other jobs count.
    with sqlite3.connect(db) as edit:
        edit.execute("UPDATE jobs SET elapsed_s = 'abc' WHERE job_id = '3'")
    assert main(["report", "--db", str(db), "--since", "2026-09-21", "--out", str(tmp_path / "r")]) == 0
    assert "4 tagged (1 untagged skipped)" in capsys.readouterr().out
    assert "1 rows skipped, a value not of its column's type (job '3': elapsed_s = 'abc'" in caplog.text


def test_a_stored_time_out_of_range_is_left_out_of_the_report(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A job store can hold a time past the year 9999 (stored before the trace readers checked):
    `harp report` ended in `ValueError: year 33658 is out of range`, exit 1 ("nothing to report").
    Such jobs are left out, in one warning, as `harp nightly` leaves them out of training."""
    with JobStore(db) as store:
        store.merge([job("9", f"harp:shadow,t=50,v={V}", 40, end=10**12)], "slurm")
    assert main(["report", "--db", str(db), "--since", "2026-09-21", "--out", str(tmp_path / "r")]) == 0
    assert "5 tagged (1 untagged skipped)" in capsys.readouterr().out
    assert "1 jobs of the job store left out of the report, a time before 1970" in caplog.text
    assert "job 9: submit time 999999992800 is in the future" in caplog.text


def test_a_time_no_date_holds_is_written_as_unix_seconds() -> None:
    assert when(10**12) == "unix time 1000000000000" and when(START) == "2026-09-21 14:13 UTC"


def test_links_planted_in_the_out_directory_are_replaced_not_written_through(
    db: Path, tmp_path: Path
) -> None:
    # `harp report --out` a directory someone else may write (a user's, a shared one): run as root,
    # the page and plots were written through the links planted there, over any file.
    out, victim, other = tmp_path / "shared", tmp_path / "victim", tmp_path / "other"
    out.mkdir()
    victim.write_text("root's file\n")
    other.write_text("another file\n")
    (out / "index.html").symlink_to(victim)
    os.link(other, out / "modes.png")
    (out / "partitions.png").symlink_to(tmp_path / "created")
    assert main(["report", "--db", str(db), "--since", "2026-09-21", "--out", str(out)]) == 0
    assert victim.read_text() == "root's file\n" and other.read_text() == "another file\n"
    assert not (tmp_path / "created").exists()
    for name in ("index.html", "modes.png", "partitions.png"):
        st = (out / name).lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and stat.S_IMODE(st.st_mode) == 0o644
    assert (out / "index.html").read_text().startswith("<!DOCTYPE html>")


def test_since_takes_days_hours_and_dates() -> None:
    assert since_time("30d", now=100 * DAY) == 70 * DAY
    assert since_time("12h", now=DAY) == DAY // 2
    assert since_time("2026-10-01") == 1_790_812_800
    assert since_time("2026-10-01T02:00+02:00") == 1_790_812_800
    with pytest.raises(argparse.ArgumentTypeError, match="not a window"):
        since_time("last month")
    for other in ("\u0663\u0660d", "\uff13\uff10d"):  # Arabic-Indic and full-width 30d were read as 30 days
        with pytest.raises(argparse.ArgumentTypeError, match="not a window"):
            since_time(other, now=100 * DAY)
    # Before any Slurm time: said so, not a traceback from a year out of range later on.
    for before in ("101d", "99999999999d", "9" * 30 + "h", "0001-01-01", "1969-12-31T23:00"):
        with pytest.raises(argparse.ArgumentTypeError, match="before 1970-01-01 UTC"):
            since_time(before, now=100 * DAY)


def test_a_shadow_value_the_rule_would_keep_keeps_the_request(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with JobStore(path) as store:
        # Both would be cut to 50 and job 2 killed in rewrite; marked /k, job 2 keeps its 100.
        store.merge([job("1", f"harp:shadow,t=50,v={V}", 40), job("2", f"harp:shadow,t=50/k,v={V}", 70)], "s")
    report = figures(path)
    rewrite = {r.mode: r for r in report.modes}[Mode.REWRITE]
    assert (rewrite.changed, rewrite.killed) == (1, 0)


def test_an_out_that_is_a_link_of_another_user_is_refused(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A user plants `report` -> a directory of root's in a directory they own; root runs
    # `harp report --out .../report`: the page and plots replaced root's files of those names.
    victim = tmp_path / "root-only"
    victim.mkdir()
    (victim / "index.html").write_text("root's page\n")
    out = tmp_path / "report"
    out.symlink_to(victim)
    if os.geteuid() == 0:
        os.lchown(out, 65534, 65534)
    else:  # the link is the caller's: run as someone else
        monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)
    assert main(["report", "--db", str(db), "--since", "2026-09-21", "--out", str(out)]) == 2
    assert "is a symbolic link owned by uid" in capsys.readouterr().out
    assert [p.name for p in victim.iterdir()] == ["index.html"]
    assert (victim / "index.html").read_text() == "root's page\n"


def test_an_out_that_is_a_link_of_the_callers_own_is_followed(db: Path, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "report").symlink_to(tmp_path / "real")
    assert main(["report", "--db", str(db), "--since", "2026-09-21", "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "real" / "index.html").is_file()
