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
import math
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import grpc
from google.protobuf import json_format

from slurm_harp.advice.gpu_memory import STAGES, STATE_BYTES
from slurm_harp.advice.script import MAX_COUNT, MAX_SCAN, parse_script
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.commands.arguments import count_to, positive
from slurm_harp.commands.terminal import printable, printable_lines
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
    p.add_argument("--script", type=Path, help="the batch script: its #SBATCH lines describe the job")
    p.add_argument("--name", help="the job name (sbatch -J); overrides the script's")
    # Read by the one text rule (core.text), as JobRequest reads --name: a byte that is not UTF-8 is
    # "?", not a protobuf encoding error.
    p.add_argument(
        "--partition",
        type=bounded_text,
        action="append",
        default=[],
        help="compare this partition (repeat; default: all)",
    )
    p.add_argument("--cpus", type=_count, help="the CPUs you would ask for (overrides the script's)")
    p.add_argument("--gpus", type=_count, help="GPUs per node you would ask for (overrides the script's)")
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


_count = count_to(MAX_COUNT)  # as Slurm holds a count (advice.script.MAX_COUNT), as the plugin bounds it


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
    if args.script is not None:
        parsed = parse_script(read_script(args.script))
        job, training = parsed.request, parsed.training
    if args.name is not None:
        job = _with(job, job_name=args.name)
    if args.cpus is not None:
        job = _with(job, min_cpus=args.cpus, num_tasks=None, cpus_per_task=None)
    if args.gpus is not None:
        job = _with(job, gpus_per_node=args.gpus)
    if job.job_name is None:
        raise ValueError("give the job's name (--name, or -J in the script): history is found by name")
    request = pb.AdviceRequest(job=request_to_proto(job), partitions=args.partition)
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


def _size(o: pb.AdviceOption, unit: str) -> str:
    return f"{o.size} {unit}{'s' if o.size != 1 else ''}"


def _minutes(value: float) -> str:
    if math.isinf(value):
        return "never"
    return f"{value:.1f} min" if value < 100 else f"{value / 60:.1f} h"


def _cost(value: float) -> str:
    return f"{value:.4g}"


def _all_memory(request: pb.AdviceRequest) -> bool:
    """Whether the job asks ``--mem=0``, all of a node's memory: an option without an amount keeps
    it (the node's memory unknown), never the partition's default."""
    return request.job.HasField("mem_per_node_mb") and request.job.mem_per_node_mb == 0


def describe(o: pb.AdviceOption, unit: str, currency: str, all_memory: bool = False) -> str:
    mem = f" --mem={o.mem_per_node_mb}M" if o.mem_per_node_mb else (" --mem=0" if all_memory else "")
    return (
        f"{o.partition}, {_size(o, unit)} on {o.nodes} node{'s' if o.nodes != 1 else ''}: "
        f"--time={o.time_limit_minutes}{mem}"
        f", expected {_minutes(o.expected_minutes)}, {_cost(o.expected_cost)} {currency}"
    )


def render(advice: pb.Advice, request: pb.AdviceRequest) -> str:
    """The answer as a short table and three lines; the job's name, the notes and all other text
    shown escaped where not printable (a name may come from someone else's script)."""
    unit, all_memory = advice.unit, _all_memory(request)
    no_amount = "all (--mem=0)" if all_memory else "default"
    lines = [
        f'advice for "{advice.job_name}" of user {advice.user_name}, from your runs: {advice.evidence}',
        f"(costs in {advice.currency}, re-runs after a kill at the time limit included; "
        "run time only: queue wait is not counted)",
        "",
    ]
    mark = {i: "" for i in range(len(advice.options))}
    if advice.HasField("cheapest"):
        mark[advice.cheapest] += "C"
    if advice.HasField("fastest"):
        mark[advice.fastest] += "F"
    for i in advice.pareto:
        mark[i] += "P"
    header = (
        "",
        "partition",
        unit + "s",
        "nodes",
        "mem/node",
        "limit",
        "expected",
        "longest",
        "cost",
        "evidence",
    )
    rows = [header]
    unpriced: dict[tuple[str, str], list[int]] = {}
    for i, o in enumerate(advice.options):
        if not o.priced:
            unpriced.setdefault((o.partition, o.note or o.evidence), []).append(o.size)
            continue
        evidence = "log-log fit" if o.evidence.startswith("fit of") else "runs at this size"
        rows.append((
            mark[i], o.partition, str(o.size), str(o.nodes),
            f"{o.mem_per_node_mb} MB" if o.mem_per_node_mb else no_amount, f"{o.time_limit_minutes} min",
            _minutes(o.expected_minutes), _minutes(o.longest_minutes), _cost(o.expected_cost),
            evidence + (f"; {o.note}" if o.note else ""),
        ))  # fmt: skip
    if len(rows) > 1:
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        for r in rows:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    else:
        lines.append("no option has evidence")
    if unpriced:
        lines.append("")
        for (partition, why), sizes in unpriced.items():
            lines.append(f"not priced in {partition}, {', '.join(map(str, sizes))} {unit}s: {why}")
    lines.append("")
    deadline = f"within {_minutes(request.deadline_minutes)}" if request.HasField("deadline_minutes") else ""
    budget = f"within {_cost(request.budget)} {advice.currency}" if request.HasField("budget") else ""
    cheapest = advice.options[advice.cheapest] if advice.HasField("cheapest") else None
    fastest = advice.options[advice.fastest] if advice.HasField("fastest") else None
    said = {"C": cheapest, "F": fastest}
    shown = {k: describe(o, unit, advice.currency, all_memory) if o else "none" for k, o in said.items()}
    lines.append(f"C cheapest{' ' + deadline if deadline else ''}: {shown['C']}")
    lines.append(f"F fastest{' ' + budget if budget else ''}: {shown['F']}")
    lines.append("P Pareto set (none both cheaper and faster): "
                 + (", ".join(f"{advice.options[i].partition} {_size(advice.options[i], unit)}"
                              for i in advice.pareto) or "none"))  # fmt: skip
    lines += [f"note: {n}" for n in advice.notes]
    return printable_lines(lines)
