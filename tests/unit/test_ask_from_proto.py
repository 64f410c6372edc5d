"""An advice request's partitions are read by the one text rule (core.text), as the job's own."""

from __future__ import annotations

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.text import MAX_TEXT_BYTES
from slurm_harp.server.advice_service import ask_from_proto


def test_partition_names_are_cut_by_the_text_rule_and_said_once() -> None:
    long = "p" * 5000
    ask = ask_from_proto(pb.AdviceRequest(partitions=[long, long + "x", "", "batch", "é" * 200]))
    assert ask.partitions == ("p" * MAX_TEXT_BYTES, "batch", "é" * (MAX_TEXT_BYTES // 2))
    job = ask_from_proto(pb.AdviceRequest(job=pb.SubmitRequest(partition=long))).job
    assert job.partition == ask.partitions[0]  # the job's own partition by the same rule
