"""A job that names no number of MB is served with the memory slurmctld gives it, which accounting
records as its ReqMem and training reads (core.memory_default, server.slurm_memory_defaults): the
default, else all of a node's, as for --mem=0. Before, the daemon saw no memory (NaN) where every
training row had one: a model that never met NaN there reads it as 0 MB; and --mem=0 was sent as no
memory, served with the default. The scontrol text is a real slurmctld 22.05's (slurm.conf
DefMemPerCPU=512, partitions percpu DefMemPerCPU=300 and pernode DefMemPerNode=700; and a site of
two nodes with no default)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.features import FEATURE_NAMES, vectorize
from slurm_harp.core.memory_default import (
    MAX_LISTS,
    WHOLE_NODE,
    MemoryDefault,
    MemoryDefaults,
    PartitionMemory,
)
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
    "TotalCPUs=4 JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED "
    "TRES=cpu=4,mem=22900M,node=1,billing=4\n"
    "PartitionName=percpu AllowGroups=ALL Default=NO Nodes=c1 State=UP JobDefaults=(null) "
    "DefMemPerCPU=300 MaxMemPerNode=UNLIMITED TRES=cpu=4,mem=22900M,node=1,billing=4\n"
    "PartitionName=pernode AllowGroups=ALL Default=NO Nodes=c1 State=UP JobDefaults=(null) "
    "DefMemPerNode=700 MaxMemPerNode=UNLIMITED TRES=cpu=4,mem=22900M,node=1,billing=4\n"
)
# `scontrol --all --oneliner show node` (no MemSpecLimit: the line has none).
NODE = (
    "NodeName=c1 Arch=x86_64 CoresPerSocket=4  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=0.46 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=vm "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v1294 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=22900 AllocMem=0 "
    "FreeMem=22403 Sockets=1 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=batch,percpu,pernode  BootTime=2026-12-07T03:00:39 "
    "CfgTRES=cpu=4,mem=22900M,billing=4 AllocTRES= CapWatts=n/a\n"
)
SITE = parse_memory_defaults(CONFIG, PARTITIONS, NODE)
# slurm.conf DefMemPerCPU=0: no default anywhere. Two nodes of 22900 MB, of which MemSpecLimit
# keeps 1000 for the system (a whole-node job gets, and accounting records, 21900); one partition
# without nodes.
SPEC_NODES = NODE.replace("Boards=1", "Boards=1 MemSpecLimit=1000").replace("batch,percpu,pernode", "batch")
NO_DEFAULT = parse_memory_defaults(
    "DefMemPerCPU            = 0\n",
    "PartitionName=batch Default=YES Nodes=c[1-2] DefMemPerNode=UNLIMITED "
    "TRES=cpu=8,mem=45800M,node=2,billing=8\n"
    "PartitionName=empty Default=NO Nodes=(null) DefMemPerNode=UNLIMITED TRES=(null)\n",
    SPEC_NODES + SPEC_NODES.replace("NodeName=c1", "NodeName=c2"),
)


def scontrol_text(argv: Sequence[str], config: str = CONFIG) -> str:
    """What the real slurmctld printed for ``argv`` (server.slurm_memory_defaults' three)."""
    return config if "config" in argv else NODE if "node" in argv else PARTITIONS


MEM = FEATURE_NAMES.index("log_mem_per_node_mb")


def test_scontrol_s_defaults_are_read() -> None:
    assert parse_memory_defaults(CONFIG, PARTITIONS, NODE) == MemoryDefaults(
        MemoryDefault(per_cpu_mb=512),
        {
            "batch": PartitionMemory(MemoryDefault(per_cpu_mb=512), 22900),  # slurm.conf's
            "percpu": PartitionMemory(MemoryDefault(per_cpu_mb=300), 22900),
            "pernode": PartitionMemory(MemoryDefault(per_node_mb=700), 22900),
        },
        "batch",
    )
    whole_nodes = {"batch": PartitionMemory(WHOLE_NODE, 21900), "empty": PartitionMemory(WHOLE_NODE, None)}
    assert MemoryDefaults(WHOLE_NODE, whole_nodes, "batch") == NO_DEFAULT


@pytest.mark.parametrize(
    ("site", "names", "asks", "expected"),
    [
        (SITE, "batch", False, {"default_mem_per_cpu_mb": 512, "node_mem_mb": 22900}),
        (SITE, "percpu", False, {"default_mem_per_cpu_mb": 300, "node_mem_mb": 22900}),
        (SITE, "pernode", False, {"default_mem_per_node_mb": 700, "node_mem_mb": 22900}),
        (SITE, "pernode", True, {"node_mem_mb": 22900}),  # its own memory: no default
        (SITE, None, False, {"default_mem_per_cpu_mb": 512, "node_mem_mb": 22900}),  # Default=YES
        (SITE, "batch,pernode", False, {"node_mem_mb": 22900}),  # which default is not known yet
        (SITE, "batch,unknown", False, {}),  # a partition made since the reading
        (NO_DEFAULT, "batch", False, {"default_mem_per_node_mb": 0, "node_mem_mb": 21900}),
        (NO_DEFAULT, "empty", False, {"default_mem_per_node_mb": 0}),
        (NO_DEFAULT, "batch,empty", True, {}),  # one node's memory known, the other's not
        (MemoryDefaults(), "batch", False, {}),  # none read yet
    ],
)
def test_a_job_gets_its_partition_s_default_and_node_memory(
    site: MemoryDefaults, names: str | None, asks: bool, expected: dict[str, int]
) -> None:
    assert site.request_fields(names, asks) == expected


# Jobs as the plugin sends them, and the same jobs as training reads them from sacct (ReqMem: the
# job's total in 22.05, read per node), as the real cluster recorded them.
SERVED_AND_TRAINED = [
    (SITE, JobRequest(partition="batch", min_cpus=1), 512),
    (SITE, JobRequest(partition="batch", min_cpus=2, num_tasks=2), 1024),
    (SITE, JobRequest(partition="percpu", min_cpus=2, cpus_per_task=2), 600),
    (SITE, JobRequest(partition="pernode", min_cpus=2, cpus_per_task=2), 700),
    (SITE, JobRequest(partition="batch", min_cpus=1, mem_per_node_mb=0), 22900),  # --mem=0
    (SITE, JobRequest(partition="batch", min_cpus=2, cpus_per_task=2, mem_per_cpu_mb=0), 22900),
    (NO_DEFAULT, JobRequest(partition="batch", min_cpus=1), 21900),  # ReqMem: RealMemory - MemSpecLimit
    (NO_DEFAULT, JobRequest(partition="batch", min_cpus=2, min_nodes=2, mem_per_node_mb=0), 21900),
]


def as_the_daemon_builds(request: JobRequest, site: MemoryDefaults = SITE) -> JobRequest:
    """``request`` as the plugin sends it and the daemon builds it, with the site's defaults."""
    return request_from_proto(request_to_proto(request), site)


@pytest.mark.parametrize(("site", "served", "req_mem_mb"), SERVED_AND_TRAINED)
def test_a_job_naming_no_mb_is_served_as_accounting_records_it(
    site: MemoryDefaults, served: JobRequest, req_mem_mb: int
) -> None:
    trained = vectorize([JobRequest(partition=served.partition, min_cpus=served.min_cpus,
                                    min_nodes=served.min_nodes, mem_per_node_mb=req_mem_mb)])  # fmt: skip
    assert np.isnan(vectorize([served])[0, MEM])  # without the daemon's reading
    assert vectorize([as_the_daemon_builds(served, site)])[0, MEM] == trained[0, MEM]


def test_a_job_s_own_memory_is_kept_and_never_a_request_policy_may_lower() -> None:
    own = JobRequest(partition="batch", min_cpus=2, mem_per_cpu_mb=100)
    assert as_the_daemon_builds(own) == dataclasses.replace(own, node_mem_mb=22900)
    filled = as_the_daemon_builds(JobRequest(partition="batch", min_cpus=2))
    assert filled.default_mem_per_cpu_mb == 512 and filled.requested(Target.MEMORY) is None
    for whole in (JobRequest(mem_per_node_mb=0), JobRequest(min_cpus=2, mem_per_cpu_mb=0)):
        assert whole.asks_memory and whole.requested(Target.MEMORY) is None  # no MB to lower


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
        JobRequest(partition="batch", min_cpus=2, time_limit_minutes=60, mem_per_node_mb=0),
        JobRequest(partition="batch", min_cpus=2, time_limit_minutes=60, mem_per_cpu_mb=100),
    ]
    replies = [pb.Decision.FromString(service.answer(request_to_proto(a).SerializeToString())) for a in asks]
    assert [(r.default_mem_per_cpu_mb, r.default_mem_per_node_mb, r.node_mem_mb) for r in seen] == [
        (512, None, 22900),
        (None, 700, 22900),
        (None, None, 22900),  # the list's defaults differ
        (None, None, 22900),  # --mem=0
        (None, None, 22900),
    ]
    memory = [t for r in replies[:4] for t in r.targets if t.target == pb.TARGET_MEMORY]
    assert [(t.reason, t.HasField("new_value")) for t in memory] == [(pb.REASON_NOT_REQUESTED, False)] * 4


class Scontrol:
    def __init__(self) -> None:
        self.config, self.fail = CONFIG, False
        self.calls = 0

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls += 1
        if self.fail:
            raise RuntimeError("scontrol show config exited 1: Unable to contact slurm controller")
        return scontrol_text(argv, self.config)


def test_a_failed_or_odd_reading_keeps_the_last_good_one_said_once(caplog: pytest.LogCaptureFixture) -> None:
    applied: list[MemoryDefaults] = []
    now = [0.0]
    scontrol = Scontrol()
    reader = SlurmMemoryDefaults(applied.append, scontrol, refresh_seconds=600, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="slurm_harp.server.slurm_memory_defaults"):
        reader.poll()
        reader.poll()  # not due: scontrol not run again
        assert applied == [SITE] and scontrol.calls == 3
        scontrol.fail = True
        now[0] += 600
        reader.poll()
        now[0] += 30
        reader.poll()  # not due: retried after a minute
        assert scontrol.calls == 4
        now[0] += 30
        reader.poll()
        scontrol.fail, scontrol.config = False, "DefMemPerCPU = lots\n"
        now[0] += 60
        reader.poll()
        scontrol.config = CONFIG.replace("512", "1024")
        now[0] += 600
        reader.poll()
    assert applied == [SITE, parse_memory_defaults(scontrol.config, PARTITIONS, NODE)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned  # the failure and the odd value in one spell: said once
    assert "Unable to contact slurm controller" in warned[0] and "keeping the last reading" in warned[0]
    assert "memory defaults: read again" in caplog.text
    assert "slurm.conf 1024 MB per CPU; partitions of their own: percpu 300 MB per CPU" in caplog.text


def test_an_odd_value_is_named() -> None:
    with pytest.raises(ValueError, match=r"partition percpu: DefMemPerCPU='-3' is no size in MB"):
        parse_memory_defaults(CONFIG, PARTITIONS.replace("DefMemPerCPU=300", "DefMemPerCPU=-3"), NODE)
    with pytest.raises(ValueError, match=r"node c1: RealMemory='lots' is no size in MB"):
        parse_memory_defaults(CONFIG, PARTITIONS, NODE.replace("RealMemory=22900", "RealMemory=lots"))
    with pytest.raises(ValueError, match=r"node c1: MemSpecLimit='4294967294' is no size in MB"):
        parse_memory_defaults(CONFIG, PARTITIONS, SPEC_NODES.replace("=1000", "=4294967294"))


def test_a_node_s_memory_is_what_a_job_may_hold_of_it() -> None:
    """RealMemory less MemSpecLimit, as accounting records a whole-node job's (the real cluster: 21900
    MB of 22900 with MemSpecLimit=1000); the partition's TRES counts RealMemory whole. Nodes that
    differ: their mean."""
    small = NODE.replace("NodeName=c1", "NodeName=c2").replace("RealMemory=22900", "RealMemory=10900")
    site = parse_memory_defaults(CONFIG, PARTITIONS, SPEC_NODES + small)
    assert {name: p.node_mb for name, p in site.partitions.items()} == {
        "batch": (21900 + 10900) // 2,
        "percpu": 10900,
        "pernode": 10900,
    }
    assert parse_memory_defaults(CONFIG, PARTITIONS, "").partitions["batch"].node_mb is None


def test_partitions_whose_nodes_scontrol_hides_are_named(caplog: pytest.LogCaptureFixture) -> None:
    """PrivateData=nodes shows nodes to Slurm's operators only: for a harp that is none, scontrol show
    node lists nothing, and whole-node jobs are served without a node's memory. Said, not silent."""
    applied: list[MemoryDefaults] = []
    hidden = {"node": ""}
    reader = SlurmMemoryDefaults(applied.append, lambda argv: hidden.get(argv[-1], scontrol_text(argv)))
    with caplog.at_level(logging.INFO, logger="slurm_harp.server.slurm_memory_defaults"):
        reader.read()
        hidden.clear()
        reader.read()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "memory defaults: scontrol show node shows no node of batch, percpu, pernode: jobs there asking "
        "all of a node's memory are served without it (a partition without nodes, or PrivateData=nodes "
        "hiding them from a user who is no Slurm operator: docs/install.md)"
    ]
    assert applied[-1] == SITE


def test_a_reading_runs_beside_the_loop_one_at_a_time_and_at_once_after_sighup() -> None:
    """With slurmctld down each scontrol call may take its whole timeout: harp serve's loop (its
    signals, its socket check) goes on meanwhile. A SIGHUP (read_soon) reads at the next turn."""
    applied: list[MemoryDefaults] = []
    release, calls = threading.Event(), []

    def slow(argv: Sequence[str]) -> str:
        calls.append(argv)
        assert release.wait(10)
        return scontrol_text(argv)

    reader = SlurmMemoryDefaults(applied.append, slow, refresh_seconds=600)
    reader.poll_in_background()
    reader.read_soon()
    reader.poll_in_background()  # due, but one reading is under way
    release.set()
    assert reader._reading is not None
    reader._reading.join(10)
    assert applied == [SITE] and len(calls) == 3
    reader.poll_in_background()
    assert reader._reading is not None
    reader._reading.join(10)
    assert len(calls) == 6  # read_soon made it due again
    reader.poll_in_background()
    assert len(calls) == 6  # and then not, for ten minutes


def test_a_list_s_fields_are_resolved_once_and_so_many_lists_at_most() -> None:
    """Resolving a list took a fifth of the request's conversion (4 of 21 µs): kept per list, for
    at most MAX_LISTS of them, since the lists are what a client sends."""
    site = parse_memory_defaults(CONFIG, PARTITIONS, NODE)
    first = site.request_fields("batch", False)
    assert site.request_fields("batch", False) is first  # looked up, not resolved again
    assert site.request_fields("batch", True) == {"node_mem_mb": 22900}
    for n in range(MAX_LISTS + 10):
        assert site.request_fields(f"batch,p{n}", False) == {}
    assert len(site._fields) == MAX_LISTS
    assert site.request_fields("pernode", False) == {"default_mem_per_node_mb": 700, "node_mem_mb": 22900}
    assert site == parse_memory_defaults(CONFIG, PARTITIONS, NODE)  # what it keeps is no part of the reading
