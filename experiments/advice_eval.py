"""Study: how often a site's history allows advice, and what the advice would have saved.

    PYTHONPATH=daemon:. .venv/bin/python -m experiments.advice_eval [--traces KTH,SDSC,CTC,LANL]
        [--out experiments/results/advice]

Issue 24 item 5. Each shared trace is split as `harp evaluate` splits it; every job of its test
window (the last 20 % by submit time) meets `harp advise` as it would have at its submission, with
the runs of its user and job name (SWF: executable) that had ended by then
(evaluation/advice_replay.py says how, and how the savings are counted). A trace whose jobs carry
no user or no job name is skipped: the advice finds no evidence for them. Writes TRACE.json and
TRACE.md per trace and README.md (the tables docs/advice.md copies) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.common import shared_timeline
from slurm_harp.core.job import JobRecord, ended_by
from slurm_harp.evaluation.advice_replay import History, flat_tariff, replay, site_cap, summarise
from slurm_harp.server.advisor import NEWEST_RUNS

COMMAND = "PYTHONPATH=daemon:. .venv/bin/python -m experiments.advice_eval"
SCOPES = {
    "s1_": "runs at ≥ 1 size",
    "s2_": "runs at ≥ 2 sizes",
    "s2neg_": "≥ 2 sizes, slope < 0",
    "s1neg_": "≥ 1 size, no slope ≥ 0",
}
ANSWERS = {"cheapest": "cheapest", "deadline": "cheapest within the request"}
LEGEND = """\
How to read them (costs are core-hours; evaluation/advice_replay.py has the method):

- **fits with slope ≥ 0 %**: of the completed test jobs with runs at ≥ 2 sizes, those whose fit says
  larger runs took as long or longer. Such runs did other work (a larger problem, other input), not
  the same work faster. The advice compares no sizes on such a fit: it prices the job's own size
  alone, so its answer keeps the size and only sets a limit. The rows "slope < 0" and "no slope ≥ 0"
  leave these jobs out.
- **jobs scored**: completed test jobs with evidence, in the row's subset; **their core-h**: what
  they used, CPUs x elapsed hours.
- **answered %**: jobs the answer exists for (within the request: some option's longest run, its
  killed attempts included, ends within the job's own time request). **other size %**, **fewer
  CPUs %**: of the jobs scored, those the answer sends to another size, to fewer CPUs.
- **quoted saving %**: the jobs' own cost against the advice's expected cost of its answer (their own
  cost where there is none).
- **replayed jobs**, **replayed saving %**: the jobs whose own size the fit spans: each one's own run
  time moved to the answer's size along the fit (`T x (size / own) ** slope`), run under the
  answer's time limit with HARP's reruns after a kill; saving against their own cost. Exact where the
  answer keeps the job's size, an estimate elsewhere (that run time was never observed).
  **median saving**: per replayed job; **run time ratio**: the moved run time over the job's own,
  median over the jobs sent to another size.
- The model check, at the jobs' own sizes: **quoted** is the advice's expected cost; **real run,
  advice's limit** the job's real run time under that option's limit, reruns included; **real run,
  own limit** what the job cost as it ran; **rerun %** the jobs killed at least once under the
  advice's limit; **past the cap %** those that would never finish; **quoted / real** the median
  per-job ratio. "the cheapest's": the jobs whose cheapest answer is their own size.
"""


def evaluate(trace: str) -> dict[str, Any]:
    """The replay of ``trace``'s test window: its parameters and figures, or why it was skipped."""
    path, timeline = shared_timeline(trace)
    name = path.name.removesuffix(".gz").removesuffix(".swf")
    jobs, first = timeline.jobs, timeline.split.validation_end
    missing = [
        what for what, has in (("user", _user), ("job name (executable)", _name)) if not any(map(has, jobs))
    ]
    if missing:
        return {"trace": name, "skipped": f"no job carries a {' or a '.join(missing)}"}
    test = jobs[first:]
    opens = test[0].request.submit_time
    assert opens is not None  # the split keeps jobs with a submit time only
    cap = site_cap(j for j in jobs[:first] if ended_by(j.end_time, opens))
    history, tariff = History(jobs), flat_tariff(cap)
    started = time.perf_counter()
    replays = [replay(job, history.before(job, NEWEST_RUNS), tariff) for job in test]
    seconds = time.perf_counter() - started
    print(f"{name}: {len(test)} test jobs replayed in {seconds:.0f} s", file=sys.stderr)
    return {
        "trace": name,
        "test_window": [_day(opens), _day(test[-1].request.submit_time)],
        "cap_minutes": math.ceil(cap),
        "newest_runs": NEWEST_RUNS,
        "billing": "CPUs x hours (no TRESBillingWeights in the trace): core-hours",
        "figures": summarise(replays),
    }


def _user(job: JobRecord) -> bool:
    return job.request.user_name is not None


def _name(job: JobRecord) -> bool:
    return job.request.job_name is not None


def _day(unix: int | None) -> str:
    return "?" if unix is None else datetime.fromtimestamp(unix, UTC).date().isoformat()


def fmt(value: float | None, digits: int = 1) -> str:
    """A figure as the tables show it: ``-`` for none, thousands grouped when ``digits`` is 0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.0f}" if digits == 0 else f"{value:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines."""
    return [" | ".join(["", *header, ""]).strip(), "|" + "---|" * len(header)] + [
        " | ".join(["", *row, ""]).strip() for row in rows
    ]


def short(result: dict[str, Any]) -> str:
    """``CTC-SP2`` for CTC-SP2-1996-3.1-cln."""
    return "-".join(str(result["trace"]).split("-")[:2])


def coverage_table(results: Sequence[dict[str, Any]]) -> list[str]:
    header = ["trace", "test jobs", "≥ 1 size: jobs %", "core-h %", "≥ 2 sizes: jobs %", "core-h %"]
    keys = ["covered1_pct", "covered1_cost_pct", "covered2_pct", "covered2_cost_pct", "s2_slope_nonneg_pct"]
    rows = []
    for r in results:
        if "skipped" in r:
            rows.append([short(r), f"skipped: {r['skipped']}", "", "", "", "", ""])
        else:
            rows.append([short(r), fmt(r["figures"]["jobs"], 0), *(fmt(r["figures"][k]) for k in keys)])
    return table([*header, "fits with slope ≥ 0 %"], rows)


def part(figures: dict[str, float | None], prefix: str) -> dict[str, float | None]:
    """The figures whose key starts with ``prefix``, by the rest of their key."""
    return {k.removeprefix(prefix): v for k, v in figures.items() if k.startswith(prefix)}


def savings_table(results: Sequence[dict[str, Any]], answer: str) -> list[str]:
    header = [
        "trace", "jobs scored", "their core-h", "answered %", "other size %", "fewer CPUs %",
        "quoted saving %", "replayed jobs", "replayed saving %", "median saving, core-h",
        "run time ratio, median",
    ]  # fmt: skip
    rows = []
    for r in (r for r in results if "skipped" not in r):
        for scope, label in SCOPES.items():
            f, g = part(r["figures"], scope), part(r["figures"], f"{scope}{answer}_")
            rows.append([
                f"{short(r)}, {label}", fmt(f["jobs"], 0), fmt(f["cost"], 0), fmt(g["answered_pct"]),
                fmt(g["changed_pct"]), fmt(g["smaller_pct"]), fmt(g["quoted_saving_pct"]),
                fmt(g["replayed_jobs"], 0), fmt(g["replayed_saving_pct"]),
                fmt(g["replayed_median_saving"], 2), fmt(g["changed_median_stretch"], 2),
            ])  # fmt: skip
    return table(header, rows)


def check_table(results: Sequence[dict[str, Any]]) -> list[str]:
    header = [
        "trace", "options at the job's own size", "quoted core-h", "real run, advice's limit",
        "real run, own limit", "rerun %", "past the cap %", "quoted / real, median",
    ]  # fmt: skip
    rows = []
    for r in (r for r in results if "skipped" not in r):
        for prefix, label in (("check_own_", "all"), ("check_same_", "the cheapest's")):
            f = part(r["figures"], prefix)
            rows.append([
                short(r), f"{label}: {fmt(f['jobs'], 0)}", fmt(f["quoted"], 0), fmt(f["realized"], 0),
                fmt(f["actual"], 0), fmt(f["rerun_pct"]), fmt(f["unfinished_pct"]), fmt(f["median_ratio"], 2),
            ])  # fmt: skip
    return table(header, rows)


def tables(results: Sequence[dict[str, Any]]) -> str:
    """The Markdown tables of ``results`` (README.md, and docs/advice.md's copy)."""
    parts = [
        "Coverage: test jobs whose user and job name had completed runs before their submission.",
        "",
        *coverage_table(results),
    ]
    for answer, label in ANSWERS.items():
        parts += [
            "",
            f"Savings of the {label} (completed test jobs with evidence):",
            "",
            *savings_table(results, answer),
        ]
    parts += [
        "",
        "The model against the real runs (completed test jobs, the advice's option at their own size):",
        "",
    ]
    parts += [*check_table(results), "", LEGEND]
    return "\n".join(parts)


def trace_markdown(result: dict[str, Any]) -> str:
    head = f"# Advice replayed on {result['trace']}\n\n"
    if "skipped" in result:
        return head + f"Skipped: {result['skipped']}.\n"
    window = " .. ".join(result["test_window"])
    command = f"{COMMAND} --traces {short(result).split('-')[0]}"
    head += (
        f"Test window {window}; MaxTime taken as {result['cap_minutes']} min; billing: {result['billing']}; "
        f"the newest {result['newest_runs']} runs read. Made by `{command}`.\n\n"
    )
    return head + tables([result])


def write(out: Path, results: Sequence[dict[str, Any]], argv: Sequence[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for result in results:
        (out / f"{result['trace']}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        (out / f"{result['trace']}.md").write_text(trace_markdown(result))
    command = " ".join([COMMAND, *argv])
    readme = (
        "# Advice replayed on the shared traces\n\n"
        f"Made by `{command}` (experiments/advice_eval.py; docs/advice.md reads it).\n\n" + tables(results)
    )
    (out / "README.md").write_text(readme)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", default="KTH,SDSC,CTC,LANL")
    parser.add_argument("--out", type=Path, default=Path("experiments/results/advice"))
    args = parser.parse_args()
    results = [evaluate(trace) for trace in args.traces.split(",")]
    print(tables(results))
    write(args.out, results, sys.argv[1:])


if __name__ == "__main__":
    main()
