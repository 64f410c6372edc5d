from __future__ import annotations

import dataclasses
import json

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation import report, report_plot
from slurm_harp.evaluation.baselines import RequestStrategy, ScaledTsafrirStrategy
from slurm_harp.evaluation.ceiling import ceiling
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.runner import Outcome, TargetReport, evaluate_target
from slurm_harp.evaluation.split import chronological_split


class Broken:
    name = "broken"
    target = Target.TIME

    def fit(self, jobs: object, split: object, kill_budget: float) -> None:
        raise RuntimeError("no | luck")

    def limits(self, jobs: object, start: int) -> object:
        raise AssertionError("never called")


def jobs(n: int) -> list[JobRecord]:
    out = []
    for i in range(n):
        run = 60 * (5 + (i * 7) % 20)
        out.append(
            JobRecord(
                job_id=str(i),
                request=JobRequest(user_name=f"u{i % 3}", time_limit_minutes=120, submit_time=1000 * i),
                state="COMPLETED",
                elapsed_s=run,
                end_time=1000 * i + run,
            )
        )
    return out


def evaluated() -> tuple[report.Context, list[TargetReport]]:
    timeline = chronological_split(jobs(300))
    results = [
        evaluate_target(
            timeline,
            Target.TIME,
            [RequestStrategy(Target.TIME), ScaledTsafrirStrategy(Target.TIME), Broken()],  # type: ignore[list-item]
            0.05,
        ),
        evaluate_target(timeline, Target.MEMORY, [RequestStrategy(Target.MEMORY)], 0.05),
    ]
    results[0].unavailable["ours"] = "not installed"
    ctx = report.Context("toy", "toy.swf", 0.05, (0.6, 0.2), timeline, input_jobs=300)
    return ctx, results


def test_table_rows_failures_and_skips() -> None:
    ctx, results = evaluated()
    text = report.table(results[0], ctx)
    assert "| strategy | knob | UPP % |" in text
    assert "| request |  | 0.0 |" in text
    assert "| tsafrir-scaled | x" in text
    assert "| broken | failed: RuntimeError: no / luck |" in text
    assert "ours: not evaluated: not installed" in text
    assert "60 jobs" in text  # the test window
    assert "skipped: too few jobs" in report.table(results[1], ctx)


def test_table_gives_the_cut_without_kills_beside_the_kill_rate() -> None:
    ctx, results = evaluated()
    text = report.table(results[0], ctx)
    assert "| waste cut % | newly killed % | cut without kills % | re-exec core-h (extra) |" in text
    assert report.KILL_FREE_NOTE in text
    scaled = next(o for o in results[0].outcomes if o.name == "tsafrir-scaled")
    assert scaled.test is not None
    row = next(line for line in text.splitlines() if line.startswith("| tsafrir-scaled | "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[6:9] == [
        report._number(scaled.test["waste_cut_pct"]),
        report._number(scaled.test["newly_killed_pct"], 2),
        report._number(scaled.test["kill_free_cut_pct"]),
    ]


def test_table_reads_the_curves_in_hindsight() -> None:
    ctx, results = evaluated()
    text = report.table(results[0], ctx)
    assert "Trade-off on the test window in hindsight" in text
    assert "| strategy | ≤ 0.5 % | ≤ 1 % | ≤ 2 % | ≤ 5 % | newly killed % for a 40 % cut |" in text
    scaled = next(o for o in results[0].outcomes if o.name == "tsafrir-scaled")
    assert scaled.curve
    figures = report.frontier_figures(scaled)
    assert figures is not None
    hindsight = text.split("Trade-off on the test window")[1]
    row = next(line for line in hindsight.splitlines() if line.startswith("| tsafrir-scaled | "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    want = [report._number(figures["best_cut_pct"][k]) for k in ("0.5", "1", "2", "5")]
    assert cells[1:5] == want
    # The request has no knob and no curve: no row.
    assert "| request |" not in hindsight
    request = next(o for o in results[0].outcomes if o.name == "request")
    assert report.frontier_figures(request) is None


def test_table_and_document_carry_the_hindsight_ceiling() -> None:
    ctx, results = evaluated()
    found = results[0].ceiling
    test = slice(ctx.timeline.split.validation_end, None)
    obs = observe(ctx.timeline.jobs, Target.TIME).take(test)
    users = [job.request.user_name for job in ctx.timeline.jobs[test]]
    assert found["user"]["waste_cut_pct"] == ceiling(obs, users, ctx.kill_budget)[0]
    text = report.table(results[0], ctx).split("Ceiling in hindsight")[1]
    row = next(line for line in text.splitlines() if line.startswith("| user | "))
    assert row == f"| user | 3 | {found['user']['waste_cut_pct']:.1f} | {found['user']['lost_pct']:.2f} |"
    assert "| user + name | 3 |" in text  # the toy jobs have no names
    back = json.loads(json.dumps(report.document(results, ctx), allow_nan=False))
    assert back["targets"]["time"]["ceiling"] == found
    assert back["targets"]["memory"]["ceiling"] == {}  # skipped: no ceiling either
    assert "Ceiling in hindsight" not in report.table(results[1], ctx)


def test_knob_shows_multipliers_as_such_and_names_other_knobs() -> None:
    assert report._knob(Outcome("tsafrir-scaled", knob={"multiplier": 649.0})) == "x649"
    assert report._knob(Outcome("harp-tree", knob={"factor": 51.4})) == "x51.4"
    # ours' knob is a penalty and a rung count, not a factor applied to the prediction
    ours = Outcome("ours", knob={"penalty": 18300.0, "rungs": 10.0})
    assert report._knob(ours) == "penalty=1.83e+04 rungs=10"


def test_document_is_strict_json_with_every_figure() -> None:
    ctx, results = evaluated()
    doc = report.document(results, ctx)
    text = json.dumps(doc, allow_nan=False)  # NaN became null
    back = json.loads(text)
    assert back["trace"] == "toy" and back["kill_budget"] == 0.05
    assert back["split"]["windows"]["test"]["jobs"] == 60
    assert back["split"]["windows"]["train"]["first_submit"] == 0
    time = back["targets"]["time"]
    assert time["usable_jobs"] == {"train": 180, "validation": 60, "test": 60}
    scaled = time["strategies"]["tsafrir-scaled"]
    assert scaled["test"]["newly_killed_pct"] is not None and scaled["validation"]["n"] == 60
    assert scaled["knob"]["multiplier"] > 0 and len(scaled["pareto"]) > 10
    assert set(scaled["frontier"]["best_cut_pct"]) == {"0.5", "1", "2", "5"}
    assert list(scaled["frontier"]["lost_pct_for_cut"]) == ["40"]
    assert time["strategies"]["broken"]["error"].startswith("RuntimeError")
    assert time["strategies"]["request"]["test"]["up_mape"] is None  # NaN: nobody under-predicted
    assert back["targets"]["memory"]["skipped"]


def test_plot_draws_a_png() -> None:
    ctx, results = evaluated()
    assert (report_plot.draw(results, ctx) or b"")[:8] == b"\x89PNG\r\n\x1a\n"
    assert report_plot.draw(results[1:], ctx) is None


def test_a_time_no_date_holds_is_shown_not_an_error() -> None:
    """A submit time past the year 9999 (a store row written before the readers checked times)
    ended the table and the JSON in `ValueError: year 33658 is out of range`: the table shows the
    unix time, the JSON null."""
    late = jobs(300)
    late[-1] = dataclasses.replace(
        late[-1], request=dataclasses.replace(late[-1].request, submit_time=10**12)
    )
    timeline = chronological_split(late)
    result = evaluate_target(timeline, Target.TIME, [RequestStrategy(Target.TIME)], 0.05)
    ctx = report.Context("late", "late.db", 0.05, (0.6, 0.2), timeline, input_jobs=300)
    assert "Test window 1970-01-03 .. unix time 1000000000000:" in report.table(result, ctx)
    test = report.document([result], ctx)["split"]["windows"]["test"]
    assert test["last_submit"] == 10**12 and test["utc"][1] is None


def test_a_trace_name_of_bad_tex_is_drawn_as_written() -> None:
    """The plot's titles name the trace, any file name: matplotlib read `tr$\\frac{a$` as
    mathematics and `harp evaluate --out` ended in a ValueError traceback drawing it."""
    ctx, results = evaluated()
    ctx = dataclasses.replace(ctx, trace="tr$\\frac{a$")
    assert (report_plot.draw(results, ctx) or b"")[:8] == b"\x89PNG\r\n\x1a\n"
