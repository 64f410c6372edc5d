"""`harp demo`: train on the bundled real trace, serve it over real gRPC, and replay held-out jobs.

Everything but Slurm itself is the production path: the SWF reader, training with the asymmetric
(quantile) loss, ONNX export with its parity check, the model store, the daemon on a Unix socket,
and gRPC calls carrying each held-out job's request. Jobs are replayed in submit order from the
last part of the trace, which training never saw.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from importlib import resources
from pathlib import Path

import grpc

from slurm_harp.accounting import JobRecord, load_records
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.config import parse
from slurm_harp.core.message import format_minutes
from slurm_harp.core.request import Target
from slurm_harp.server.convert import request_to_proto
from slurm_harp.server.daemon import Daemon

BUNDLED = "KTH-SP2-1996-2.1-cln.swf.gz"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("demo", help="train on a bundled real trace and replay jobs through gRPC")
    p.add_argument("--trace", default=None, help=f"SWF/CSV/sacct file (default: bundled {BUNDLED})")
    p.add_argument("--holdout", type=float, default=0.2, help="last fraction replayed (default: %(default)s)")
    p.add_argument("--show", type=int, default=10, help="decisions printed (default: %(default)s)")
    p.add_argument("--quantile", type=float, default=0.9, help="policy quantile (default: %(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from slurm_harp.learning.walltime import TrainingError, train_walltime
    from slurm_harp.model.store import ModelStore

    logging.getLogger("slurm_harp").setLevel(logging.WARNING)
    trace = Path(args.trace) if args.trace else Path(str(resources.files("slurm_harp") / "data" / BUNDLED))
    records = sorted(load_records(trace), key=lambda r: r.request.submit_time or 0)
    cut = int(len(records) * (1 - args.holdout))
    past, future = records[:cut], [r for r in records[cut:] if r.request.time_limit_minutes]
    print(
        f"trace {trace.name}: {len(records)} jobs; training on the first {len(past)}, replaying {len(future)}"
    )
    with tempfile.TemporaryDirectory(prefix="harp-demo-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        try:
            result = train_walltime(past, source=trace.name)
        except TrainingError as exc:
            print(f"training failed: {exc}")
            return 1
        version = ModelStore(work / "store").publish(Target.TIME, result.files, result.card)
        print(
            f"trained quantile models {[q['quantile'] for q in result.card['quantiles']]} "
            f"in {time.monotonic() - t0:.1f} s, ONNX parity {result.card['parity_max_abs_error']:.1e}; "
            f"model {version}"
        )
        settings = parse(
            {
                "server": {"socket": str(work / "harp.sock")},
                "store": {"path": str(work / "store")},
                "policy": {"mode": "rewrite", "quantile": args.quantile},
            }
        )
        daemon = Daemon(settings)
        daemon.start()
        try:
            replies = _replay(work / "harp.sock", future)
        finally:
            daemon.stop(grace=0)
    _report(future, replies, args.show)
    return 0


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
    print(f"{'job':>8} {'user':>6} {'asked':>11} {'ran':>11} {'decision':<28} outcome")
    step = max(len(jobs) // max(show, 1), 1)
    waste_before = waste_after = 0.0
    rewritten = killed = 0
    for i, (job, reply) in enumerate(zip(jobs, replies, strict=True)):
        asked = float(job.request.time_limit_minutes or 0)
        ran = job.elapsed_s / 60
        time_d = next(t for t in reply.targets if t.target == pb.TARGET_TIME)
        limit = float(time_d.new_value) if time_d.action == pb.ACTION_REWRITE else asked
        cores = job.request.min_cpus or 1
        ok = job.censored or ran <= limit or ran > asked
        if not job.censored:
            waste_before += cores * max(asked - ran, 0)
            waste_after += cores * max(limit - ran, 0) if ok else cores * asked  # a killed job wastes it all
        rewritten += time_d.action == pb.ACTION_REWRITE
        killed += not ok
        if i % step == 0 and i // step < show:
            what = (
                f"rewrite to {format_minutes(limit)}"
                if time_d.action == pb.ACTION_REWRITE
                else pb.Reason.Name(time_d.reason).removeprefix("REASON_").lower()
            )
            print(
                f"{job.job_id:>8} {job.request.user_name or '-':>6} {format_minutes(asked):>11} "
                f"{format_minutes(ran):>11} {what:<28} {'ok' if ok else 'KILLED at new limit'}"
            )
    n = len(jobs)
    print(
        f"\nrewritten {rewritten}/{n} ({100 * rewritten / n:.1f} %); "
        f"newly killed {killed} ({100 * killed / n:.2f} %); "
        f"reserved-but-unused core-minutes cut by {100 * (1 - waste_after / waste_before):.1f} % "
        "(a killed job counts its whole request as waste)"
    )
    print(
        "This first model sees only the request, not the user's history, and uses one global quantile: "
        "a baseline, not yet a model to rewrite with."
    )
