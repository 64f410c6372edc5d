"""A job's request features as `harp serve` reads them from the plugin's request and as training reads
them from the job's accounting, on a real slurmctld, for jobs that ask in ways the two could read apart:
no -A, -q or -p, names and directories with spaces or non-ASCII, a name past what accounting keeps, an
array, day and UNLIMITED limits, a user without an association, and an association whose default QOS
is its own.

A job_submit.lua runs the plugin's own request builder (harp.request) and writes the request it
would send, protobuf as hex, into the job's comment, which accounting keeps. Compared: every request
feature training has (core.features; not the task count, CPUs per task or time_min, which sacct does
not give, nor the submit hour, the clock's).
"""

from __future__ import annotations

import math
import time

import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.features import REQUEST_FEATURE_NAMES, vectorize
from slurm_harp.core.request import JobRequest
from slurm_harp.server.convert import request_from_proto
from tests.conftest import REPO
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import accounted
from tests.e2e.test_memory_default_e2e import served_memory_defaults

pytestmark = pytest.mark.e2e

RECORDER = f"""
package.path = "{REPO / "plugin"}/?.lua;" .. package.path
local request = require "harp.request"
local pb = require "harp.pb"
function slurm_job_submit(job_desc, part_list, submit_uid)
  local bytes = pb.encode_request(request.build(job_desc, submit_uid, part_list))
  job_desc.comment = (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end))
  return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"""
NOT_IN_ACCOUNTING = {"log_time_min_min", "log_tasks", "log_cpus_per_task", "submit_hour_utc",
                     "submit_dow_utc", "hash_script_signature"}  # fmt: skip
AS_NOBODY = ("runuser", "-u", "nobody", "--")
# (sbatch's options, the user running it)
ASKS = [
    (["-t", "5"], ()),  # no -A, -q, -p: the user's default account, QOS "normal", the default partition
    (["-t", "5", "-A", "research", "-q", "normal", "-p", "batch"], ()),
    (["-t", "5", "-A", "RESEARCH", "-q", "NORMAL"], ()),  # as typed: slurmctld and the daemon lower them
    (["-t", "5", "-A", "lowqos"], ()),  # an association whose default QOS is "low"
    (["-t", "5", "-J", "a b", "-D", "/tmp/harp served"], ()),
    (["-t", "5", "-J", "réglage/ü"], ()),
    (["-t", "5", "-J", "x" * 300], ()),  # accounting keeps 255 bytes of it, as the plugin sends
    (["-t", "5", "--array=1-2"], ()),
    (["-p", "short"], ()),  # its DefaultTime
    (["-t", "1-00:00:00"], ()),
    (["-t", "UNLIMITED"], ()),
    (["-t", "5", "-n", "2", "-c", "2", "--mem-per-cpu=100"], ()),
    (["-t", "5", "-N", "2", "--exclusive"], ()),
    (["-t", "5"], AS_NOBODY),  # no association: no account, QOS "normal"
]


@pytest.fixture(scope="module")
def cluster(start_module_cluster: StartCluster) -> SlurmCluster:
    cluster = start_module_cluster(
        job_submit_lua=RECORDER,
        public=True,
        nodes=2,
        cpus_per_node=4,
        slurm_conf_extra="PartitionName=short Nodes=ALL MaxTime=30 DefaultTime=7 State=UP\n",
    )
    for argv in (
        ["sacctmgr", "-i", "add", "qos", "low"],
        ["sacctmgr", "-i", "add", "account", "lowqos", "qos=normal,low", "defaultqos=low"],
        ["sacctmgr", "-i", "add", "user", "root", "account=lowqos"],
    ):
        done = cluster.run(argv)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return cluster


def _features(request: JobRequest) -> dict[str, float]:
    row = vectorize([request])[0]
    return {n: float(row[i]) for i, n in enumerate(REQUEST_FEATURE_NAMES) if n not in NOT_IN_ACCOUNTING}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_every_request_feature_is_served_as_training_reads_it(cluster: SlurmCluster) -> None:
    """Before, a job naming no QOS whose association has no default QOS of its own (the usual
    association) was served with no QOS, where slurmctld gives it "normal" and accounting records
    that: every model read such a job's QOS as unknown."""
    defaults = served_memory_defaults(cluster)
    jobs = {}
    for options, user in ASKS:
        argv = [*user, "sbatch", "--parsable", "-o", "/dev/null", *options]
        deadline = time.monotonic() + 30
        # slurmdbd sends slurmctld the new association a moment after sacctmgr added it
        while (done := cluster.run(argv, input="#!/bin/sh\ntrue\n", cwd="/tmp")).returncode != 0:
            assert time.monotonic() < deadline and "account" in done.stderr.lower(), (argv, done.stderr)
            time.sleep(0.5)
        jobs[" ".join([*user, *options])[:40]] = int(done.stdout.strip().split(";")[0])
    served, trained = {}, {}
    for ask, job in jobs.items():
        if "array" not in ask:  # accounting's record of a job is whole once it ended
            cluster.wait_state(job, {"COMPLETED"}, timeout=120)
        record = accounted(cluster, job)
        # an array's first task (each task carries the same comment)
        row = cluster.sacct_rows([job], ["JobIDRaw", "Comment"], allocations_only=True)[0]
        request = request_from_proto(pb.SubmitRequest.FromString(bytes.fromhex(row["Comment"])), defaults)
        served[ask], trained[ask] = _features(request), _features(record.request)
    differ = {
        ask: {n: (v, trained[ask][n]) for n, v in features.items() if not _same(v, trained[ask][n])}
        for ask, features in served.items()
    }
    assert {ask: d for ask, d in differ.items() if d} == {}
    # the cases shown are the ones meant: QOS as accounting records them
    assert served["-t 5 -A lowqos"]["hash_qos"] != served["-t 5"]["hash_qos"]
