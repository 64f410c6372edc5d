from __future__ import annotations

import grp
import os
import tomllib
from pathlib import Path

import pytest

from slurm_harp.cli import main
from slurm_harp.config import (
    ConfigError,
    GuardSettings,
    ServerSettings,
    Settings,
    TrainingSettings,
    check_host,
    load,
    parse,
    socket_gid,
)
from slurm_harp.core.policy import Mode
from slurm_harp.core.request import Target
from tests.conftest import not_a_file

GOOD = """
[server]
socket = "/run/harp/h.sock"
socket_mode = "0660"
socket_group = "slurm"
metrics_port = 9817

[store]
path = "/var/lib/harp"

[policy]
mode = "shadow"
quantile = 0.95
[policy.floor]
time_minutes = 15
[[policy.rule]]
partition = "debug"
mode = "rewrite"
"""


def test_full_file_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "harp.toml"
    path.write_text(GOOD)
    s = load(path)
    assert s.server.socket == Path("/run/harp/h.sock") and s.server.socket_mode == 0o660
    assert s.server.socket_group == "slurm" and s.server.metrics_port == 9817
    assert s.store == Path("/var/lib/harp") and s.source == path
    assert s.policy.quantile == 0.95 and s.policy.floors[Target.TIME] == 15.0
    assert s.policy.rules[0].mode is Mode.REWRITE and s.policy.default_mode is Mode.SHADOW


@pytest.mark.parametrize(
    ("text", "mode"),
    [("", "full"), ("refit = 'update'", "update"), ("refit = true", "full"), ("refit = false", "off")],
)
def test_refit_modes(text: str, mode: str) -> None:
    """A name of learning.fitting.Refit; the booleans of earlier configs still read."""
    from slurm_harp.config import REFIT
    from slurm_harp.learning.fitting import Refit

    assert tuple(Refit) == REFIT and Refit(REFIT[0]) is Refit.FULL
    assert parse(tomllib.loads(f"[training]\n{text}\n")).training.refit == mode


def test_defaults_are_safe() -> None:
    s = parse({})
    assert s.policy.default_mode is Mode.SHADOW and s.server.socket_mode == 0o660 and s.server.tcp is None


def test_an_empty_file_gives_the_settings_defaults() -> None:
    """The sections' readers take their defaults from the settings classes: one home for each."""
    s = parse({"server": {}, "guard": {}, "training": {}})
    assert (s.server, s.guard, s.training) == (ServerSettings(), GuardSettings(), TrainingSettings())


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[policy]\nquantil = 0.9\n", "policy.quantil: unknown key"),
        ("[policy]\nmode = 'always'\n", "policy.mode: mode must be one of"),
        ("[policy]\nquantile = 1.5\n", "policy.quantile: must be between 0 and 1"),
        ("[policy]\nquantile = 'high'\n", "policy.quantile: expected float"),
        ("[policy]\nlimits = 'loose'\n", "policy.limits: must be one of calibrated, quantile"),
        ("[training]\nkill_budget = 1.5\n", "training.kill_budget: must be a fraction"),
        ("[training]\nkeep = 0\n", "training.keep: must be >= 1"),
        ("[training]\nrefit = 'yes'\n", "training.refit: must be one of full, update, off (or true, false)"),
        ("[training]\nepochs = 3\n", "training.epochs: unknown key"),
        ("[training]\ntrees = 0\n", "training.trees: must be >= 1"),
        ("[training]\nladder_rows = 0\n", "training.ladder_rows: must be >= 1"),
        ("[training]\ncalibrate_by = 'user'\n", "training.calibrate_by: must be one of none, partition"),
        ("[training]\ncalibrate_by = 1\n", "training.calibrate_by: expected str"),
        ("[training]\nlearning_rate = 0\n", "training.learning_rate: must be in (0, 1]"),
        ("[training]\ntrees = 100001\n", "training.trees: must be <= 100000, got 100001"),
        ("[training]\nthreads = 99999999999\n", "training.threads: must be <= 256, got 99999999999"),
        ("[training]\nlearning_rate = 2.0\n", "training.learning_rate: must be in (0, 1]"),
        ("[server]\nsocket_mode = '0666'\n", "server.socket_mode: must not grant access to others"),
        ("[server]\nsocket_mode = 'rw'\n", "server.socket_mode: expected an octal string"),
        ("[server]\nmax_workers = 0\n", "server.max_workers: must be >= 1"),
        ("[server]\nmax_workers = true\n", "server.max_workers: expected int"),
        ("[server]\ntcp = 'localhost'\n", "server.tcp: expected host:port"),
        ("[server]\ntcp = '50051'\n", "server.tcp: expected host:port, got '50051'"),
        ("[server]\ntcp = ':50051'\n", "server.tcp: expected host:port, got ':50051'"),
        ("[server]\ntcp = ' :50051'\n", "server.tcp: expected host:port"),
        ("[server]\ntcp = '127.0.0.1:999999'\n", "server.tcp: port out of range (1 to 65535)"),
        ("[server]\ntcp = '127.0.0.1:\u0661'\n", "server.tcp: expected host:port"),
        ("[policy.floor]\ncpus = -1\n", "policy.floor.cpus: must be >= 0"),
        ("[policy.floor]\ntime_minutes = nan\n", "policy.floor.time_minutes: must be a finite number"),
        ("[policy.floor]\nmemory_mb = inf\n", "policy.floor.memory_mb: must be a finite number"),
        ("[policy]\nquantile = nan\n", "policy.quantile: must be a finite number"),
        ("[server]\nstore_poll_seconds = 0\n", "server.store_poll_seconds: must be a number of seconds >= 1"),
        ("[server]\ngrace_seconds = -1\n", "server.grace_seconds: must be a number of seconds >= 0"),
        ("[history]\npoll_seconds = 0.001\n", "history.poll_seconds: must be a number of seconds >= 0.1"),
        ("[guard]\npoll_seconds = -inf\n", "guard.poll_seconds: must be a finite number"),
        ("[[policy.rule]]\nmode = 'off'\n", "policy.rule[0]: needs a partition"),
        ("[[policy.rule]]\npartition = 'x'\n", "policy.rule[0].mode: missing"),
        ("[stor]\npath = '/x'\n", "stor: unknown key"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_errors_name_key_and_file(tmp_path: Path, text: str, names: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(path) in str(err.value) and names in str(err.value)


def refused_by_check_config(tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str) -> tuple[Path, str]:
    """``text`` as a file, which `harp check-config` refuses (exit 2): the file and its one log line."""
    path = tmp_path / "harp.toml"
    path.write_text(text)
    assert main(["check-config", str(path)]) == 2
    [line] = [r.getMessage() for r in caplog.records]  # one line, naming the file and the key
    return path, line


# Values that passed and broke later (before, `harp guard` died of an OverflowError after one poll of
# 3e6 s, the daemon's history thread of a 1e12 s wait, a guard stale for 1e300 s counted as alive for
# good, and an empty path was "."): each is refused naming its key, by every command.
A_DAY = "must be a number of seconds <= 86400"
PATH_KEYS = ("store.path", "server.socket", "guard.heartbeat", "guard.state", "history.db", "advice.socket")
PAST_THEIR_BOUNDS = {
    "[guard]\npoll_seconds = 3000000\nlead_seconds = 6000000\nstale_seconds = 6000000\n": (
        f"guard.poll_seconds: {A_DAY} (a day), got 3e+06"
    ),
    "[history]\npoll_seconds = 1e12\n": f"history.poll_seconds: {A_DAY}",
    "[guard]\nstale_seconds = 1e300\n": f"guard.stale_seconds: {A_DAY}",
    "[guard]\nlead_seconds = 86401\n": f"guard.lead_seconds: {A_DAY}",
    "[server]\nstore_poll_seconds = 1e300\n": f"server.store_poll_seconds: {A_DAY}",
    "[server]\ngrace_seconds = 1e9\n": f"server.grace_seconds: {A_DAY}",
    "[guard]\nmax_updates_per_poll = 1000000000000000000\n": "guard.max_updates_per_poll: must be <= 10000",
    "[guard]\nheartbeat = ''\n": "guard.heartbeat: must be a path, got an empty string",
    "[guard]\nstate = ' '\n": "guard.state: must be a path, got an empty string",
    "[server]\nsocket = ''\n": "server.socket: must be a path, got an empty string",
    "[store]\npath = ''\n": "store.path: must be a path, got an empty string",
    "[history]\ndb = ''\n": "history.db: must be a path (leave the key out for no history), got an",
    # TOML's "\u0000": check-config said ok, then each open() raised ValueError, a traceback at start.
    **{
        f'[{key.split(".")[0]}]\n{key.split(".")[1]} = "/var/lib/x\\u0000y"\n': (
            f"{key}: must be a path, got one holding a NUL character: '/var/lib/x\\x00y'"
        )
        for key in PATH_KEYS
    },
}


@pytest.mark.parametrize(
    ("text", "names"), PAST_THEIR_BOUNDS.items(), ids=[n.split(":")[0] for n in PAST_THEIR_BOUNDS.values()]
)
def test_periods_past_a_day_and_empty_paths_are_refused_by_check_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, names: str
) -> None:
    path, line = refused_by_check_config(tmp_path, caplog, text)
    assert line.startswith(f"{path}: {names}")


def test_the_bounds_themselves_are_accepted() -> None:
    day = {
        "poll_seconds": 43200,
        "lead_seconds": 86400,
        "stale_seconds": 86400,
        "max_updates_per_poll": 10000,
    }
    data = {
        "guard": day,
        "history": {"poll_seconds": 86400},
        "server": {"store_poll_seconds": 86400.0, "tcp": "[::1]:65535"},
    }
    settings = parse(data)
    assert settings.guard.stale_seconds == 86400 and settings.guard.max_updates_per_poll == 10000
    assert settings.history.poll_seconds == settings.server.store_poll_seconds == 86400
    assert settings.server.tcp == "[::1]:65535"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load(tmp_path / "absent.toml")


def test_a_file_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "harp.toml"
    path.write_bytes("# site: Z\u00fcrich\n[policy]\nmode = 'shadow'\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == f"{path}: not UTF-8 text: byte 0xfc at offset 9"


def nested(kind: str, depth: int) -> str:
    """``x = `` an array or an inline table holding another, ``depth`` deep."""
    return "x = " + ("[" * depth + "]" * depth if kind == "arrays" else "{a=" * depth + "1" + "}" * depth)


DEEP = "nested too deeply to read (arrays or inline tables within each other)"


@pytest.mark.parametrize("kind", ["arrays", "inline tables"])
def test_a_file_nested_too_deeply_is_a_clear_error(tmp_path: Path, kind: str) -> None:
    # tomllib recurses per level: a RecursionError, which escaped load() as a traceback.
    path = tmp_path / "harp.toml"
    path.write_text(nested(kind, 5000))
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == f"{path}: {DEEP}"


@pytest.mark.parametrize("kind", ["arrays", "inline tables"])
def test_parse_refuses_the_deepest_value_load_reads_without_recursing_out(kind: str) -> None:
    """What load() passes on is at most as deep as tomllib could recurse, here; parse() reaches
    such a value only to refuse it, repr() in its message recursing once a level, tomllib more."""
    read, refused = 1, 5000  # deepest read, shallowest refused
    while refused - read > 1:
        depth = (read + refused) // 2
        try:
            tomllib.loads(nested(kind, depth))
            read = depth
        except RecursionError:
            refused = depth
    data = tomllib.loads("[server]\nsocket = " + nested(kind, read)[len("x = ") :])
    with pytest.raises(ConfigError, match=r"server\.socket: expected str"):
        parse(data)


def test_check_config_refuses_a_file_nested_too_deeply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "harp.toml"
    path.write_text(nested("arrays", 5000))
    assert main(["check-config", str(path)]) == 2
    assert f"{path}: {DEEP}" in caplog.text


@pytest.mark.timeout(10)  # open() of a FIFO waits for a writer: a regression fails, not hangs
@pytest.mark.parametrize("kind", ["FIFO", "directory"])
def test_a_fifo_or_a_directory_is_a_clear_error(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "harp.toml"
    problem = not_a_file(path, kind)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == f"{path}: cannot read: {problem}"


@pytest.mark.timeout(10)
def test_check_config_refuses_a_fifo_naming_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "harp.toml"
    problem = not_a_file(path, "FIFO")
    assert main(["check-config", str(path)]) == 2
    assert f"{path}: cannot read: {problem}" in caplog.text


def test_an_unreadable_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "harp.toml"
    path.write_text("")

    def refuse(file: str | Path, *args: object, **kwargs: object) -> int:
        # The tests run as root, whom file modes do not stop: the error open() gives anyone else.
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == f"{path}: cannot read: Permission denied"


def test_an_unknown_socket_group_is_refused_for_serving_naming_key_and_group(tmp_path: Path) -> None:
    path = tmp_path / "harp.toml"
    path.write_text("[server]\nsocket_group = 'nosuchgroup-harp'\n")
    settings = load(path)  # a file other hosts may read: the group is checked where it serves
    with pytest.raises(ConfigError) as err:
        check_host(settings)
    assert str(err.value) == f"{path}: server.socket_group: no group 'nosuchgroup-harp' on this host"


def test_a_known_socket_group_resolves_to_its_gid() -> None:
    group = grp.getgrgid(os.getgid())
    assert socket_gid(parse({"server": {"socket_group": group.gr_name}})) == group.gr_gid
    assert socket_gid(parse({})) is None
    check_host(parse({}))


@pytest.mark.parametrize(
    ("group", "code", "said"),
    [
        ("nosuchgroup-harp", 2, "server.socket_group: no group 'nosuchgroup-harp' on this host"),
        (None, 0, "ok (policy mode shadow)"),
    ],
    ids=["unknown", "known"],
)
def test_check_config_checks_the_socket_group(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    group: str | None,
    code: int,
    said: str,
) -> None:
    path = tmp_path / "harp.toml"
    name = group or grp.getgrgid(os.getgid()).gr_name
    path.write_text(f"[server]\nsocket_group = '{name}'\n")
    assert main(["check-config", str(path)]) == code
    assert said in capsys.readouterr().out + caplog.text


def test_check_config_refuses_a_directory_as_the_guard_s_heartbeat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The guard could never replace it: each poll failed, and left a temporary file beside it."""
    path = tmp_path / "harp.toml"
    (tmp_path / "hb").mkdir()
    path.write_text(f'[guard]\nheartbeat = "{tmp_path / "hb"}"\n')
    assert main(["check-config", str(path)]) == 2
    assert (
        f"{path}: guard.heartbeat: {tmp_path / 'hb'} is a directory, not the file the guard writes"
        in caplog.text
    )


def test_the_shipped_example_config_is_valid() -> None:
    from tests.conftest import REPO

    s = load(REPO / "deploy" / "config" / "harp.toml")
    assert s.policy.default_mode is Mode.SHADOW and s.server.socket_mode == 0o660
    assert s.history.db == Path("/var/lib/slurm-harp/jobs.sqlite")
    assert s.training.refit == "full"
    assert s.training == TrainingSettings()  # it spells out the defaults


def test_advice_settings() -> None:
    s = parse({})
    assert s.advice.socket is None and s.advice.max_connections == 64 and s.advice.gpu_memory_bytes == {}
    s = parse(
        {
            "advice": {
                "socket": "/run/slurm-harp/advice.sock",
                "max_connections": 8,
                "partition": [{"name": "gpu", "gpu_memory_gb": 80}, {"name": "a40", "gpu_memory_gb": 48.0}],
            }
        }
    )
    assert s.advice.socket == Path("/run/slurm-harp/advice.sock") and s.advice.max_connections == 8
    assert s.advice.gpu_memory_bytes == {"gpu": 80e9, "a40": 48e9}
    assert parse({}).advice.gpu_memory_headroom == 0.1
    assert parse({"advice": {"gpu_memory_headroom": 0}}).advice.gpu_memory_headroom == 0.0


@pytest.mark.parametrize(
    ("advice", "names"),
    [
        ({"socket": ""}, "advice.socket: must be a path"),
        ({"socket": "/run/slurm-harp/harp.sock"}, "advice.socket: must not be server.socket"),
        ({"max_connections": 0}, "advice.max_connections: must be >= 1"),
        ({"gpu_memory_headroom": 1}, "advice.gpu_memory_headroom: must be a fraction of a GPU's memory"),
        ({"gpu_memory_headroom": -0.1}, "advice.gpu_memory_headroom: must be a fraction"),
        ({"gpu_memory_headroom": "10%"}, "advice.gpu_memory_headroom"),
        ({"partition": {"name": "gpu"}}, "advice.partition: must be an array of tables"),
        ({"partition": [{"gpu_memory_gb": 80}]}, r"advice.partition\[0\].name: missing"),
        (
            {"partition": [{"name": "gpu"}]},
            r"advice.partition\[0\].gpu_memory_gb: must be a number of GB > 0",
        ),
        (
            {"partition": [{"name": "g", "gpu_memory_gb": 1}, {"name": "g", "gpu_memory_gb": 2}]},
            "listed twice",
        ),
        ({"partition": [{"name": "g", "gpu_memory_gb": 1, "gpus": 8}]}, "unknown key"),
        ({"sockets": "/x"}, "advice.sockets: unknown key"),
    ],
)
def test_advice_errors_name_the_key(advice: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        parse({"advice": advice})


@pytest.mark.parametrize("spelling", ["symlinked directory", "dot-dot"])
def test_check_config_refuses_an_advice_socket_that_is_the_server_socket_by_another_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, spelling: str
) -> None:
    """/var/run is a link to /run on most systems: the same socket by another spelling passed
    check-config, and `harp serve` then found its own socket there and refused to start."""
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (tmp_path / "varrun").symlink_to(run)
    other = tmp_path / "varrun" if spelling == "symlinked directory" else run / "sub" / ".."
    path = tmp_path / "harp.toml"
    path.write_text(f'[server]\nsocket = "{run}/harp.sock"\n[advice]\nsocket = "{other}/harp.sock"\n')
    assert main(["check-config", str(path)]) == 2
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"{path}: advice.socket: must not be server.socket ({run}/harp.sock)")
    another = f'[server]\nsocket = "{run}/harp.sock"\n[advice]\nsocket = "{other}/advice.sock"\n'
    assert load_text(tmp_path, another).advice.socket == other / "advice.sock"


def load_text(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "other.toml"
    path.write_text(text)
    return load(path)


HUGE = "1" + "0" * 400
# Values that passed, or were a traceback, and broke later; each is now one line naming the key.
PAST_THEIR_MOST = {
    # tomllib reads integers of any size, TOML's are 64-bit: float() of one of 309 digits or more
    # raised OverflowError, and tomllib's own ValueError past 4300 digits escaped load(); both were
    # a traceback and exit 1.
    f"[policy]\nquantile = {HUGE}\n": "policy.quantile: must be within TOML's 64-bit integers, got one of",
    f"[server]\ngrace_seconds = {HUGE}\n": "server.grace_seconds: must be within TOML's 64-bit integers",
    f"[policy.floor]\nmemory_mb = -{HUGE}\n": "policy.floor.memory_mb: must be within TOML's 64-bit",
    f"[advice]\nmax_connections = {2**63}\n": "advice.max_connections: must be within TOML's 64-bit integers",
    f"[guard]\nmetrics_port = 1{'0' * 5000}\n": "not valid TOML: Exceeds the limit (4300 digits) for integer",
    # Finite values with no upper bound: `now - days * 86400` of a 1e15-day window overflowed
    # SQLite's integers on every history poll (the daemon served with no history and no
    # harp_outcome_* figures), and 1e300 GB of GPU memory was inf bytes. check-config said ok.
    "[history]\nwindow_days = 1000000000000000\n": "history.window_days: must be a number of days <= 3660",
    "[history]\noutcome_window_days = 3661\n": "history.outcome_window_days: must be a number of days <=",
    "[[advice.partition]]\nname = 'gpu'\ngpu_memory_gb = 1e300\n": (
        "advice.partition[0].gpu_memory_gb: must be a number of GB > 0 and below 1000000"
    ),
    "[advice]\nmax_connections = 4097\n": "advice.max_connections: must be <= 4096, got 4097",
    # Port 0 bound an endpoint on a port the kernel picked, which no Prometheus scrapes.
    "[server]\nmetrics_port = 0\n": "server.metrics_port: 0 is no port: leave it unset for no metrics",
    "[guard]\nmetrics_port = 0\n": "guard.metrics_port: 0 is no port: leave it unset for no metrics",
    "[guard]\nmetrics_port = 65536\n": "guard.metrics_port: out of range: 65536",
    "[server]\ntcp = '127.0.0.1:0'\n": "server.tcp: 0 is no port: give the port clients connect to",
}
MOST_IDS = [
    "quantile", "seconds", "negative", "2**63", "5001 digits", "days", "outcome days", "GB", "4097",
    "server port 0", "guard port 0", "port 65536", "tcp port 0",
]  # fmt: skip


@pytest.mark.parametrize("text", PAST_THEIR_MOST, ids=MOST_IDS)
def test_integers_past_64_bits_and_values_past_their_most_are_refused_by_check_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    path, line = refused_by_check_config(tmp_path, caplog, text)
    assert line.startswith(f"{path}: {PAST_THEIR_MOST[text]}"), line
    assert "\n" not in line and "set_int_max_str_digits" not in line


def test_the_64_bit_bounds_themselves_are_read() -> None:
    floor = parse({"policy": {"floor": {"memory_mb": 2**63 - 1, "cpus": 0}}}).policy.floors
    assert floor[Target.MEMORY] == float(2**63 - 1)
    with pytest.raises(ConfigError, match=r"policy\.floor\.memory_mb: must be >= 0"):
        parse({"policy": {"floor": {"memory_mb": -(2**63)}}})


def test_days_gpu_memory_and_connections_at_their_most_are_read() -> None:
    s = parse(
        {
            "history": {"window_days": 3660, "outcome_window_days": 3660},
            "advice": {"max_connections": 4096, "partition": [{"name": "gpu", "gpu_memory_gb": 999999.9}]},
        }
    )
    assert s.history.window_days == s.history.outcome_window_days == 3660
    assert s.advice.max_connections == 4096 and s.advice.gpu_memory_bytes == {"gpu": 999999.9e9}


# A rule's partition or account that no job can match: the job's `-p debug,short` is matched partition
# by partition (core.policy), so a rule for "debug,short" matched neither, nor did "" or " gpu";
# check-config said ok and the rule never applied.
NO_JOB_MATCHES = {
    "[[policy.rule]]\npartition = 'debug,short'\nmode = 'off'\n": (
        "policy.rule[0].partition: one partition per rule: write a [[policy.rule]] for each of "
        "'debug', 'short'"
    ),
    "[[policy.rule]]\npartition = 'gpu'\nmode = 'off'\n[[policy.rule]]\naccount = 'a, b'\nmode = 'off'\n": (
        "policy.rule[1].account: one account per rule: write a [[policy.rule]] for each of 'a', 'b'"
    ),
    "[[policy.rule]]\npartition = ''\nmode = 'rewrite'\n": (
        "policy.rule[0].partition: must name a partition, got '' (leave the key out to match any)"
    ),
    "[[policy.rule]]\naccount = ' '\nmode = 'off'\n": "policy.rule[0].account: must name an account",
    "[[policy.rule]]\npartition = ' gpu'\nmode = 'off'\n": (
        "policy.rule[0].partition: must be a partition's name without spaces around it, got ' gpu'"
    ),
    '[[policy.rule]]\naccount = "phys\\t"\nmode = "off"\n': (
        "policy.rule[0].account: must be an account's name without spaces around it"
    ),
}


@pytest.mark.parametrize(
    "text", NO_JOB_MATCHES, ids=["comma", "account comma", "empty", "blank", "space", "tab"]
)
def test_a_rule_partition_or_account_no_job_can_match_is_refused_by_check_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    path, line = refused_by_check_config(tmp_path, caplog, text)
    assert line.startswith(f"{path}: {NO_JOB_MATCHES[text]}"), line


def test_one_rule_per_partition_matches_each_and_a_job_for_both() -> None:
    """What the refusal tells the site to write instead."""
    from slurm_harp.core.request import JobRequest

    text = "[policy]\nmode = 'rewrite'\n" + "".join(
        f"[[policy.rule]]\npartition = '{p}'\nmode = 'off'\n" for p in ("debug", "short")
    )
    policy = parse(tomllib.loads(text)).policy
    for partition in ("debug", "short", "debug,short"):
        assert policy.mode_for(JobRequest(partition=partition, account="a")) is Mode.OFF
    assert policy.mode_for(JobRequest(partition="batch", account="a")) is Mode.REWRITE


@pytest.mark.parametrize("mode", ["0600", "0640", "0620", "0700"])
def test_a_socket_mode_that_shuts_out_the_socket_group_is_refused(mode: str) -> None:
    """SlurmUser (not root) connects through server.socket_group: with '0600' every connect failed
    and the plugin let every job through unchanged, while check-config and serve said nothing."""
    with pytest.raises(ConfigError) as err:
        parse({"server": {"socket_group": "slurm", "socket_mode": mode}})
    assert str(err.value) == (
        "<config>: server.socket_mode: must let server.socket_group (slurm) read and write the socket, "
        f"which SlurmUser connects through (e.g. '0660'), got '{mode}'"
    )


def test_a_socket_mode_without_a_socket_group_may_be_the_owners_alone() -> None:
    """With no socket_group the daemon's own group owns the socket: root as SlurmUser connects."""
    assert parse({"server": {"socket_mode": "0600"}}).server.socket_mode == 0o600
    both = parse({"server": {"socket_group": "slurm", "socket_mode": "0670"}}).server
    assert (both.socket_group, both.socket_mode) == ("slurm", 0o670)


def test_check_config_warns_of_a_file_without_history_db(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Good for `harp serve` (no history features), refused by `harp nightly`: said, exit 0."""
    path = tmp_path / "harp.toml"
    path.write_text("[policy]\nmode = 'shadow'\n")
    assert main(["check-config", str(path)]) == 0
    assert f"{path}: ok (policy mode shadow)" in capsys.readouterr().out
    [warning] = [r for r in caplog.records]
    assert warning.levelname == "WARNING" and warning.getMessage() == (
        f"{path}: no history.db: the daemon serves without history features, and `harp nightly` "
        "refuses to run (it harvests into and trains from that job store)"
    )
    caplog.clear()
    path.write_text(f"[history]\ndb = '{tmp_path / 'jobs.sqlite'}'\n")
    assert main(["check-config", str(path)]) == 0
    assert caplog.records == []


# Endpoints check-config said ok to, and `harp serve` or `harp guard` then refused to start with
# (exit 1): a blank address, for which getaddrinfo has no host, a host:port or a bracketed IPv6
# address given as the address, and two endpoints on one port and address, both on the controller
# (the guard's where a mode runs it: GUARDED).
GUARDED = "[policy]\nmode = 'extend'\n"
BAD_ENDPOINTS = {
    "[server]\nmetrics_address = ''\nmetrics_port = 9817\n": (
        "server.metrics_address: must be a host name or address (such as 127.0.0.1 or 0.0.0.0), got ''"
    ),
    "[guard]\nmetrics_address = ''\n": "guard.metrics_address: must be a host name or address",
    "[guard]\nmetrics_address = ' 127.0.0.1'\n": (
        "guard.metrics_address: must be one host name or address without spaces, got ' 127.0.0.1'"
    ),
    "[server]\nmetrics_address = '127.0.0.1:9817'\n": (
        "server.metrics_address: must be an address alone, without brackets or a port (that is "
        "server.metrics_port), got '127.0.0.1:9817'"
    ),
    "[guard]\nmetrics_address = '[::1]'\n": "guard.metrics_address: must be an address alone, without",
    "[guard]\nmetrics_address = 'a..b'\n": (
        "guard.metrics_address: not a host name or address: label empty or too long, got 'a..b'"
    ),
    f"{GUARDED}[server]\nmetrics_port = 9817\n[guard]\nmetrics_port = 9817\n": (
        "guard.metrics_port: 9817 is server.metrics_port's port too, on 127.0.0.1 and 127.0.0.1: both "
        "listen on this host, and the second to start could not (give each its own port)"
    ),
    "[policy]\nmode = 'shadow'\n[[policy.rule]]\npartition = 'long'\nmode = 'time_min'\n"
    "[server]\nmetrics_port = 9817\n[guard]\nmetrics_port = 9817\n": (
        "guard.metrics_port: 9817 is server.metrics_port's port too, on 127.0.0.1 and 127.0.0.1"
    ),
    f"{GUARDED}[server]\nmetrics_port = 9817\n[guard]\nmetrics_address = '0.0.0.0'\nmetrics_port = 9817\n": (
        "guard.metrics_port: 9817 is server.metrics_port's port too, on 0.0.0.0 and 127.0.0.1"
    ),
    f"{GUARDED}[server]\nmetrics_address = '::'\nmetrics_port = 9817\n[guard]\nmetrics_port = 9817\n": (
        "guard.metrics_port: 9817 is server.metrics_port's port too, on 127.0.0.1 and ::"
    ),
    f"{GUARDED}[server]\nmetrics_address = 'LOCALHOST'\nmetrics_port = 9817\n"
    "[guard]\nmetrics_address = 'localhost'\nmetrics_port = 9817\n": (
        "guard.metrics_port: 9817 is server.metrics_port's port too, on localhost and LOCALHOST"
    ),
    f"{GUARDED}[server]\nmetrics_address = '0'\nmetrics_port = 9817\n[guard]\nmetrics_port = 9817\n": (
        "guard.metrics_port: 9817 is server.metrics_port's port too, on 127.0.0.1 and 0"
    ),
    "[server]\ntcp = '127.0.0.1:9817'\nmetrics_port = 9817\n": (
        "server.metrics_port: 9817 is server.tcp's port too, on 127.0.0.1 and 127.0.0.1"
    ),
    f"{GUARDED}[server]\ntcp = '[::]:9818'\n[guard]\nmetrics_port = 9818\n": (
        "guard.metrics_port: 9818 is server.tcp's port too, on 127.0.0.1 and [::]"
    ),
    # grpcio binds 0.0.0.0 as [::], IPv6 too, and localhost as both loopbacks
    "[server]\ntcp = '0.0.0.0:9817'\nmetrics_address = '::1'\nmetrics_port = 9817\n": (
        "server.metrics_port: 9817 is server.tcp's port too, on ::1 and 0.0.0.0: both listen"
    ),
    "[server]\ntcp = 'localhost:9817'\nmetrics_address = '::1'\nmetrics_port = 9817\n": (
        "server.metrics_port: 9817 is server.tcp's port too, on ::1 and localhost"
    ),
    f"{GUARDED}[server]\ntcp = 'localhost:9818'\n[guard]\nmetrics_port = 9818\n": (
        "guard.metrics_port: 9818 is server.tcp's port too, on 127.0.0.1 and localhost"
    ),
    # Linux binds an IPv4-mapped address as the IPv4 one: the second to start could not
    f"{GUARDED}[server]\nmetrics_address = '::ffff:127.0.0.1'\nmetrics_port = 9817\n"
    "[guard]\nmetrics_port = 9817\n": (
        "guard.metrics_port: 9817 is server.metrics_port's port too, on 127.0.0.1 and ::ffff:127.0.0.1"
    ),
    f"{GUARDED}[server]\nmetrics_address = '0.0.0.0'\nmetrics_port = 9817\n"
    "[guard]\nmetrics_address = '::FFFF:7f00:2'\nmetrics_port = 9817\n": (
        "guard.metrics_port: 9817 is server.metrics_port's port too, on ::FFFF:7f00:2 and 0.0.0.0"
    ),
}
ENDPOINT_IDS = [
    "empty", "guard empty", "padded", "host:port", "brackets", "empty label", "same port",
    "a rule's guard", "IPv4 wildcard", "IPv6 wildcard", "localhost twice", "short wildcard", "tcp",
    "guard and tcp", "tcp wildcard", "tcp localhost, ::1", "tcp localhost, 127.0.0.1", "v4-mapped",
    "v4-mapped, v4 wildcard",
]  # fmt: skip


@pytest.mark.parametrize("text", BAD_ENDPOINTS, ids=ENDPOINT_IDS)
def test_an_endpoint_serve_or_guard_could_not_start_with_is_refused_naming_the_key(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(tomllib.loads(text))
    assert str(err.value).startswith(f"<config>: {BAD_ENDPOINTS[text]}"), err.value


@pytest.mark.parametrize(
    "text",
    [
        "[server]\nmetrics_port = 9817\n[guard]\nmetrics_port = 9818\n",  # the shipped harp.toml's
        "[server]\nmetrics_address = '127.0.0.1'\nmetrics_port = 9817\n"
        "[guard]\nmetrics_address = '127.0.0.2'\nmetrics_port = 9817\n",  # two addresses of one port
        "[server]\nmetrics_address = '0.0.0.0'\nmetrics_port = 9817\n"
        "[guard]\nmetrics_address = '::1'\nmetrics_port = 9817\n",  # IPv4's wildcard, IPv6's loopback
        "[server]\nmetrics_address = '::1'\n[guard]\nmetrics_address = '::1'\n",  # no port: no endpoint
        "[server]\ntcp = '0.0.0.0:50051'\nmetrics_address = 'fe80::1%eth0'\nmetrics_port = 9817\n",
        "[guard]\nmetrics_address = 'prom.example.'\nmetrics_port = 9818\n",
        "[server]\nmetrics_address = '::ffff:127.0.0.2'\nmetrics_port = 9817\n"
        "[guard]\nmetrics_port = 9817\n",  # a v4-mapped address of another IPv4 one
    ],
    ids=[
        "distinct ports",
        "distinct addresses",
        "v4 wildcard, v6 loopback",
        "no port",
        "tcp",
        "name",
        "v4-mapped, other",
    ],
)
def test_endpoints_that_can_listen_side_by_side_are_read(text: str) -> None:
    parse(tomllib.loads(GUARDED + text))


@pytest.mark.parametrize("loopback", ["127.0.0.1", "::1"])
def test_localhost_is_a_name_between_two_metrics_endpoints(loopback: str) -> None:
    """A metrics endpoint binds the first address getaddrinfo gives for localhost, ::1 or 127.0.0.1 by
    the host's /etc/hosts: taken for both, one of the two was always refused where both bound."""
    text = "[server]\nmetrics_address = 'localhost'\nmetrics_port = 9817\n[guard]\nmetrics_port = 9817\n"
    parse(tomllib.loads(f"{GUARDED}{text}metrics_address = '{loopback}'\n"))


@pytest.mark.parametrize(
    "policy",
    [
        "mode = 'shadow'\n",
        "mode = 'off'\n",
        "mode = 'rewrite'\n",
        "mode = 'shadow'\n[[policy.rule]]\npartition = 'debug'\nmode = 'rewrite'\n",
    ],
    ids=["shadow", "off", "rewrite", "rules without the guard"],
)
@pytest.mark.parametrize(
    "endpoints",
    ["[server]\nmetrics_port = 9818\n", "[server]\ntcp = '0.0.0.0:9818'\n"],
    ids=["metrics", "tcp"],
)
def test_the_guards_endpoint_is_not_compared_where_no_mode_runs_the_guard(
    policy: str, endpoints: str
) -> None:
    """The role writes [guard] metrics_port = 9818 whatever the mode, and starts no guard in these: a
    site that had moved the daemon's port to 9818 saw every command exit 2."""
    settings = parse(tomllib.loads(f"[policy]\n{policy}{endpoints}[guard]\nmetrics_port = 9818\n"))
    assert settings.guard.metrics_port == 9818


def test_check_config_says_a_guard_endpoint_on_the_daemons_port_where_no_guard_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Good (exit 0), with a warning: a mode changed to time_min or extend would make it refused."""
    path = tmp_path / "harp.toml"
    history = f"[history]\ndb = '{tmp_path / 'jobs.sqlite'}'\n"  # no other warning
    path.write_text(f"{history}[server]\nmetrics_port = 9818\n[guard]\nmetrics_port = 9818\n")
    assert main(["check-config", str(path)]) == 0
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert line.startswith(
        f"{path}: guard.metrics_port: 9818 is server.metrics_port's port too, on 127.0.0.1 and "
        "127.0.0.1: no mode here runs the guard, but one started for a time_min or extend mode could "
        "not listen"
    ), line


def test_check_config_refuses_the_server_and_the_guard_on_one_metrics_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The audit's file: check-config said ok (exit 0), and the guard then exited 1 beside the daemon
    with `Address already in use`."""
    text = "[server]\nmetrics_port = 19890\n[policy]\nmode = 'extend'\n[guard]\nmetrics_port = 19890\n"
    path, line = refused_by_check_config(tmp_path, caplog, text)
    assert line.startswith(f"{path}: guard.metrics_port: 19890 is server.metrics_port's port too"), line
