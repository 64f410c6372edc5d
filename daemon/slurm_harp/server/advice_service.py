"""The gRPC adapter of the advice: harp.v1.Advisor/Advise, served on the advice socket alone.

The caller's identity is the peer credentials of the connection the call came on (``identify``:
server/peer_relay.py's PeerRelay.peer); a call without them (not through the relay) is refused.
The request's own user fields are never read. Errors are gRPC statuses with a message for the
user: UNAUTHENTICATED (no credentials), INVALID_ARGUMENT (a request that does not parse or
holds a bad value), PERMISSION_DENIED (a uid without a user name), UNAVAILABLE (the job store
cannot be read now), DEADLINE_EXCEEDED (no turn to compute it came within the call's deadline:
server/advice_turns.py), INTERNAL (a bug: logged).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

import grpc
from google.protobuf.message import DecodeError

from slurm_harp.advice.gpu_memory import TrainingFacts
from slurm_harp.advice.option import Option
from slurm_harp.advice.recommend import Advice, Ask
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.text import bounded_text
from slurm_harp.server.advice_turns import NoTurn, Turns
from slurm_harp.server.advisor import AdviceRefused, Advisor, UnknownUser
from slurm_harp.server.convert import request_from_proto
from slurm_harp.server.peer_relay import Peer

log = logging.getLogger(__name__)

ADVISOR = pb.DESCRIPTOR.services_by_name["Advisor"].full_name
MAX_PARTITIONS = 64


def ask_from_proto(msg: pb.AdviceRequest) -> Ask:
    """The ask of a request (its user fields dropped); ValueError names a bad value."""
    job = request_from_proto(msg.job)
    if len(msg.partitions) > MAX_PARTITIONS:
        raise ValueError(f"at most {MAX_PARTITIONS} partitions")
    training = None
    if msg.HasField("training"):
        t = msg.training
        training = TrainingFacts(
            parameters=t.parameters,
            precision=t.precision or "mixed",
            optimizer=t.optimizer or "adam",
            stage=t.zero_stage,
        )
    return Ask(
        job=job,
        partitions=tuple(dict.fromkeys(bounded_text(p) for p in msg.partitions if p)),
        deadline_minutes=_positive("deadline", msg.deadline_minutes)
        if msg.HasField("deadline_minutes")
        else None,
        budget=_positive("budget", msg.budget) if msg.HasField("budget") else None,
        training=training,
        exclusive=msg.exclusive,
    )


def _positive(what: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a finite number > 0, got {value}")
    return value


def _option_to_proto(o: Option) -> pb.AdviceOption:
    a = o.allocation
    out = pb.AdviceOption(
        partition=o.partition, size=o.size, cpus=a.cpus, nodes=a.nodes, gpus=a.gpus,
        mem_per_node_mb=math.ceil(o.mem_per_node_mb), evidence=o.evidence, priced=o.priced, note=o.note,
    )  # fmt: skip
    if o.quote is not None:
        out.time_limit_minutes = math.ceil(o.quote.configuration.limit_minutes)
        out.expected_minutes = o.quote.reexecution.expected_minutes
        out.longest_minutes = o.longest_minutes if o.longest_minutes is not None else math.inf
        out.expected_cost = o.quote.expected_cost
        out.rate = o.quote.rate
        out.expected_attempts = o.quote.reexecution.expected_attempts
        out.p_unfinished = o.quote.p_unfinished
    return out


def advice_to_proto(advice: Advice) -> pb.Advice:
    out = pb.Advice(
        user_name=advice.user or "", job_name=advice.job_name or "", unit=advice.evidence.unit,
        currency=advice.currency, evidence=advice.evidence.describe(), notes=list(advice.notes),
        options=[_option_to_proto(o) for o in advice.options],
    )  # fmt: skip
    index = {id(o): i for i, o in enumerate(advice.options)}
    if advice.cheapest is not None:
        out.cheapest = index[id(advice.cheapest)]
    if advice.fastest is not None:
        out.fastest = index[id(advice.fastest)]
    out.pareto.extend(index[id(o)] for o in advice.pareto)
    return out


class AdvisorService:
    def __init__(self, advisor: Advisor, identify: Callable[[str], Peer | None], at_once: int = 2) -> None:
        """``at_once``: advice computed at the same time, one per user; other calls wait their
        turn (server/advice_turns.py)."""
        self._advisor = advisor
        self._identify = identify
        self._turns = Turns(at_once)

    def handler(self) -> grpc.GenericRpcHandler:  # type: ignore[type-arg]
        """The harp.v1.Advisor service, its request bytes parsed in ``advise``."""
        method = grpc.unary_unary_rpc_method_handler(self.advise)  # identity (de)serializers
        return grpc.method_handlers_generic_handler(ADVISOR, {"Advise": method})

    def advise(self, data: bytes, context: grpc.ServicerContext) -> bytes:
        peer = self._identify(context.peer())
        if peer is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "advice is given on the advice socket only")
        try:
            ask = ask_from_proto(pb.AdviceRequest.FromString(data))
        except (DecodeError, ValueError, TypeError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad advice request: {exc}"[:300])
        left = threading.Event()

        def leave() -> None:  # gRPC calls it when the call ends, the client's leaving included
            left.set()
            self._turns.wake()

        if not context.add_callback(leave):
            left.set()  # already over
        try:
            with self._turns.turn(peer.uid, context.time_remaining(), left):
                advice = self._advisor.advise(peer.uid, ask)
        except NoTurn as exc:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"advice not computed: {exc}")
        except UnknownUser as exc:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        except AdviceRefused as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except Exception:
            log.exception("Advise failed for uid %d", peer.uid)
            context.abort(grpc.StatusCode.INTERNAL, "the advice failed; the daemon's log has the cause")
        try:
            return bytes(advice_to_proto(advice).SerializeToString())
        except ValueError as exc:  # protobuf's range checks: counts past uint32, memory past uint64
            why = f"bad advice request: its counts or memory give an option past what an answer holds ({exc})"
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, why[:300])
