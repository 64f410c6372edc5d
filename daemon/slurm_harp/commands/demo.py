"""`harp demo`: train on the bundled real trace, serve it over real gRPC, and replay held-out jobs.

Everything but Slurm itself is the production path: the SWF reader, `harp train`'s method (the
asymmetric model family, the choice and the calibrated safety rule on a validation window), ONNX
export with its parity check, the model store, the daemon on a Unix socket in rewrite mode, and
gRPC calls carrying each held-out job's request. Jobs are replayed in submit order from the last
part of the trace, which training never saw; the daemon's history features see exactly the jobs
that had ended before each submission, as the harvester would have fed them.
"""

from __future__ import annotations

import argparse
import logging
import math
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path

import grpc
import numpy as np

from slurm_harp.accounting import JobRecord, load_records
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.commands.arguments import share, whole
from slurm_harp.commands.models import store_at
from slurm_harp.config import parse
from slurm_harp.core.history import HistoryIndex
from slurm_harp.core.message import format_minutes
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.regular_file import refuse_non_regular
from slurm_harp.server.convert import request_to_proto
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.socket_path import DaemonError, length_problem

log = logging.getLogger(__name__)
BUNDLED = "KTH-SP2-1996-2.1-cln.swf.gz"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("demo", help="train on a bundled real trace and replay jobs through gRPC")
    p.add_argument("--trace", default=None, help=f"SWF/CSV/sacct file (default: bundled {BUNDLED})")
    p.add_argument("--holdout", type=share, default=0.2, help="last fraction replayed (default: %(default)s)")
    p.add_argument("--show", type=whole, default=10, help="decisions printed (default: %(default)s)")
    p.add_argument(
        "--store",
        default=None,
        help="serve this model store instead of training one (e.g. models/reference, trained on the "
        "same first 80 %% of the bundled trace)",
    )
    p.set_defaults(func=run)


class ReplayHistory:
    """The history a live daemon fed by the harvester would have had: before each submission,
    every job of the trace that had ended by then (a HistorySource for the Predictor)."""

    def __init__(self, records: list[JobRecord]) -> None:
        self._ended = sorted((r for r in records if r.end_time is not None), key=lambda r: r.end_time or 0)
        self._next = 0
        self._index = HistoryIndex()
        self._lock = threading.Lock()

    def row(self, request: JobRequest, at: int) -> np.ndarray:
        with self._lock:  # submissions arrive in time order; the gRPC pool may overlap two
            while self._next < len(self._ended) and (self._ended[self._next].end_time or 0) <= at:
                self._index.add(self._ended[self._next])
                self._next += 1
            return self._index.row(request, at)


def run(args: argparse.Namespace) -> int:
    """The demo, with slurm_harp's INFO lines quiet (its own output tells the story); the logger's
    level is restored after, for callers in the same process (tests)."""
    logger = logging.getLogger("slurm_harp")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        return _demo(args)
    finally:
        logger.setLevel(level)


def split_trace(trace: Path, holdout: float) -> tuple[list[JobRecord], list[JobRecord], list[JobRecord]]:
    """(every record in submit order, the jobs trained on, the later jobs replayed): cut before the
    last ``holdout`` of the records; replayed jobs must carry a time limit. OSError/ValueError when
    the trace cannot be read."""
    records = sorted(load_records(trace), key=lambda r: r.request.submit_time or 0)
    cut = int(len(records) * (1 - holdout))
    return records, records[:cut], [r for r in records[cut:] if r.request.time_limit_minutes]


def bundled_trace() -> Path:
    return Path(str(resources.files("slurm_harp") / "data" / BUNDLED))


def serves_time(path: str) -> bool:
    """Whether the model store at ``path`` has a time model to serve; said when not: a directory
    one level too high (models/ for models/reference) or empty served no model either."""
    store = store_at(path)
    if store is None:
        return False
    current = store.current(Target.TIME)
    if current.path is not None:
        return True
    if current.unreadable:
        why = f": {current.unreadable}"
    elif current.missing:
        why = f": time/CURRENT names {current.names}, which is not there"
    else:
        why = " (give the directory holding time/CURRENT)"
    log.error("no time model in %s%s", path, why)
    return False


def _demo(args: argparse.Namespace) -> int:
    trace = Path(args.trace) if args.trace else bundled_trace()
    try:
        refuse_non_regular(trace)  # a FIFO would be waited on for good, a device read without end
        records, past, future = split_trace(trace, args.holdout)
    except (OSError, ValueError) as exc:
        log.error("cannot read %s: %s", trace, exc)
        return 2
    if args.store and not serves_time(args.store):  # every job "no_model", exit 0, before
        return 2
    print(
        f"trace {trace.name}: {len(records)} jobs; training on the first {len(past)}, replaying {len(future)}"
    )
    with tempfile.TemporaryDirectory(prefix="harp-demo-") as tmp:
        work = Path(tmp)
        if (problem := length_problem(work / "harp.sock")) is not None:  # said before training
            log.error("the demo's socket %s is %s (it is made in $TMPDIR)", work / "harp.sock", problem)
            return 2
        # `--store models/reference` is from here: harp.toml's paths must be absolute (config.reader).
        store = Path(args.store).absolute() if args.store else _train(past, trace, work / "store")
        if store is None:
            return 1
        settings = parse(
            {
                "server": {"socket": str(work / "harp.sock")},
                "store": {"path": str(store)},
                "policy": {"mode": "rewrite", "floor": {"time_minutes": 1}},
            }
        )
        daemon = Daemon(settings, history=ReplayHistory(records))
        try:
            daemon.start()
        except DaemonError as exc:
            log.error("the demo's daemon cannot start: %s", exc)
            daemon.stop(grace=0)
            return 2
        try:
            replies = _replay(work / "harp.sock", future)
        finally:
            daemon.stop(grace=0)
    _report(future, replies, args.show)
    return 0


def _train(past: list[JobRecord], trace: Path, store: Path) -> Path | None:
    """`harp train`'s method on the past jobs, published into ``store``; None when it fails."""
    from slurm_harp.learning.trainer import TrainingError, train_target
    from slurm_harp.model.store import ModelStore

    t0 = time.monotonic()
    try:
        result = train_target(past, Target.TIME, source=trace.name)
    except TrainingError as exc:
        print(f"training failed: {exc}")
        return None
    version = ModelStore(store).publish(Target.TIME, result.files, result.card)
    rule = result.card["calibration"]
    print(
        f"published {len(result.card['models'])} models in {time.monotonic() - t0:.1f} s "
        f"(chosen on validation: {result.card['selection']['chosen']}; ONNX parity "
        f"{result.card['parity_max_abs_error']:.1e}); safety rule calibrated to "
        f"{100 * rule['kill_budget']:.0f} % newly killed on the last 20 % of the training jobs; "
        f"model {version}"
    )
    return store


def _replay(sock: Path, jobs: list[JobRecord]) -> list[pb.Decision]:
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        stub = pb_grpc.PredictorStub(channel)
        t0 = time.monotonic()
        replies = [stub.Predict(request_to_proto(job.request), timeout=5) for job in jobs]
        elapsed = time.monotonic() - t0
    print(
        f"sent {len(jobs)} submissions over gRPC (Unix socket) in {elapsed:.1f} s "
        f"({len(jobs) / elapsed:.0f}/s, one at a time)\n"
    )
    return replies


def _report(jobs: list[JobRecord], replies: list[pb.Decision], show: int) -> None:
    from slurm_harp.evaluation.costs import assess
    from slurm_harp.evaluation.observed import observe

    print(f"{'job':>8} {'user':>6} {'asked':>11} {'ran':>11} {'decision':<28} outcome")
    step = max(len(jobs) // max(show, 1), 1)
    limits = np.full(len(jobs), np.nan)
    lines: list[str] = []
    rewritten_lines: list[str] = []
    for i, (job, reply) in enumerate(zip(jobs, replies, strict=True)):
        asked = float(job.request.time_limit_minutes or 0)
        ran = job.elapsed_s / 60
        time_d = next(t for t in reply.targets if t.target == pb.TARGET_TIME)
        rewritten = time_d.action == pb.ACTION_REWRITE
        limit = float(time_d.new_value) if rewritten else asked
        limits[i] = limit if rewritten else np.nan
        sampled = i % step == 0 and i // step < show
        if sampled or (rewritten and len(rewritten_lines) < show // 2):
            what = (
                f"rewrite to {format_minutes(limit)}"
                if rewritten
                else pb.Reason.Name(time_d.reason).removeprefix("REASON_").lower()
            )
            ok = job.censored or ran <= limit or ran > asked
            line = (
                f"{job.job_id:>8} {job.request.user_name or '-':>6} {format_minutes(asked):>11} "
                f"{format_minutes(ran):>11} {what:<28} {'ok' if ok else 'KILLED at new limit'}"
            )
            (lines if sampled else rewritten_lines).append(line)
    print("\n".join(lines))
    if rewritten_lines:
        print("... and the first rewritten jobs:\n" + "\n".join(rewritten_lines))
    # The figures of `harp evaluate` (evaluation.costs), for the replayed jobs.
    f = assess(observe(jobs, Target.TIME), limits)
    saved = (f["waste_request"] or 0.0) - (f["waste"] or 0.0)
    waste = (
        "no reservation waste to cut: every replayed job that finished used all it asked for"
        if f["waste_cut_pct"] is None or math.isnan(f["waste_cut_pct"])
        else f"reservation waste (core-hours reserved but unused by finished jobs) cut by "
        f"{f['waste_cut_pct']:.1f} %: {saved:,.0f} of {f['waste_request']:,.0f} core-h "
        f"({f['kill_free_cut_pct']:.1f} % by the jobs that still finish; the rest was the killed jobs')"
    )
    print(
        f"\nrewritten {int(np.sum(~np.isnan(limits)))}/{len(jobs)} jobs; newly killed "
        f"{f['newly_killed_pct']:.2f} % (they would have finished under their own request)\n"
        f"{waste}\n"
        f"re-running the killed jobs (double the limit until they finish) costs "
        f"{f['reexec_extra_core_h']:,.0f} core-h more than the requests would have"
    )
    print(
        "Users with no job ended in the last 30 days are annotated, not rewritten (policy.require_history)."
    )
