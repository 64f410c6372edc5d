"""`harp advise`: for a job you are about to submit, what each way of running it would take and cost,
from your own past runs of it (docs/advice.md, "Advice for users").

Run by any user on a host where the daemon's advice socket is: the daemon knows who you are from
the kernel and answers from your jobs alone. The socket: ``--socket``, else ``$HARP_ADVICE_SOCKET``,
else ``[advice] socket`` of the daemon's configuration when this user may read it, else
/run/slurm-harp/advice.sock.

Exit status: 0 advice printed (it may say "no evidence"); 1 the daemon refused or is not there;
2 a bad option or script.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import grpc
from google.protobuf import json_format

from slurm_harp.advice.gpu_memory import STAGES, STATE_BYTES
from slurm_harp.advice.sbatch_directives import MAX_COUNT
from slurm_harp.advice.script import MAX_SCAN, parse_script
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.commands.advice_table import render
from slurm_harp.commands.arguments import count_to, positive
from slurm_harp.commands.terminal import printable
from slurm_harp.config import DEFAULT_ADVICE_SOCKET, DEFAULT_PATH, ConfigError, load
from slurm_harp.core.request import JobRequest
from slurm_harp.core.text import bounded_text
from slurm_harp.regular_file import read_regular
from slurm_harp.server.convert import request_to_proto
from slurm_harp.slurm_formats import OutOfRange, parse_time_limit

SOCKET_ENV = "HARP_ADVICE_SOCKET"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_MIN = {"s": 1 / 60, "m": 1.0, "h": 60.0, "d": 1440.0}
MAX_TIMEOUT_S = 3600


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "advise",
        help="what each way of running a job would take and cost, from your own runs of it",
        description="Asks the daemon, over its advice socket, for the job you describe (a script "
        "and/or options): each partition and size your own past runs of that job name give "
        "evidence for, its run time, first time limit and expected cost (re-runs included), and "
        "the cheapest within --deadline, the fastest within --budget and the Pareto set.",
    )
    p.add_argument("--script", type=Path, help="the batch script: its #SBATCH lines, and sbatch's "
                   "SBATCH_* variables over them, describe the job")  # fmt: skip
    p.add_argument("--name", help="the job name (sbatch -J; default: the script's -J, else its file name, "
                   "as sbatch names it)")  # fmt: skip
    # Read by the one text rule (core.text), as JobRequest reads --name: a byte that is not UTF-8 is
    # "?", not a protobuf encoding error.
    p.add_argument(
        "--partition",
        type=bounded_text,
        action="append",
        default=[],
        help="compare this partition (repeat; default: all)",
    )
    p.add_argument("--qos", help="the job's QOS (sbatch -q); overrides the script's")
    p.add_argument("--cpus", type=_count, help="the CPUs you would ask for (overrides the script's)")
    p.add_argument("--gpus", type=_count, help="GPUs per node you would ask for (overrides the script's)")
    p.add_argument(
        "--exclusive",
        action=argparse.BooleanOptionalAction,
        help="whole nodes, as sbatch --exclusive gives and bills them (--no-exclusive: nodes shared; "
        "overrides the script's)",
    )
    p.add_argument("--deadline", type=minutes, help="the run must end within: 90m, 2h, 1-00:00:00 ...")
    p.add_argument("--budget", type=positive, help="the most the run may cost, in the site's currency")
    facts = p.add_argument_group("a DNN training (ZeRO data parallelism: does it fit a GPU?)")
    facts.add_argument("--params", type=positive, help="the model's parameter count, e.g. 7.5e9")
    facts.add_argument("--zero-stage", type=int, choices=STAGES, default=None, help="ZeRO stage (default 0)")
    facts.add_argument("--precision", choices=sorted({p for p, _ in STATE_BYTES}), help="default mixed")
    facts.add_argument("--optimizer", choices=sorted({o for _, o in STATE_BYTES}), help="default adam")
    p.add_argument("--socket", type=Path, help=f"the advice socket (default: ${SOCKET_ENV}, the config's, "
                   f"else {DEFAULT_ADVICE_SOCKET})")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")
    p.add_argument("--timeout", type=_seconds, default=30.0, help="seconds (default: %(default)s)")
    p.set_defaults(func=run)


_count = count_to(MAX_COUNT)  # as Slurm holds a count, as the plugin bounds it


def _seconds(text: str) -> float:
    """A wait: gRPC's deadline overflows (an instant DEADLINE_EXCEEDED) long before 1e300 s."""
    value = positive(text)
    if value > MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TIMEOUT_S} seconds: {text!r}")
    return value


def minutes(text: str) -> float:
    """``30s``, ``90m``, ``2h``, ``1d`` or a Slurm time limit (``90``, ``1:30:00``, ``1-00:00:00``)."""
    found = _DURATION.match(text.strip())
    if found:
        value = float(found.group(1)) * _UNIT_MIN[found.group(2)]
    else:
        try:
            limit = parse_time_limit(text)
        except OutOfRange:
            raise argparse.ArgumentTypeError(f"too long: {text!r}") from None
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90m, 2h, 1:30:00)") from None
        if limit is None:
            raise argparse.ArgumentTypeError(f"not a finite duration: {text!r}")
        value = float(limit)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0: {text!r}")
    return value


def advice_socket(given: Path | None) -> Path:
    if given is not None:
        return given
    if os.environ.get(SOCKET_ENV):
        return Path(os.environ[SOCKET_ENV])
    if os.access(DEFAULT_PATH, os.R_OK):
        try:
            configured = load(DEFAULT_PATH).advice.socket
        except ConfigError:
            configured = None
        if configured is not None:
            return configured
    return DEFAULT_ADVICE_SOCKET


def read_script(path: Path) -> str:
    """The script's first MAX_SCAN + 1 bytes (all its signature can use) if it is a regular file
    (regular_file: a FIFO, a device or a directory is refused, never waited on nor read without
    end); OSError as open() or read() raise it. ValueError when its header (the #SBATCH lines and
    comments before the first command) is not over within them: a directive past them, or cut by
    them, would be missed or misread."""
    data = read_regular(path, size=MAX_SCAN + 1)
    text = data.decode("utf-8", errors="surrogateescape")
    if len(data) > MAX_SCAN and all(
        not line.strip() or line.lstrip().startswith("#") for line in text.split("\n")
    ):
        raise ValueError(
            f"{path}: its #SBATCH header goes on past the first {MAX_SCAN} bytes, all harp reads"
        )
    return text


def build_request(args: argparse.Namespace) -> pb.AdviceRequest:
    """The AdviceRequest of the options; ValueError for a bad script."""
    job = JobRequest()
    training = None
    exclusive = False
    if args.script is not None:
        parsed = parse_script(read_script(args.script), os.environ)
        job, training, exclusive = parsed.request, parsed.training, parsed.exclusive
    if args.name is not None:
        job = _with(job, job_name=args.name)
    if args.qos is not None:
        job = _with(job, qos=args.qos)
    if args.cpus is not None:
        job = _with(job, min_cpus=args.cpus, num_tasks=None, cpus_per_task=None)
    if args.gpus is not None:
        job = _with(job, gpus_per_node=args.gpus)
    if job.job_name is None and args.script is not None:
        # sbatch's name for a job without -J, the script file's name (opt.c: base_name of its path),
        # which the hook sends and accounting keeps.
        job = _with(job, job_name=args.script.name)
    if job.job_name is None:
        raise ValueError("give the job's name (--name, or -J in the script): history is found by name")
    request = pb.AdviceRequest(job=request_to_proto(job), partitions=args.partition)
    request.exclusive = exclusive if args.exclusive is None else args.exclusive
    if args.deadline is not None:
        request.deadline_minutes = args.deadline
    if args.budget is not None:
        request.budget = args.budget
    if args.params is not None:
        request.training.parameters = args.params
        request.training.zero_stage = args.zero_stage or 0
        request.training.precision = args.precision or "mixed"
        request.training.optimizer = args.optimizer or "adam"
    elif training is not None:
        request.training.parameters = training.parameters
        request.training.zero_stage = args.zero_stage if args.zero_stage is not None else training.stage
        request.training.precision = args.precision or training.precision
        request.training.optimizer = args.optimizer or training.optimizer
    elif any(v is not None for v in (args.zero_stage, args.precision, args.optimizer)):
        raise ValueError("--zero-stage, --precision and --optimizer describe a training: give --params too")
    return request


def _with(job: JobRequest, **changes: object) -> JobRequest:
    return replace(job, **changes)  # type: ignore[arg-type]


def ask_daemon(sock: Path, request: pb.AdviceRequest, timeout: float) -> pb.Advice:
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        reply: pb.Advice = pb_grpc.AdvisorStub(channel).Advise(request, timeout=timeout)
        return reply


def run(args: argparse.Namespace) -> int:
    try:
        request = build_request(args)
    except (OSError, ValueError) as exc:
        print(printable(f"harp advise: {exc}"), file=sys.stderr)
        return 2
    sock = advice_socket(args.socket)
    try:
        reply = ask_daemon(sock, request, args.timeout)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        if code is grpc.StatusCode.UNAVAILABLE and not sock.exists():
            detail = f"no advice socket at {sock} (is the daemon's [advice] socket set? --socket PATH)"
        print(printable(f"harp advise: {detail}"), file=sys.stderr)
        return 1
    if args.json:
        print(json_format.MessageToJson(reply, preserving_proto_field_name=True))
    else:
        print(render(reply, request))
    return 0
