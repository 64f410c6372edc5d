"""advice.sbatch_directives: sbatch's SBATCH_* input variables over a script's header, as sbatch 22.05
takes them (each case's result checked against a real sbatch:
tests/e2e/test_advise_script_e2e.py::test_harp_advise_reads_sbatch_s_environment_as_sbatch_does)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_harp.advice.sbatch_directives import ENVIRONMENT
from slurm_harp.advice.script import parse_script, script_signature
from slurm_harp.core.request import JobRequest

HERE = "/home/ann/run"  # where sbatch runs: the directory without -D


def _job(lines: str, environ: dict[str, str]) -> JobRequest:
    return parse_script("#!/bin/sh\n" + lines + "srun x\n", environ, cwd=HERE).request


@pytest.mark.parametrize(
    ("lines", "environ", "fields"),
    [
        # A variable overrides the script's value of its option (sbatch reads it after the script).
        (
            "#SBATCH -p debug -t 5 -J a\n",
            {"SBATCH_PARTITION": "batch", "SBATCH_TIMELIMIT": "7", "SBATCH_JOB_NAME": "b"},
            {"partition": "batch", "time_limit_minutes": 7, "job_name": "b"},
        ),
        ("", {"SBATCH_ACCOUNT": "phys", "SBATCH_QOS": "Long"}, {"account": "phys", "qos": "long"}),
        (
            "#SBATCH -N 2\n",
            {"SBATCH_GPUS_PER_NODE": "a100:2"},
            {"min_nodes": 2, "num_tasks": 2, "min_cpus": 2, "gpus_per_node": 2},
        ),
        (
            "#SBATCH -n 4\n",
            {"SBATCH_GPUS_PER_TASK": "1"},
            {"num_tasks": 4, "min_cpus": 4, "gpus_per_node": 4},
        ),
        ("", {"SBATCH_GRES": "gpu:3"}, {"gpus_per_node": 3}),
        ("#SBATCH --gpus=2\n", {"SBATCH_GPUS": "5"}, {"gpus_per_node": 5}),
        # The same memory option: the variable's value.
        ("#SBATCH --mem=100\n", {"SBATCH_MEM_PER_NODE": "200"}, {"mem_per_node_mb": 200}),
        # Another memory option's variable: the script's option wins (_validate_memory_options).
        ("#SBATCH --mem-per-cpu=50\n", {"SBATCH_MEM_PER_NODE": "200"}, {"mem_per_cpu_mb": 50}),
        ("#SBATCH --mem=100\n", {"SBATCH_MEM_PER_CPU": "30"}, {"mem_per_node_mb": 100}),
        # ... and one the script gives, overridden by its own variable, is a variable's.
        (
            "#SBATCH --mem=1 --mem-per-cpu=50\n",
            {"SBATCH_MEM_PER_NODE": "200"},
            {"mem_per_cpu_mb": 50},
        ),
        # Variables of options the advice does not read, and other environment, change nothing.
        (
            "#SBATCH -n 2\n",
            {"SBATCH_CPUS_PER_GPU": "4", "SLURM_NTASKS": "8"},
            {"num_tasks": 2, "min_cpus": 2},
        ),
    ],
)
def test_a_variable_overrides_the_script_as_in_sbatch(
    lines: str, environ: dict[str, str], fields: dict[str, object]
) -> None:
    signature = script_signature("#!/bin/sh\n" + lines + "srun x\n")
    got = _job(lines, environ)
    assert got == JobRequest(script_signature=signature, work_dir=HERE, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lines", "environ", "exclusive"),
    [
        ("#SBATCH --exclusive\n", {"SBATCH_EXCLUSIVE": "user"}, False),
        # An empty variable of an option with an optional value is the bare option (slurm_process_option).
        ("#SBATCH -s\n", {"SBATCH_EXCLUSIVE": ""}, True),
        ("", {"SBATCH_EXCLUSIVE": "exclusive"}, True),
    ],
)
def test_sbatch_exclusive(lines: str, environ: dict[str, str], exclusive: bool) -> None:
    assert parse_script("#!/bin/sh\n" + lines, environ).exclusive is exclusive


@pytest.mark.parametrize(
    ("lines", "environ", "error"),
    [
        ("", {"SBATCH_TIMELIMIT": "bogus"}, "environment: SBATCH_TIMELIMIT=bogus: time limit 'bogus'"),
        ("#SBATCH -t 5\n", {"SBATCH_TIMELIMIT": ""}, "environment: SBATCH_TIMELIMIT=: time limit"),
        ("", {"SBATCH_MEM_PER_NODE": "1.5G"}, "environment: SBATCH_MEM_PER_NODE=1.5G: expected a whole"),
        ("", {"SBATCH_EXCLUSIVE": "yes"}, "environment: SBATCH_EXCLUSIVE=yes: expected no value"),
        # sbatch: "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE are mutually exclusive."
        (
            "",
            {"SBATCH_MEM_PER_CPU": "30", "SBATCH_MEM_PER_NODE": "200"},
            "environment: SBATCH_MEM_PER_CPU=30 SBATCH_MEM_PER_NODE=200: sbatch takes one of these",
        ),
        # Where an option comes from both: each named where it was given.
        (
            "#SBATCH -n 99999\n",
            {"SBATCH_GPUS_PER_TASK": "100000"},
            "script line 2: --ntasks=99999; environment: SBATCH_GPUS_PER_TASK=100000: 9999900000 GPUs",
        ),
    ],
)
def test_a_bad_variable_is_named(lines: str, environ: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_script("#!/bin/sh\n" + lines, environ)


@pytest.mark.parametrize("variable", sorted(ENVIRONMENT))
def test_each_variable_reads_as_its_option_last_in_the_header(variable: str) -> None:
    """A variable is read as its option given after the script's own (the memory rule aside)."""
    option = ENVIRONMENT[variable]
    value = {"exclusive": "user", "time": "1-2", "partition": "p,q", "gres": "gpu:2"}.get(option, "7")
    header = "#SBATCH -J x -p a -t 5 -n 2 --exclusive\n"
    by_variable = parse_script("#!/bin/sh\n" + header, {variable: value})
    by_option = parse_script("#!/bin/sh\n" + header + f"#SBATCH --{option}={value}\n")
    assert replace(by_variable.request, script_signature=None) == replace(
        by_option.request, script_signature=None
    )
    assert (by_variable.exclusive, by_variable.training) == (by_option.exclusive, by_option.training)
