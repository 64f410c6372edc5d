"""A job that asks no memory is served with the memory slurmctld gives it, which accounting records
as its ReqMem and training reads (core.memory_default, server.slurm_memory_defaults). Before, the
daemon saw no memory (NaN) where every training row had the default: a model that never met NaN
there reads it as 0 MB. The scontrol text is a real slurmctld 22.05's (slurm.conf DefMemPerCPU=512,
partitions percpu DefMemPerCPU=300 and pernode DefMemPerNode=700)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.features import FEATURE_NAMES, vectorize
from slurm_harp.core.memory_default import MemoryDefault, MemoryDefaults
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.predictor import Predictor
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.server.convert import request_from_proto, request_to_proto
from slurm_harp.server.service import PredictorService
from slurm_harp.server.serving_metrics import ServingMetrics
from slurm_harp.server.slurm_memory_defaults import SlurmMemoryDefaults, parse_memory_defaults

CONFIG = """Configuration data as of 2026-12-07T08:00:00
DefMemPerCPU            = 512
JobAcctGatherParams     = OverMemoryKill
MaxMemPerNode           = UNLIMITED
"""
PARTITIONS = (
    "PartitionName=batch AllowGroups=ALL Default=YES DefaultTime=NONE Nodes=c1 State=UP "
    "TotalCPUs=4 JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=4,mem=22900M\n"
    "PartitionName=percpu AllowGroups=ALL Default=NO Nodes=c1 State=UP JobDefaults=(null) "
    "DefMemPerCPU=300 MaxMemPerNode=UNLIMITED TRES=cpu=4,mem=22900M\n"
    "PartitionName=pernode AllowGroups=ALL Default=NO Nodes=c1 State=UP JobDefaults=(null) "
    "DefMemPerNode=700 MaxMemPerNode=UNLIMITED TRES=cpu=4,mem=22900M\n"
)
SITE = parse_memory_defaults(CONFIG, PARTITIONS)
MEM = FEATURE_NAMES.index("log_mem_per_node_mb")


def test_scontrol_s_defaults_are_read() -> None:
    assert (
        MemoryDefaults(
            MemoryDefault(per_cpu_mb=512),
            {"percpu": MemoryDefault(per_cpu_mb=300), "pernode": MemoryDefault(per_node_mb=700)},
        )
        == SITE
    )
    none = parse_memory_defaults("DefMemPerNode = UNLIMITED\n", PARTITIONS.replace("DefMemPerCPU=300", ""))
    assert none == MemoryDefaults(None, {"pernode": MemoryDefault(per_node_mb=700)})


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ("batch", MemoryDefault(per_cpu_mb=512)),  # no default of its own: slurm.conf's
        ("percpu", MemoryDefault(per_cpu_mb=300)),
        ("pernode", MemoryDefault(per_node_mb=700)),
        ("batch,debug", MemoryDefault(per_cpu_mb=512)),  # a list that agrees
        ("percpu,batch", None),  # which one the job gets is not known at submission
        (None, None),  # no partition named while one has its own
    ],
)
def test_a_job_gets_its_partition_s_default_else_slurm_conf_s(
    names: str | None, expected: MemoryDefault | None
) -> None:
    assert SITE.for_partitions(names) == expected


# Jobs asking no memory as the plugin sends them, and the same jobs as training reads them from
# sacct (ReqMem: the job's total in 22.05, read per node), as the real cluster recorded them.
SERVED_AND_TRAINED = [
    (JobRequest(partition="batch", min_cpus=1), 512),
    (JobRequest(partition="batch", min_cpus=2, num_tasks=2), 1024),
    (JobRequest(partition="percpu", min_cpus=2, cpus_per_task=2), 600),
    (JobRequest(partition="pernode", min_cpus=2, cpus_per_task=2), 700),
]


def as_the_daemon_builds(request: JobRequest) -> JobRequest:
    """``request`` as the plugin sends it and the daemon builds it, with the site's defaults."""
    return request_from_proto(request_to_proto(request), SITE)


@pytest.mark.parametrize(("served", "req_mem_mb"), SERVED_AND_TRAINED)
def test_a_job_asking_no_memory_is_served_as_accounting_records_it(
    served: JobRequest, req_mem_mb: int
) -> None:
    trained = vectorize([JobRequest(partition=served.partition, min_cpus=served.min_cpus,
                                    mem_per_node_mb=req_mem_mb)])  # fmt: skip
    assert np.isnan(vectorize([served])[0, MEM])  # before
    assert vectorize([as_the_daemon_builds(served)])[0, MEM] == trained[0, MEM]


def test_a_job_s_own_memory_is_kept_and_never_a_request_policy_may_lower() -> None:
    own = JobRequest(partition="batch", min_cpus=2, mem_per_cpu_mb=100)
    assert as_the_daemon_builds(own) == own
    filled = as_the_daemon_builds(JobRequest(partition="batch", min_cpus=2))
    assert filled.default_mem_per_cpu_mb == 512 and filled.requested(Target.MEMORY) is None


class Model:
    version, quantiles = "memory@1", (0.9,)

    def predict_quantile(self, x: np.ndarray, quantile: float) -> np.ndarray:
        return np.array([10.0])


def test_the_daemon_fills_in_the_default_for_the_features_only() -> None:
    seen: list[JobRequest] = []

    def recording(requests: Sequence[JobRequest], history: np.ndarray | None = None, /) -> np.ndarray:
        seen.extend(requests)
        return vectorize(requests, history)

    predictor = Predictor(Policy(default_mode=Mode.REWRITE), recording, {Target.MEMORY: Model()})
    predictor.use_memory_defaults(SITE)
    service = PredictorService(predictor, ServingMetrics(CollectorRegistry()))
    asks = [
        JobRequest(partition="batch", min_cpus=2, time_limit_minutes=60),
        JobRequest(partition="pernode", min_cpus=2, time_limit_minutes=60),
        JobRequest(partition="percpu,batch", min_cpus=2, time_limit_minutes=60),
        JobRequest(partition="batch", min_cpus=2, time_limit_minutes=60, mem_per_cpu_mb=100),
    ]
    replies = [pb.Decision.FromString(service.answer(request_to_proto(a).SerializeToString())) for a in asks]
    assert [(r.default_mem_per_cpu_mb, r.default_mem_per_node_mb) for r in seen] == [
        (512, None),
        (None, 700),
        (None, None),
        (None, None),
    ]
    memory = [t for r in replies[:3] for t in r.targets if t.target == pb.TARGET_MEMORY]
    assert [(t.reason, t.HasField("new_value")) for t in memory] == [(pb.REASON_NOT_REQUESTED, False)] * 3


class Scontrol:
    def __init__(self) -> None:
        self.config, self.partitions, self.fail = CONFIG, PARTITIONS, False
        self.calls = 0

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls += 1
        if self.fail:
            raise RuntimeError("scontrol show config exited 1: Unable to contact slurm controller")
        return self.config if "config" in argv else self.partitions


def test_a_failed_or_odd_reading_keeps_the_last_good_one_said_once(caplog: pytest.LogCaptureFixture) -> None:
    applied: list[MemoryDefaults] = []
    now = [0.0]
    scontrol = Scontrol()
    reader = SlurmMemoryDefaults(applied.append, scontrol, refresh_seconds=600, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="slurm_harp.server.slurm_memory_defaults"):
        reader.poll()
        reader.poll()  # not due: scontrol not run again
        assert applied == [SITE] and scontrol.calls == 2
        scontrol.fail = True
        now[0] += 600
        reader.poll()
        now[0] += 30
        reader.poll()  # not due: retried after a minute
        assert scontrol.calls == 3
        now[0] += 30
        reader.poll()
        scontrol.fail, scontrol.config = False, "DefMemPerCPU = lots\n"
        now[0] += 60
        reader.poll()
        scontrol.config = CONFIG.replace("512", "1024")
        now[0] += 600
        reader.poll()
    assert applied == [SITE, parse_memory_defaults(scontrol.config, PARTITIONS)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned  # the failure and the odd value in one spell: said once
    assert "Unable to contact slurm controller" in warned[0] and "keeping the last reading" in warned[0]
    assert "memory defaults: read again" in caplog.text
    assert "slurm.conf 1024 MB per CPU; partitions of their own: percpu 300 MB per CPU" in caplog.text


def test_an_odd_value_is_named() -> None:
    with pytest.raises(ValueError, match=r"partition percpu: DefMemPerCPU='-3' is no size in MB"):
        parse_memory_defaults(CONFIG, PARTITIONS.replace("DefMemPerCPU=300", "DefMemPerCPU=-3"))
