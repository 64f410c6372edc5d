"""The daemon served over real gRPC on a Unix socket, with a real ONNX model from the store."""

from __future__ import annotations

import math
import shutil
import stat
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client import CollectorRegistry

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.config import parse
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.model import runtime
from slurm_harp.model.store import ModelStore
from slurm_harp.server import reloader
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.socket_path import DaemonError
from tests.integration.harp_client import Client, target


def make_daemon(tmp: Path, store: Path, mode: str = "rewrite", **server: object) -> Daemon:
    settings = parse(
        {
            "server": {"socket": str(tmp / "harp.sock"), **server},
            "store": {"path": str(store)},
            "policy": {"mode": mode, "floor": {"time_minutes": 5}},
        }
    )
    return Daemon(settings, CollectorRegistry())


def promote_a_copy(root: Path) -> tuple[Path, Path]:
    """Publish a copy of the store's serving time model as a newer version and make it CURRENT, as
    a promotion or `harp rollback` does: (the version that served, the new one)."""
    store = ModelStore(root)
    current = store.current_dir(Target.TIME)
    assert current is not None
    newer = current.with_name("20991231T235959.000000Z")
    shutil.copytree(current, newer)
    (newer / "card.json").write_text((current / "card.json").read_text().replace(current.name, newer.name))
    store.set_current(Target.TIME, newer.name)
    return current, newer


@pytest.fixture
def running(tmp_path: Path, store_copy: Path) -> Iterator[tuple[Daemon, Client]]:
    daemon = make_daemon(tmp_path, store_copy)
    daemon.start()
    client = Client(tmp_path / "harp.sock")
    yield daemon, client
    client.close()
    daemon.stop(grace=0)


def test_calibrated_rule_rewrites_where_the_saving_pays(running: tuple[Daemon, Client]) -> None:
    daemon, client = running
    # A 32-core day: the saving pays for the rule's validated risk.
    reply = client.predict(user_name="u5", time_limit_minutes=24 * 60, min_cpus=32, submit_time=850000000)
    time = target(reply, "time")
    version = daemon.predictor.models[Target.TIME].version
    assert time.model_version == version and time.HasField("predicted") and not time.HasField("quantile")
    assert time.action == pb.ACTION_REWRITE
    assert 5 <= time.new_value <= 24 * 60
    assert reply.user_message.startswith("harp: lowered time from 1-00:00:00")
    assert reply.annotation.startswith("harp:rewrite,t!=")
    for other in ("memory", "cpus"):
        assert target(reply, other).reason == pb.REASON_NO_MODEL
    # A one-core hour: too little to save for the risk; the prediction is still reported.
    small = target(client.predict(user_name="u5", time_limit_minutes=60, min_cpus=1), "time")
    assert small.action == pb.ACTION_ANNOTATE and small.reason == pb.REASON_NO_GAIN
    assert small.HasField("predicted")


def test_quantile_limits_ignore_the_calibrated_rule(tmp_path: Path, store_copy: Path) -> None:
    settings = parse(
        {
            "server": {"socket": str(tmp_path / "harp.sock")},
            "store": {"path": str(store_copy)},
            "policy": {"mode": "rewrite", "limits": "quantile", "quantile": 0.5, "min_gain": 0.0},
        }
    )
    daemon = Daemon(settings, CollectorRegistry())
    daemon.start()
    try:
        with Client(tmp_path / "harp.sock") as client:
            time = target(client.predict(time_limit_minutes=3 * 24 * 60, min_cpus=1), "time")
    finally:
        daemon.stop(grace=0)
    assert time.quantile == pytest.approx(0.5) and time.action == pb.ACTION_REWRITE
    assert time.new_value == pytest.approx(max(10, math.ceil(time.predicted)), abs=1)


def test_health_reflection_and_socket_mode(running: tuple[Daemon, Client], tmp_path: Path) -> None:
    _, client = running
    assert client.status() == "SERVING" and client.status("harp.v1.Predictor") == "SERVING"
    assert stat.S_IMODE((tmp_path / "harp.sock").stat().st_mode) == 0o660
    stub = reflection_pb2_grpc.ServerReflectionStub(client.channel)
    replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for r in replies for s in r.list_services_response.service}
    assert {"harp.v1.Predictor", "grpc.health.v1.Health"} <= names


def test_no_model_answers_none(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, tmp_path / "empty-store")
    daemon.start()
    try:
        with Client(tmp_path / "harp.sock") as client:
            reply = client.predict(time_limit_minutes=60)
            assert [t.reason for t in reply.targets] == [pb.REASON_NO_MODEL] * 3
            assert reply.annotation == "" and client.status() == "SERVING"
    finally:
        daemon.stop(grace=0)


def test_corrupt_new_model_is_rejected_and_old_keeps_serving(
    running: tuple[Daemon, Client], store_copy: Path
) -> None:
    daemon, client = running
    old = daemon.predictor.models[Target.TIME].version
    store = ModelStore(store_copy)
    current = store.current_dir(Target.TIME)
    assert current is not None
    # A newer version whose ONNX file is damaged, promoted to CURRENT.
    bad = current.with_name("20991231T235959.000000Z")  # a later, well-formed version name
    shutil.copytree(current, bad)
    onnx_file = next(bad.glob("*.onnx"))
    onnx_file.write_bytes(onnx_file.read_bytes()[: onnx_file.stat().st_size // 2])
    store.set_current(Target.TIME, bad.name)
    counted = {"target": "time", "result": "rejected"}
    before = daemon.registry.get_sample_value("harp_model_reloads_total", counted) or 0.0
    rejected = daemon.reload_models()
    assert rejected and "time" in rejected[0]
    assert daemon.registry.get_sample_value("harp_model_reloads_total", counted) == before + 1
    assert daemon.predictor.models[Target.TIME].version == old
    assert target(client.predict(time_limit_minutes=600), "time").model_version == old


def test_a_current_moved_while_models_load_is_loaded_at_the_next_poll(
    running: tuple[Daemon, Client], store_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback lands while the daemon loads the version just promoted: the store's state was
    read after the load, so the poll saw nothing new and the daemon kept the version rolled back
    from until the next promotion or restart."""
    daemon, client = running
    old, newer = promote_a_copy(store_copy)
    load = runtime.load_version

    def rolled_back_meanwhile(version_dir: Path, of: Target) -> Any:
        model = load(version_dir, of)
        ModelStore(store_copy).set_current(Target.TIME, old.name)
        return model

    monkeypatch.setattr(reloader, "load_version", rolled_back_meanwhile)
    daemon.reload_models()
    monkeypatch.undo()
    assert daemon.predictor.models[Target.TIME].version == newer.name
    daemon.poll_store()
    assert daemon.predictor.models[Target.TIME].version == old.name
    assert target(client.predict(time_limit_minutes=600), "time").model_version == old.name


def test_a_daemon_started_on_an_unreadable_current_serves_the_newest_version(
    tmp_path: Path, store_copy: Path
) -> None:
    _, newer = promote_a_copy(store_copy)
    (store_copy / "time" / "CURRENT").write_text("garbage\n")
    daemon = make_daemon(tmp_path, store_copy)
    daemon.start()
    try:
        with Client(tmp_path / "harp.sock") as client:
            assert target(client.predict(time_limit_minutes=600), "time").model_version == newer.name
    finally:
        daemon.stop(grace=0)


def test_a_version_of_another_target_is_rejected_not_served(
    running: tuple[Daemon, Client], store_copy: Path
) -> None:
    daemon, client = running
    store = ModelStore(store_copy)
    current = store.current_dir(Target.TIME)
    assert current is not None and store.current_dir(Target.MEMORY) is None
    # The time model copied into the memory directory and made its CURRENT (a slip by hand).
    shutil.copytree(current, store.target_dir(Target.MEMORY) / current.name)
    store.set_current(Target.MEMORY, current.name)
    rejected = daemon.reload_models()
    assert rejected == (
        f"memory: {store.target_dir(Target.MEMORY) / current.name / 'card.json'}: the card is for "
        "target 'time', the version is in the store's 'memory' directory",
    )
    assert Target.MEMORY not in daemon.predictor.models
    reply = client.predict(time_limit_minutes=600, mem_per_node_mb=64000)
    assert target(reply, "memory").reason == pb.REASON_NO_MODEL
    assert target(reply, "time").model_version == current.name


def test_bad_config_on_reload_keeps_policy(tmp_path: Path, store_copy: Path) -> None:
    conf = tmp_path / "harp.toml"
    conf.write_text(f'[server]\nsocket = "{tmp_path}/harp.sock"\n[store]\npath = "{store_copy}"\n')
    from slurm_harp.config import load

    daemon = Daemon(load(conf), CollectorRegistry())
    daemon.start()
    try:
        conf.write_text("[policy]\nmode = 'sometimes'\n")
        daemon.reload()
        assert daemon.predictor.policy.default_mode.value == "shadow"
        conf.write_text(f'[store]\npath = "{store_copy}"\n[policy]\nmode = "off"\n')
        daemon.reload()
        with Client(tmp_path / "harp.sock") as client:
            assert client.predict(time_limit_minutes=60).mode == "off"
    finally:
        daemon.stop(grace=0)


def test_a_reload_refuses_what_serve_would_refuse_at_its_next_start(
    tmp_path: Path, store_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A socket group this host lacks, an advice socket too long for its relay: load() reads the
    file, `harp serve` refuses it (start_problem). SIGHUP took it in (its policy applied), and the
    next restart refused to start."""
    from slurm_harp.config import load

    sock, conf = tmp_path / "harp.sock", tmp_path / "harp.toml"
    good = f'[server]\nsocket = "{sock}"\n[store]\npath = "{store_copy}"\n[policy]\nmode = "shadow"\n'
    conf.write_text(good)
    daemon = Daemon(load(conf), CollectorRegistry())
    daemon.start()

    def mode() -> str:  # read anew each time (mypy would narrow the attribute to its first value)
        return daemon.predictor.policy.default_mode.value

    try:
        typo = good.replace("[store]", '\nsocket_group = "nosuchgroup-harp"\n[store]')
        conf.write_text(typo.replace('mode = "shadow"', 'mode = "off"'))
        daemon.reload()
        assert mode() == "shadow"
        assert daemon.settings.server.socket_group is None
        assert (
            f"reload: keeping the previous configuration: {conf}: server.socket_group: no group "
            "'nosuchgroup-harp' on this host" in caplog.text
        )
        with Client(sock) as client:
            assert client.predict(time_limit_minutes=60).mode == "shadow"
        # An advice socket too long for the relay's beside it: `harp serve` refuses that too.
        long_advice = tmp_path / ("a" * (108 - len(str(tmp_path)))) / "advice.sock"
        conf.write_text(f'{good.replace("shadow", "off")}[advice]\nsocket = "{long_advice}"\n')
        daemon.reload()
        assert mode() == "shadow"
        kept = "reload: keeping the previous configuration"
        assert f"{kept}: {conf}: advice.socket: {long_advice}" in caplog.text
        conf.write_text(good.replace('mode = "shadow"', 'mode = "off"'))  # the typo mended
        daemon.reload()
        assert mode() == "off"
    finally:
        daemon.stop(grace=0)


def test_a_reader_error_on_reload_keeps_policy(
    tmp_path: Path, store_copy: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever reading the file raises, SIGHUP must not end the daemon that serves every job."""
    daemon = make_daemon(tmp_path, store_copy, mode="shadow")
    daemon.settings = replace(daemon.settings, source=tmp_path / "harp.toml")
    daemon.start()
    try:

        def broken(path: object) -> object:
            raise TypeError("a reader's bug")

        monkeypatch.setattr("slurm_harp.server.daemon.load", broken)
        daemon.reload()
        assert daemon.predictor.policy.default_mode.value == "shadow"
        assert f"reading {tmp_path / 'harp.toml'} failed" in caplog.text and "a reader's bug" in caplog.text
        with Client(tmp_path / "harp.sock") as client:
            assert client.predict(time_limit_minutes=60).mode == "shadow"
    finally:
        daemon.stop(grace=0)


def test_a_reload_applies_store_policy_and_billing_at_once_and_the_rest_after_a_restart(
    tmp_path: Path, store_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/configuration.md: SIGHUP's reload applies [store], [policy] and [billing] changes at
    once; [server], [history], [guard] and [advice] changes are logged and wait for a restart."""
    from slurm_harp.config import load

    sock, conf = tmp_path / "harp.sock", tmp_path / "harp.toml"
    conf.write_text(
        f'[server]\nsocket = "{sock}"\n[store]\npath = "{store_copy}"\n[policy]\nmode = "shadow"\n'
    )
    other = tmp_path / "other-store"  # another store, whose CURRENT time model is a newer version
    shutil.copytree(store_copy, other)
    current, newer = promote_a_copy(other)
    daemon = Daemon(load(conf), CollectorRegistry())
    daemon.start()
    try:
        with Client(sock) as client:
            before = client.predict(time_limit_minutes=600)
            assert before.mode == "shadow" and target(before, "time").model_version == current.name
            conf.write_text(
                f'[server]\nsocket = "{tmp_path}/elsewhere.sock"\nmax_workers = 2\n'
                f'[store]\npath = "{other}"\n[policy]\nmode = "off"\n[billing]\nprice = 2.5\n'
                "[history]\nwindow_days = 40\n[guard]\npoll_seconds = 9\nstale_seconds = 60\n"
                "[advice]\nmax_connections = 4\n"
            )
            daemon.reload()
            after = client.predict(time_limit_minutes=600)  # on the socket it had
            assert after.mode == "off" and target(after, "time").model_version == newer.name
        assert daemon.settings.store == other and daemon.settings.billing.price == 2.5
        assert daemon.settings.server.socket == sock and daemon.settings.server.max_workers == 8
        assert not (tmp_path / "elsewhere.sock").exists()
        assert daemon.settings.history.window_days == 30 and daemon.settings.guard.stale_seconds == 30.0
        assert daemon.settings.advice.max_connections == 64
        for name in ("[server]", "[history]", "guard.stale_seconds", "[advice]"):
            assert f"reload: {name} changes take effect only after a restart" in caplog.text
        # The guard's own keys are the guard's: the daemon reads none of them, and says nothing.
        assert "guard.poll_seconds" not in caplog.text and "[guard]" not in caplog.text
    finally:
        daemon.stop(grace=0)


def test_outcome_figures_follow_a_reload_to_another_store(tmp_path: Path, store_copy: Path) -> None:
    """The outcome gauges name the version that served a job by asking the store configured now:
    after a reload moved [store] path, the new store's versions are found (not "unknown")."""
    from slurm_harp.config import load

    sock, conf, db = tmp_path / "harp.sock", tmp_path / "harp.toml", tmp_path / "jobs.sqlite"
    config = f'[server]\nsocket = "{sock}"\n[history]\ndb = "{db}"\n[store]\npath = "{{}}"\n'
    conf.write_text(config.format(store_copy))
    other = tmp_path / "other-store"
    shutil.copytree(store_copy, other)
    _, newer = promote_a_copy(other)  # a version only the other store holds
    daemon = Daemon(load(conf), CollectorRegistry())
    conf.write_text(config.format(other))
    daemon.reload()
    assert daemon.history is not None and daemon.history.outcomes is not None
    served = JobRecord(
        "1", JobRequest(partition="batch", time_limit_minutes=600), "COMPLETED", 1800,
        end_time=int(time.time()) - 3600, alloc_cpus=4, harp_tag=f"harp:shadow,t=60,v={newer.name}",
    )  # fmt: skip
    with JobStore(db) as jobs:
        jobs.merge([served], "sacct")
        daemon.history.outcomes.refresh(jobs, force=True)
    counted = {
        sample.labels["version"]: sample.value
        for family in daemon.history.outcomes.collect()
        for sample in family.samples
        if sample.name == "harp_outcome_jobs"
    }
    assert counted == {newer.name: 1.0}


def test_stop_reports_not_serving_and_removes_socket(tmp_path: Path, store_copy: Path) -> None:
    daemon = make_daemon(tmp_path, store_copy)
    daemon.start()
    daemon.stop(grace=0)
    assert not (tmp_path / "harp.sock").exists()


def test_metrics_are_scraped_over_http(tmp_path: Path, store_copy: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = make_daemon(tmp_path, store_copy, metrics_port=port)
    daemon.start()
    try:
        with Client(tmp_path / "harp.sock") as client:
            reply = client.predict(time_limit_minutes=3 * 24 * 60, min_cpus=32)
            assert target(reply, "time").action == pb.ACTION_REWRITE
        # The lane counts a call once its answer is sent: the count may trail the answer a little.
        deadline = time.monotonic() + 5
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            if "harp_decisions_total{" in text or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    finally:
        daemon.stop(grace=0)
    assert "harp_predict_duration_seconds_count 1.0" in text
    assert 'harp_decisions_total{action="rewrite",mode="rewrite",reason="unspecified",target="time"}' in text
    assert 'harp_model_info{target="time",version=' in text


def test_health_is_not_serving_while_models_load_and_after_shutdown(
    tmp_path: Path, store_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import slurm_harp.server.daemon as daemon_module

    loading = threading.Event()
    release = threading.Event()
    real = reloader.reload_models  # what the daemon module imported, and calls

    def slow_reload(*args: Any, **kwargs: Any) -> Any:
        loading.set()
        assert release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(daemon_module, "reload_models", slow_reload)
    daemon = make_daemon(tmp_path, store_copy)
    starter = threading.Thread(target=daemon.start)
    starter.start()
    try:
        assert loading.wait(10)
        with Client(tmp_path / "harp.sock") as client:
            assert client.status() == "NOT_SERVING"
            # Answering meanwhile is still safe: no model yet means "do nothing".
            assert target(client.predict(time_limit_minutes=600), "time").reason == pb.REASON_NO_MODEL
            release.set()
            starter.join(10)
            assert client.status() == "SERVING"
            daemon.health.enter_graceful_shutdown()
            assert client.status() == "NOT_SERVING"
    finally:
        release.set()
        starter.join(10)
        daemon.stop(grace=0)


def test_socket_group_is_applied(tmp_path: Path, store_copy: Path) -> None:
    import grp
    import os

    if os.geteuid() != 0:
        pytest.skip("giving the socket to another group needs root")
    other = next(g for g in grp.getgrall() if g.gr_gid != os.getgid())
    daemon = make_daemon(tmp_path, store_copy, socket_group=other.gr_name, socket_mode="0660")
    daemon.start()
    try:
        st = (tmp_path / "harp.sock").stat()
        assert st.st_gid == other.gr_gid and stat.S_IMODE(st.st_mode) == 0o660
    finally:
        daemon.stop(grace=0)


def test_a_socket_group_gone_when_the_socket_is_bound_again_is_logged_and_retried(
    tmp_path: Path, store_copy: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import grp
    import os

    group = grp.getgrgid(os.getgid())
    sock = tmp_path / "harp.sock"
    daemon = make_daemon(tmp_path, store_copy, socket_group=group.gr_name, grace_seconds=0)
    daemon.start()
    try:
        sock.unlink()  # a cleaner removed it, and the group went with an account clean-up

        def gone(name: str) -> grp.struct_group:
            raise KeyError(name)

        monkeypatch.setattr("slurm_harp.config.host.grp.getgrnam", gone)
        daemon.check_socket()  # must not raise: the loop calling it is the daemon's
        assert f"server.socket_group: no group {group.gr_name!r} on this host" in caplog.text
        assert not sock.exists()  # no socket rather than one with grpcio's own mode
        monkeypatch.undo()
        daemon.check_socket()
        st = sock.stat()
        assert st.st_gid == group.gr_gid and stat.S_IMODE(st.st_mode) == 0o660
        with Client(sock) as client:
            assert client.status() == "SERVING"
    finally:
        daemon.stop(grace=0)


def test_a_socket_that_cannot_be_secured_is_removed(
    tmp_path: Path, store_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: object, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr("slurm_harp.server.socket_path.os.chmod", refuse)
    daemon = make_daemon(tmp_path, store_copy)
    try:
        with pytest.raises(DaemonError) as err:
            daemon.start()
        assert str(err.value).startswith(f"cannot give {tmp_path / 'harp.sock'} its group and mode:")
        assert not (tmp_path / "harp.sock").exists()
    finally:
        daemon.stop(grace=0)


def test_under_umask_0_no_one_else_can_connect_before_the_socket_has_its_mode(
    store_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `harp serve` by hand from a shell with umask 0: grpcio bound the socket 0777 and mkdir made
    # its directory 0777; anyone connecting before the chmod kept a served connection after it.
    import os
    import tempfile

    from tests.integration.as_user import connect_as

    base = Path(tempfile.mkdtemp(prefix="harp-umask-"))
    os.chmod(base, 0o755)  # others may search it, as /run
    sock = base / "run" / "harp.sock"
    seen: dict[str, object] = {}
    chmod = os.chmod

    def at_chmod(path: Any, mode: int) -> None:
        if Path(path) == sock and not seen:
            seen["socket"] = stat.S_IMODE(sock.stat().st_mode)
            seen["dir"] = stat.S_IMODE(sock.parent.stat().st_mode)
            if os.geteuid() == 0:
                try:
                    seen["connected"] = connect_as(65534, sock)
                except OSError as exc:
                    seen["connected"] = exc
        chmod(path, mode)

    monkeypatch.setattr("slurm_harp.server.socket_path.os.chmod", at_chmod)
    daemon = make_daemon(base / "run", store_copy)
    old = os.umask(0)
    try:
        daemon.start()
    finally:
        os.umask(old)
        daemon.stop(grace=0)
        shutil.rmtree(base)
    assert seen["socket"] == 0o700 and seen["dir"] == 0o755
    if "connected" in seen:
        assert "PermissionError" in str(seen["connected"]), seen["connected"]  # not a socket


def test_optional_tcp_listener(tmp_path: Path, store_copy: Path) -> None:
    import socket

    import grpc

    from slurm_harp.api import predictor_pb2_grpc as pb_grpc

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = make_daemon(tmp_path, store_copy, tcp=f"127.0.0.1:{port}")
    daemon.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = pb_grpc.PredictorStub(channel).Predict(
                pb.SubmitRequest(time_limit_minutes=600), timeout=5
            )
        assert target(reply, "time").HasField("predicted")
    finally:
        daemon.stop(grace=0)


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "pool"])
def test_predict_is_answered_in_the_lane_or_the_pool_alike(
    tmp_path: Path, store_copy: Path, monkeypatch: pytest.MonkeyPatch, lane: bool
) -> None:
    import threading

    from slurm_harp.server.service import PredictorService

    threads: list[str] = []
    answer = PredictorService.answer

    def spy(self: PredictorService, data: bytes) -> bytes:
        threads.append(threading.current_thread().name)
        return answer(self, data)

    monkeypatch.setattr(PredictorService, "answer", spy)
    daemon = make_daemon(tmp_path, store_copy, predict_lane=lane)
    daemon.start()
    try:
        with Client(tmp_path / "harp.sock") as client:
            reply = client.predict(user_name="u5", time_limit_minutes=24 * 60, min_cpus=32)
            assert client.status("harp.v1.Predictor") == "SERVING"
    finally:
        daemon.stop(grace=0)
    assert target(reply, "time").action == pb.ACTION_REWRITE
    # The lane answers in grpcio's polling thread (grpc._server._serve), the pool in its workers.
    assert len(threads) == 1, threads
    assert threads[0].endswith("(_serve)") if lane else threads[0].startswith("harp-rpc"), threads
