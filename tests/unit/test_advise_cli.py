"""`harp advise`'s command line: the request it builds, the table it prints, the socket it finds."""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_harp import regular_file
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.recommend import Ask, advise
from slurm_harp.advice.sbatch_directives import ENVIRONMENT
from slurm_harp.advice.script import MAX_SCAN, script_signature
from slurm_harp.advice.site_partitions import SitePartitions
from slurm_harp.advice.tariff import Prices, Tariff
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.cli import build_parser, main
from slurm_harp.commands import advise as advise_command
from slurm_harp.commands.advice_table import render
from slurm_harp.commands.advise import SOCKET_ENV, advice_socket, build_request, minutes
from slurm_harp.config import DEFAULT_ADVICE_SOCKET
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.server.advice_service import advice_to_proto, ask_from_proto
from slurm_harp.server.convert import request_from_proto, request_to_proto
from tests.conftest import REPO, not_a_file
from tests.unit.test_arguments import usage_error


@pytest.fixture(autouse=True)
def _no_sbatch_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--script` reads sbatch's SBATCH_* variables: none from the shell running the tests."""
    for variable in ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["advise", *argv])


def relax(job_id: int, cpus: int, minutes: float, peak: float | None, state: str = "COMPLETED") -> JobRecord:
    request = JobRequest(user_name="ann", job_name="relax", min_cpus=cpus)
    return JobRecord(
        job_id=str(job_id), request=request, state=state, elapsed_s=round(minutes * 60), alloc_cpus=cpus,
        max_rss_mb=peak,
    )  # fmt: skip


def test_the_answer_in_the_docs_is_what_harp_advise_prints() -> None:
    runs = [
        relax(1, 4, 75, 1900), relax(2, 4, 86, 2000), relax(3, 16, 21, 7000), relax(4, 16, 25.6, 7400),
        relax(5, 16, 23, 7100), relax(6, 16, 60, None, state="TIMEOUT"),
    ]  # fmt: skip
    shapes = {"batch": PartitionShape("batch", nodes=4, cpus=128, mem_mb=4 * 256000, max_minutes=2880)}
    job = JobRequest(user_name="ann", job_name="relax", min_cpus=16, partition="batch")
    tariff = Tariff.of(Prices(price=0.1, currency="EUR"))
    printed = render(
        advice_to_proto(advise(Ask(job), runs, tariff, shapes, memory_floor_mb=1024)), pb.AdviceRequest()
    )
    docs = (REPO / "docs" / "advice.md").read_text()
    found = re.search(r"```\n(advice for \"relax\".*?)```\n", docs, re.S)
    assert found is not None and found.group(1) == printed + "\n"


def test_a_fit_that_does_not_scale_is_shown_as_not_compared() -> None:
    # 4 CPUs took 80 min, 16 CPUs longer still: the runs did different work.
    runs = [relax(1, 4, 80, None), relax(2, 16, 95, None)]
    shapes = {"batch": PartitionShape("batch", nodes=1, cpus=16, mem_mb=64000, max_minutes=2880)}
    job = JobRequest(user_name="ann", job_name="relax", min_cpus=16, partition="batch")
    printed = render(advice_to_proto(advise(Ask(job), runs, Tariff.of(Prices()), shapes)), pb.AdviceRequest())
    rows = [line for line in printed.splitlines() if line.startswith("CFP")]
    assert len(rows) == 1 and " 16 " in rows[0] and "runs at this size" in rows[0]
    assert "not priced in batch, 1, 2 CPUs: no evidence" in printed  # below the sizes run
    assert "not priced in batch, 4, 8 CPUs: your runs at more CPUs took no less time" in printed
    assert "sizes are not compared; only the size you asked for (16 CPUs) is priced" in printed


def test_mem_0_is_shown_as_all_of_a_nodes_memory_never_as_the_default() -> None:
    # `--mem=0` asks all of a node's memory; it was printed "default" and left out of the option.
    runs = [relax(1, 4, 80, None), relax(2, 4, 84, None)]
    job = JobRequest(user_name="ann", job_name="relax", min_cpus=4, mem_per_node_mb=0)
    request = pb.AdviceRequest(job=request_to_proto(job))
    for mem_mb, shown, option in ((0.0, "all (--mem=0)", "--mem=0,"), (64000.0, "64000 MB", "--mem=64000M,")):
        shapes = {"batch": PartitionShape("batch", nodes=1, cpus=4, mem_mb=mem_mb, max_minutes=2880)}
        printed = render(advice_to_proto(advise(Ask(job), runs, Tariff.of(Prices()), shapes)), request)
        row = next(line for line in printed.splitlines() if line.startswith("CFP"))
        assert f" {shown} " in row and "default" not in printed
        assert f"C cheapest: batch, 4 CPUs on 1 node: --time=88 {option}" in printed


def test_text_from_a_script_or_the_answer_reaches_the_terminal_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An admin runs `harp advise --script` on a user's script: its name comes back in the answer,
    # its values in the errors.
    advice = pb.Advice(job_name="relax\x1b]0;owned\x07", user_name="ann", notes=["a\x9b2Jb\nc"])
    printed = render(advice, pb.AdviceRequest())
    assert all(c.isprintable() for line in printed.splitlines() for c in line)
    assert 'advice for "relax\\x1b]0;owned\\x07"' in printed and "note: a\\x9b2Jb\\nc" in printed
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J x --cpus-per-task=\x1b[2J\n")
    assert main(["advise", "--script", str(script)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "--cpus-per-task=\\x1b[2J: expected a whole number" in err


def test_the_request_from_a_script_and_options(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n#SBATCH -J relax -p batch -n 4 -t 60\n"
        '#SBATCH --comment="harp-params=1e9 harp-zero=1"\nsrun ./relax\n'
    )
    request = build_request(args("--script", str(script), "--deadline", "2h", "--budget", "3.5"))
    assert request.job.job_name == "relax" and request.job.partition == "batch"
    assert request.job.min_cpus == 4 and request.job.time_limit_minutes == 60
    assert request.deadline_minutes == 120 and request.budget == 3.5 and not request.partitions
    assert request.training.parameters == 1e9 and request.training.zero_stage == 1
    assert request.training.precision == "mixed" and request.training.optimizer == "adam"
    # Options win over the script; the partitions to compare are only those named.
    request = build_request(
        args("--script", str(script), "--name", "other", "--cpus", "8", "--partition", "long",
             "--partition", "short", "--params", "7.5e9", "--zero-stage", "2", "--precision", "fp32")
    )  # fmt: skip
    assert (
        request.job.job_name == "other"
        and request.job.min_cpus == 8
        and not request.job.HasField("num_tasks")
    )
    assert list(request.partitions) == ["long", "short"]
    assert request.training.parameters == 7.5e9 and request.training.zero_stage == 2
    assert request.training.precision == "fp32"
    assert not request.job.HasField("user_name")  # the daemon knows who asks


def test_the_script_s_qos_keeps_out_the_partitions_that_deny_it(tmp_path: Path) -> None:
    """The hook sends the job's QOS and `--script` dropped it: a partition whose DenyQos names it
    was priced for the script and left out for the hook. Both send it; --qos overrides it."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J relax -n 4 --qos=debug\nsrun ./relax\n")
    runs = [relax(1, 4, 60, None), relax(2, 4, 62, None)]
    site = SitePartitions.read(
        "PartitionName=batch State=UP DenyQos=debug TotalNodes=2 TotalCPUs=64 MaxTime=1-00:00:00\n"
        "PartitionName=short State=UP AllowQos=debug TotalNodes=2 TotalCPUs=64 MaxTime=1-00:00:00\n"
    )
    for argv, qos, priced, left_out in (
        ((), "debug", ["short"], "batch (DenyQos)"),
        (("--qos", "Normal"), "normal", ["batch"], "short (AllowQos)"),
    ):
        request = build_request(args("--script", str(script), *argv))
        job = replace(request_from_proto(request.job), user_name="ann")
        assert job.qos == qos
        answer = advise(Ask(job), runs, Tariff.of(Prices(), site.table), site.shapes)
        assert sorted({o.partition for o in answer.options if o.priced}) == priced
        assert f"partitions left out: {left_out}" in answer.notes


def test_a_script_s_or_the_command_line_s_exclusive_prices_whole_nodes(tmp_path: Path) -> None:
    """`#SBATCH --exclusive` (or `harp advise --exclusive`) reaches the daemon, which prices the job
    on all the CPUs of its nodes, as Slurm bills it; `--no-exclusive` overrides the script's. Before,
    neither was sent: 4 CPUs on nodes of 32 were priced as 4, shared."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J relax -n 4 --exclusive\nsrun ./relax\n")
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\n#SBATCH -J relax -n 4\nsrun ./relax\n")
    for argv, exclusive in (
        (("--script", str(script)), True),
        (("--script", str(script), "--no-exclusive"), False),
        (("--script", str(plain)), False),
        (("--script", str(plain), "--exclusive"), True),
        (("--name", "relax", "--cpus", "4", "--exclusive"), True),
    ):
        assert build_request(args(*argv)).exclusive is exclusive, argv
    request = build_request(args("--script", str(script)))
    ask = ask_from_proto(pb.AdviceRequest.FromString(request.SerializeToString()))
    assert ask.exclusive
    shapes = {"batch": PartitionShape("batch", nodes=2, cpus=64, mem_mb=2 * 64000, max_minutes=2880)}
    ann = replace(ask, job=replace(ask.job, user_name="ann"))
    runs = [relax(1, 4, 80, None), relax(2, 4, 84, None)]
    answer = advise(ann, runs, Tariff.of(Prices()), shapes)
    four = next(o for o in answer.options if o.size == 4)
    assert four.allocation.cpus == 32 and four.quote is not None and four.quote.billed_units == 32
    printed = render(advice_to_proto(answer), request)
    assert "note: your --exclusive: a job holds whole nodes: priced with all their CPUs" in printed
    assert re.search(r"C cheapest: batch, \d+ CPUs? on 1 node: --time=\d+ --exclusive,", printed), printed


def test_the_command_line_over_sbatch_s_variables_over_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As sbatch takes them: the script's #SBATCH lines, then its SBATCH_* variables, then the
    command line. Before, `--script` read no variable."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J relax -q normal -p debug -t 10 --exclusive\nsrun ./relax\n")
    monkeypatch.setenv("SBATCH_JOB_NAME", "by-variable")
    monkeypatch.setenv("SBATCH_QOS", "long")
    monkeypatch.setenv("SBATCH_PARTITION", "batch")
    monkeypatch.setenv("SBATCH_EXCLUSIVE", "user")
    job = build_request(args("--script", str(script))).job
    assert (job.job_name, job.qos, job.partition, job.time_limit_minutes) == (
        "by-variable",
        "long",
        "batch",
        10,
    )
    request = build_request(args("--script", str(script), "--name", "given", "--qos", "debug", "--exclusive"))
    assert (request.job.job_name, request.job.qos, request.exclusive) == ("given", "debug", True)
    assert not build_request(args("--script", str(script))).exclusive
    monkeypatch.setenv("SBATCH_TIMELIMIT", "soon")
    with pytest.raises(ValueError, match="environment: SBATCH_TIMELIMIT=soon: time limit 'soon'"):
        build_request(args("--script", str(script)))


def test_a_script_without_j_is_named_by_its_file_as_sbatch_names_it(tmp_path: Path) -> None:
    """sbatch names a job without -J after its script's file (base_name), and the hook sends that
    name; `--script` refused such a script: "give the job's name"."""
    script = tmp_path / "relax.sbatch"
    script.write_text("#!/bin/sh\n#SBATCH -n 4 -p batch\nsrun ./relax\n")
    assert build_request(args("--script", str(script))).job.job_name == "relax.sbatch"
    assert build_request(args("--script", str(script), "--name", "other")).job.job_name == "other"
    script.write_text("#!/bin/sh\n#SBATCH -J relax -n 4\n")
    assert build_request(args("--script", str(script))).job.job_name == "relax"


def test_bad_requests_are_refused_before_asking(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="give the job's name"):
        build_request(args("--cpus", "4"))
    with pytest.raises(ValueError, match="give --params too"):
        build_request(args("--name", "x", "--zero-stage", "2"))
    assert main(["advise", "--cpus", "4"]) == 2
    assert "harp advise: give the job's name" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "value"), [("90m", 90), ("2h", 120), ("1.5h", 90), ("30s", 0.5), ("1d", 1440), ("1:30:00", 90)]
)
def test_durations(text: str, value: float) -> None:
    assert minutes(text) == value


@pytest.mark.parametrize("text", ["soon", "0m", "UNLIMITED", "-5"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        minutes(text)


def test_where_the_socket_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    monkeypatch.setattr("slurm_harp.commands.advise.DEFAULT_PATH", tmp_path / "missing.toml")
    assert advice_socket(None) == DEFAULT_ADVICE_SOCKET
    config = tmp_path / "harp.toml"
    config.write_text('[advice]\nsocket = "/run/site/advice.sock"\n')
    monkeypatch.setattr("slurm_harp.commands.advise.DEFAULT_PATH", config)
    assert advice_socket(None) == Path("/run/site/advice.sock")
    monkeypatch.setenv(SOCKET_ENV, "/env/advice.sock")
    assert advice_socket(None) == Path("/env/advice.sock")
    assert advice_socket(Path("/given.sock")) == Path("/given.sock")


def test_no_daemon_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["advise", "--name", "x", "--socket", str(tmp_path / "none.sock"), "--timeout", "2"])
    assert code == 1
    assert f"no advice socket at {tmp_path / 'none.sock'}" in capsys.readouterr().err


def test_names_not_utf8_are_sent_by_the_one_text_rule() -> None:
    # Python reads argv's bytes with surrogateescape: b"r\xffx" arrives as "r\udcffx". A partition
    # to compare was a protobuf encoding error; it is read as the job's strings are (core.text).
    request = build_request(args("--name", "r\udcffx", "--partition", "b\udcfe", "--partition", "c"))
    assert request.job.job_name == "r?x" and list(request.partitions) == ["b?", "c"]
    assert request.SerializeToString()  # a protobuf string must be UTF-8


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--cpus", "99999999999999999999"], "--cpus: must be a whole number from 1 to 4294967293"),
        (["--gpus", "\uff14"], "--gpus: not a whole number"),
        (["--gpus", "0"], "--gpus: must be a whole number from 1 to 4294967293"),
        (["--timeout", "1e300"], "--timeout: must be at most 3600 seconds"),
        (["--deadline", "99999999999999999999999"], "--deadline: too long"),
    ],
)
def test_numbers_beyond_what_is_sent_are_usage_errors(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert error in usage_error(["advise", "--name", "x", *argv], capsys)


def test_a_huge_count_in_the_script_is_refused_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J x\n#SBATCH --cpus-per-task=99999999999999999999\n")
    assert main(["advise", "--script", str(script)]) == 2
    err = capsys.readouterr().err
    assert "harp advise: script line 3: --cpus-per-task=99999999999999999999: more than Slurm allows" in err


@pytest.mark.timeout(10)  # open() of a FIFO waited for a writer: the test fails, not hangs
@pytest.mark.parametrize("kind", ["FIFO", "socket", "directory"])
def test_a_script_that_is_no_regular_file_is_refused_at_once(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--script FIFO` hung for good; `--script /dev/zero` read until a MemoryError traceback."""
    said = not_a_file(tmp_path / "job.sh", kind)
    assert main(["advise", "--script", str(tmp_path / "job.sh")]) == 2
    assert f"harp advise: {tmp_path / 'job.sh'} is {said}" in capsys.readouterr().err
    assert main(["advise", "--script", "/dev/zero"]) == 2
    assert "harp advise: /dev/zero is a character device, not a regular file" in capsys.readouterr().err


def test_only_what_the_signature_can_use_of_a_huge_script_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script was read whole (a 2 GB one into memory) though its signature stops at MAX_SCAN
    bytes; a header going on past them is refused, as a directive there would be missed or cut."""
    script = tmp_path / "job.sh"
    body = "#!/bin/sh\n#SBATCH -J big --time=90\nsrun work\n" + "x" * (8 * MAX_SCAN)
    script.write_text(body)
    read: list[int] = []
    reading = regular_file.read_regular

    def counted(path: Path, *, size: int) -> bytes:
        data = reading(path, size=size)
        read.append(len(data))
        return data

    monkeypatch.setattr(advise_command, "read_regular", counted)
    request = build_request(args("--script", str(script)))
    assert request.job.job_name == "big" and request.job.time_limit_minutes == 90
    assert request.job.script_signature == script_signature(body)  # the same as the whole script's
    assert read == [MAX_SCAN + 1]
    script.write_text("#!/bin/sh\n" + "#SBATCH --comment=padding\n" * (MAX_SCAN // 20) + "#SBATCH -t 5\n")
    assert main(["advise", "--script", str(script)]) == 2
    err = capsys.readouterr().err
    assert f"{script}: its #SBATCH header goes on past the first {MAX_SCAN} bytes, all harp reads" in err
