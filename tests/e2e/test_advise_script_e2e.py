"""`harp advise --script` reads a script's #SBATCH lines as a real sbatch (Slurm 22.05) submits them:
comments after the options, a `#` in a word, an apostrophe in a comment, a heterogeneous job (its
first component), the QOS, and a script without -J (named after its file). Each script is submitted
held, and what slurmctld holds (`scontrol show job`) is compared with the request harp builds."""

from __future__ import annotations

import re

import pytest

from slurm_harp.cli import build_parser
from slurm_harp.commands.advise import build_request
from tests.e2e.client_output import parse_scontrol_record
from tests.e2e.cluster import SlurmCluster

pytestmark = pytest.mark.e2e

SCRIPTS = {
    # No -J: sbatch names the job after the file. Each comment names what would be refused or
    # differ if it were read (no QOS nosuch, 64 tasks on a node of fewer CPUs).
    "relax-e2e.sbatch": "#!/bin/sh\n"
    "#SBATCH -p debug        # the other partition: -p batch\n"
    "#SBATCH --ntasks=1      # big meshes need --ntasks=64\n"
    "#SBATCH -q normal       # don't: -q nosuch\n"
    "sleep 1\n",
    # sbatch ends a line's options at a `#` even inside a word: the job is named "relax", and
    # anything after it on that line is not read.
    "het-e2e.sbatch": "#!/bin/sh\n#SBATCH -J relax#2 -p batch\n#SBATCH -p debug -n 1\n#SBATCH hetjob\n"
    "#SBATCH -p batch -n 1\nsleep 1\n",
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_harp_advise_reads_a_script_as_sbatch_submits_it(slurm_cluster: SlurmCluster, name: str) -> None:
    path = slurm_cluster.jobs_dir / name
    path.write_text(SCRIPTS[name])
    done = slurm_cluster.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", str(path)])
    assert done.returncode == 0, done.stderr
    job_id = int(re.match(r"\d+", done.stdout.strip()).group())  # type: ignore[union-attr]
    try:
        shown = slurm_cluster.run(["scontrol", "show", "job", str(job_id)])
        assert shown.returncode == 0, shown.stderr
        first = parse_scontrol_record(shown.stdout.strip().split("\n\n")[0])  # a hetjob's component 0
    finally:
        slurm_cluster.run(["scancel", str(job_id)])
    job = build_request(build_parser().parse_args(["advise", "--script", str(path)])).job
    assert (job.job_name, job.partition, job.num_tasks) == (first["JobName"], first["Partition"], 1)
    assert first["NumTasks"] == "1" and job.partition == "debug"
    if name == "relax-e2e.sbatch":
        assert job.job_name == name and job.qos == first["QOS"] == "normal"
    else:
        assert job.job_name == "relax" and not job.HasField("qos")
