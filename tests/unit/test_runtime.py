from __future__ import annotations

import json
import os
import resource
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from prometheus_client import CollectorRegistry

from slurm_harp.accounting import JobRecord
from slurm_harp.core.features import FEATURE_NAMES, vectorize
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.calibration import CalibrationConfig
from slurm_harp.learning.fitting import MethodConfig
from slurm_harp.model import card as card_module
from slurm_harp.model.card import PROMOTION_FILE, UNIT
from slurm_harp.model.runtime import ModelError, QuantileModel, load_version
from slurm_harp.model.store import ModelStore
from slurm_harp.model.store_files import read_model, sha256_hex
from slurm_harp.server.reloader import reload_models
from slurm_harp.server.serving_metrics import ServingMetrics
from tests.conftest import traced_peak
from tests.training_helpers import train_walltime


def _records(n: int = 600) -> list[JobRecord]:
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        user = int(rng.integers(0, 5))
        run = int(rng.lognormal(np.log(300 * (user + 1)), 0.4)) + 1
        out.append(
            JobRecord(
                job_id=str(i),
                request=JobRequest(
                    user_name=f"u{user}", time_limit_minutes=60 * (user + 1), submit_time=1_700_000_000 + i
                ),
                state="COMPLETED",
                elapsed_s=run,
            )
        )
    return out


@pytest.fixture(scope="module")
def version_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A 5 % budget, which the 120 validation jobs can show met (calibration.jobs_needed): a rule with rungs.
    config = MethodConfig(calibration=CalibrationConfig(kill_budget=0.05))
    result = train_walltime(
        _records(), (0.5, 0.9, 0.95), params=BoosterParams(n_estimators=30), config=config
    )
    store = ModelStore(tmp_path_factory.mktemp("store"))
    store.publish(Target.TIME, result.files, result.card)
    directory = store.current_dir(Target.TIME)
    assert directory is not None
    return directory


@pytest.fixture()
def copy(version_dir: Path, tmp_path: Path) -> Path:
    """A private copy (same version name) to damage."""
    return Path(shutil.copytree(version_dir, tmp_path / version_dir.name))


def _edit_card(directory: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = directory / "card.json"
    card = json.loads(path.read_text())
    change(card)
    path.write_text(json.dumps(card))


def test_load_and_predict(version_dir: Path) -> None:
    model = QuantileModel.load(version_dir)
    assert model.target is Target.TIME
    assert model.version == version_dir.name
    assert model.quantiles == (0.5, 0.9, 0.95)
    assert model.card["features"] == list(FEATURE_NAMES)
    requests = [JobRequest(user_name=f"u{u}", time_limit_minutes=60 * (u + 1)) for u in range(5)]
    out = model.predict(vectorize(requests))
    assert set(out) == {0.5, 0.9, 0.95}
    for values in out.values():
        assert values.shape == (5,) and np.all(np.isfinite(values)) and np.all(values >= 0)
    assert np.all(out[0.5] <= out[0.9]) and np.all(out[0.9] <= out[0.95])
    # Users were generated with run times growing with their number: the median follows (minutes).
    assert out[0.5][4] > out[0.5][0]
    assert 2 < out[0.5][0] < 15
    single = model.predict(vectorize(requests[:1]).astype(np.float64))
    assert single[0.9][0] == pytest.approx(out[0.9][0], rel=1e-6)


def test_flipped_bytes_in_a_model_file(copy: Path) -> None:
    path = copy / "q0.90.onnx"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"q0\.90\.onnx: sha256 mismatch"):
        QuantileModel.load(copy)


def _replace_median(directory: Path, data: bytes) -> None:
    """The 0.5 quantile's model file replaced by ``data``, its checksums and size in the card to match."""
    (directory / "q0.50.onnx").write_bytes(data)

    def fix(card: dict[str, Any]) -> None:
        card["quantiles"][0]["sha256"] = sha256_hex(data)
        card["files"]["q0.50.onnx"].update(sha256=sha256_hex(data), bytes=len(data))

    _edit_card(directory, fix)


def test_garbage_model_with_a_matching_checksum(copy: Path) -> None:
    _replace_median(copy, b"\x08\x07this is not an onnx model")
    with pytest.raises(ModelError, match=r"q0\.50\.onnx: not a loadable ONNX model"):
        QuantileModel.load(copy)


def test_a_model_that_predicts_nan_fails_its_probe(copy: Path) -> None:
    """docs/install.md: a version whose probe prediction fails is rejected. A well-formed ONNX model
    with matching checksums that answers NaN for any job."""
    width = len(FEATURE_NAMES)
    zero = helper.make_tensor("w", TensorProto.FLOAT, [width, 1], [0.0] * width)
    nan = helper.make_tensor("nan", TensorProto.FLOAT, [1], [float("nan")])
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "w"], ["zero"]),
            helper.make_node("Add", ["zero", "nan"], ["variable"]),
        ],
        "nan",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, width])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1])],
        initializer=[zero, nan],
    )
    _replace_median(
        copy, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    )
    with pytest.raises(ModelError, match=r"q0\.5: probe gave .*not finite values"):
        QuantileModel.load(copy)


def test_truncated_card(copy: Path) -> None:
    path = copy / "card.json"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ModelError, match=r"card\.json: not valid JSON"):
        QuantileModel.load(copy)


def test_feature_mismatch(copy: Path) -> None:
    _edit_card(copy, lambda card: card["features"].__setitem__(3, "log_nodes_v2"))
    with pytest.raises(ModelError, match=r"card\.json: feature mismatch: feature 3 is 'log_nodes_v2'"):
        QuantileModel.load(copy)
    _edit_card(copy, lambda card: card["features"].append("extra"))
    with pytest.raises(ModelError, match="feature mismatch"):
        QuantileModel.load(copy)
    # A model from before the derived columns (the upgrade case): named, not loaded.
    old = list(FEATURE_NAMES[: FEATURE_NAMES.index("limit_over_name_log_max_s")])
    _edit_card(copy, lambda card: card.__setitem__("features", old))
    with pytest.raises(
        ModelError, match=f"model has {len(old)} features, daemon computes {len(FEATURE_NAMES)}"
    ):
        QuantileModel.load(copy)


def test_missing_file(copy: Path) -> None:
    (copy / "q0.95.onnx").unlink()
    with pytest.raises(ModelError, match=r"q0\.95\.onnx: cannot read"):
        QuantileModel.load(copy)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.__setitem__("format", 3), "card format 3 is unknown"),
        (lambda c: c.__setitem__("target", "power"), r"card schema: at \$\.target: 'power' is not one of"),
        (lambda c: c.__setitem__("version", "20260101T000000Z"), "is not the directory"),
        (lambda c: c.__setitem__("version", "../x"), r"at \$\.version: '\.\./x' does not match"),
        (lambda c: c.__setitem__("transform", "sqrt"), r"at \$\.transform"),
        (lambda c: c.__setitem__("quantiles", []), r"at \$\.quantiles: \[\] should be non-empty"),
        (lambda c: c["quantiles"][1].__setitem__("quantile", 0.5), "repeated quantile"),
        (lambda c: c["quantiles"][0].__setitem__("file", "../q0.50.onnx"), r"at \$\.quantiles\[0\]\.file"),
        (lambda c: c["quantiles"][0].pop("sha256"), r"'sha256' is a required property"),
        (lambda c: c.__setitem__("files", []), r"at \$\.files: \[\] is not of type 'object'"),
        (
            lambda c: c["calibration"]["rungs"][0].__setitem__("risk", 1.5),
            r"rungs\[0\]\.risk: 1\.5 is greater",
        ),
        (lambda c: c.__setitem__("features", "all"), r"at \$\.features"),
        # Served as is: a card in another unit than the target's would serve hours as minutes.
        (lambda c: c.__setitem__("unit", "hours"), r"unit 'hours': the daemon serves time in 'minutes'"),
        (
            lambda c: (c.__setitem__("target", "memory"), c["calibration"].__setitem__("target", "memory")),
            r"unit 'minutes': the daemon serves memory in 'MB per node'",
        ),
        (
            lambda c: (
                c.__setitem__("target", "cpus"),
                c["calibration"].__setitem__("target", "cpus"),
                c.__setitem__("unit", "CPUs"),
            ),
            r"transform 'log1p_seconds' gives minutes: a time transform only",
        ),
    ],
)
def test_card_problems(copy: Path, change: Callable[[dict[str, Any]], None], message: str) -> None:
    _edit_card(copy, change)
    with pytest.raises(ModelError, match=message):
        QuantileModel.load(copy)


def test_not_json_object_and_missing_card(copy: Path, tmp_path: Path) -> None:
    (copy / "card.json").write_text("[1, 2]")
    with pytest.raises(ModelError, match="not a JSON object"):
        QuantileModel.load(copy)
    with pytest.raises(ModelError, match="cannot read"):
        QuantileModel.load(tmp_path / "nowhere")


def test_single_quantile_serving_matches_the_full_prediction(version_dir: Path) -> None:
    model = QuantileModel.load(version_dir)
    x = vectorize([_records(40)[i].request for i in range(40)])
    singles = np.stack([model.predict_quantile(x, q) for q in model.quantiles])
    full = model.predict(x)
    # predict() rearranges crossing quantiles; the single ones are the raw values, in the same unit.
    np.testing.assert_allclose(np.sort(singles, axis=0), np.stack([full[q] for q in model.quantiles]))
    with pytest.raises(KeyError):
        model.predict_quantile(x, 0.123)


def test_a_model_file_that_is_a_link_out_of_the_store_is_refused(copy: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.onnx"
    model = next(copy.glob("*.onnx"))
    outside.write_bytes(model.read_bytes())  # even the very same bytes: the store holds no links
    model.unlink()
    model.symlink_to(outside)
    with pytest.raises(ModelError, match="is a symbolic link"):
        QuantileModel.load(copy)


def test_a_fifo_as_card_is_refused_without_hanging(copy: Path) -> None:
    (copy / "card.json").unlink()
    os.mkfifo(copy / "card.json")
    with pytest.raises(ModelError, match="not a regular file"):
        QuantileModel.load(copy)


def _publishable(version_dir: Path) -> tuple[dict[str, bytes], dict[str, Any]]:
    """``version_dir``'s files and card, to publish again as new versions."""
    good = json.loads((version_dir / "card.json").read_text())
    files = {name: (version_dir / name).read_bytes() for name in good["files"]}
    return files, {k: v for k, v in good.items() if k not in ("version", "created", "files", "target")}


def test_a_broken_current_version_at_start_falls_back_to_the_newest_that_loads(
    version_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ModelStore(tmp_path / "store")
    files, card = _publishable(version_dir)
    older = store.publish(Target.TIME, files, card)
    good_one = store.publish(Target.TIME, files, card)
    broken = store.publish(Target.TIME, {**files, next(iter(files)): b"not onnx"}, card)
    assert store.current_version(Target.TIME) == broken
    result = reload_models(store.root, {}, None)
    assert result.models[Target.TIME].version == good_one != older
    assert any(broken in r for r in result.rejected)
    assert "serving the older " + good_one in caplog.text
    # Once something serves, a rejected CURRENT keeps what serves (no walk through history).
    assert reload_models(store.root, result.models, None).models[Target.TIME].version == good_one


def _break_current(store: ModelStore, how: str) -> str:
    """Damage time's CURRENT as a slip, a restore or a race can; what the log must say."""
    pointer = store.target_dir(Target.TIME) / "CURRENT"
    current = store.current_dir(Target.TIME)
    assert current is not None
    if how == "names-a-future-version":
        pointer.write_text("20991231T000000.000000Z\n")
        return f"rejected {pointer} for time (it names 20991231T000000.000000Z, which is not in the store)"
    if how == "its-version-removed":
        shutil.rmtree(current)
        return f"rejected {pointer} for time (it names {current.name}, which is not in the store)"
    if how == "garbage":
        pointer.write_text("garbage\n")
        return f"rejected CURRENT for time (unreadable: {pointer}: bad version name 'garbage')"
    pointer.unlink()
    pointer.symlink_to("/etc/hostname")
    return "rejected CURRENT for time (unreadable: "


@pytest.mark.parametrize("how", ["names-a-future-version", "its-version-removed", "garbage", "a-link"])
def test_a_current_that_names_nothing_loadable_falls_back_at_start_and_is_logged(
    version_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """A CURRENT naming a version not in the store left the target unserved at start without a
    word; an unreadable one was logged, but nothing served either. Both are rejections now: the
    newest version that loads serves at start, and a running daemon keeps its model, logged."""
    store = ModelStore(tmp_path / "store")
    files, card = _publishable(version_dir)
    older = store.publish(Target.TIME, files, card)
    good = store.publish(Target.TIME, files, card)
    store.publish(Target.TIME, files, card)
    said = _break_current(store, how)
    registry = CollectorRegistry()
    at_start = reload_models(store.root, {}, ServingMetrics(registry))
    fallback = store.versions(Target.TIME)[-1]  # the newest listed: older than any CURRENT names here
    assert at_start.models[Target.TIME].version == fallback != older
    assert how != "its-version-removed" or fallback == good
    older = "" if how in ("garbage", "a-link") else "the older "  # older than nothing it could read
    assert said in caplog.text and f"serving {older}{fallback} until" in caplog.text
    assert at_start.rejected and at_start.rejected[0].startswith("time: ")
    assert (
        registry.get_sample_value("harp_model_reloads_total", {"target": "time", "result": "rejected"}) == 1
    )
    caplog.clear()
    last_good = _Serving()
    on_reload = reload_models(store.root, {Target.TIME: last_good}, None)
    assert on_reload.models[Target.TIME] is last_good
    assert said in caplog.text and f"; serving {last_good.version}" in caplog.text


@pytest.mark.parametrize(
    ("verdict", "said"),
    [
        (b'{"promote": false, "reason": "newly kills 7 %"}', "was refused at promotion"),
        (b'{"promote": false, "reason": "newly ki', "has an unreadable verdict (not JSON"),
    ],
    ids=["refused", "verdict-cut-short"],
)
def test_the_fallback_at_start_skips_a_challenger_refused_at_promotion(
    version_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, verdict: bytes, said: str
) -> None:
    """A challenger that promotion kept out (over the kill budget) must not serve when the
    champion does not load at start: the champion before it does. Nor one whose verdict cannot be
    read: it may be such a refusal."""
    store = ModelStore(tmp_path / "store")
    files, card = _publishable(version_dir)
    old_champion = store.publish(Target.TIME, files, card)
    refused = store.publish(Target.TIME, files, card, make_current=False)
    (store.target_dir(Target.TIME) / refused / PROMOTION_FILE).write_bytes(verdict)
    broken = store.publish(Target.TIME, {**files, next(iter(files)): b"not onnx"}, card)
    assert store.current_version(Target.TIME) == broken and store.refused(Target.TIME, refused)
    result = reload_models(store.root, {}, None)
    assert result.models[Target.TIME].version == old_champion
    assert f"older model {refused} for time {said}" in caplog.text


class _Serving:
    """Stands for the last good model of a target, serving before a reload."""

    version = "20200101T000000.000000Z"
    quantiles = (0.9,)

    def predict_quantile(self, x: np.ndarray, quantile: float) -> np.ndarray:
        return np.full(len(x), 4096.0)


def test_a_version_whose_card_is_for_another_target_is_rejected(
    version_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A time model copied into the memory directory would answer memory requests in minutes."""
    store = ModelStore(tmp_path / "store")
    misplaced = store.target_dir(Target.MEMORY) / version_dir.name
    shutil.copytree(version_dir, misplaced)
    store.set_current(Target.MEMORY, version_dir.name)
    with pytest.raises(ModelError) as err:
        QuantileModel.load(misplaced, Target.MEMORY)
    assert str(err.value) == (
        f"{misplaced / 'card.json'}: the card is for target 'time', the version is in the store's "
        "'memory' directory"
    )
    assert QuantileModel.load(misplaced).target is Target.TIME  # read alone, it is a time model
    last_good = _Serving()
    result = reload_models(store.root, {Target.MEMORY: last_good}, None)
    assert result.models[Target.MEMORY] is last_good and result.loaded == ()
    assert result.rejected == (f"memory: {err.value}",)
    assert f"rejected model {misplaced} for memory" in caplog.text
    assert f"serving {last_good.version}" in caplog.text
    # At a start nothing older in the directory loads either: memory stays unserved, not misserved.
    assert Target.MEMORY not in reload_models(store.root, {}, None).models


def test_a_store_that_cannot_be_listed_leaves_the_target_unserved_and_logged(
    version_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The fall-back to an older version lists the directory: a refusal there (root ignores file
    modes, hence the patch) must not end the reload, nor the daemon's loop or start."""
    store = ModelStore(tmp_path / "store")
    shutil.copytree(version_dir, store.target_dir(Target.TIME) / version_dir.name)
    store.set_current(Target.TIME, version_dir.name)
    broken = store.target_dir(Target.CPUS) / version_dir.name
    shutil.copytree(version_dir, broken)
    next(broken.glob("*.onnx")).write_bytes(b"not onnx")
    store.set_current(Target.CPUS, version_dir.name)

    def refused(self: ModelStore, target: Target | str) -> list[str]:
        raise PermissionError(13, "Permission denied", str(self.target_dir(target)))

    monkeypatch.setattr(ModelStore, "versions", refused)
    result = reload_models(store.root, {}, None)
    assert Target.CPUS not in result.models
    assert result.models[Target.TIME].version == version_dir.name  # the other targets load
    assert (
        f"model store {store.root}: cannot list the older cpus versions: [Errno 13] Permission denied"
        in caplog.text
    )


# Cards no training writes, whose errors escaped ModelError: json's RecursionError (nesting past
# its recursion), its ValueError for integers past 4300 digits, and nesting json still reads but
# the schema check's message recurses on. Each now rejects the version like any malformed card.
_HOSTILE_CARDS = {
    "nested-100000-deep": b'{"format": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "a-5000-digit-integer": b'{"format": ' + b"1" * 5000 + b"}",
    "nested-990-deep-in-training": b'{"format": 2, "training": ' + b"[" * 990 + b"]" * 990 + b"}",
}


@pytest.mark.parametrize("body", _HOSTILE_CARDS.values(), ids=_HOSTILE_CARDS.keys())
def test_a_card_too_deep_or_with_a_huge_integer_is_rejected_naming_it(copy: Path, body: bytes) -> None:
    (copy / "card.json").write_bytes(body)
    with pytest.raises(ModelError, match=r"card\.json: (not valid JSON|nested more than 32 levels)"):
        QuantileModel.load(copy)


def _as_target(directory: Path, target: Target) -> None:
    """``directory``'s time model relabelled as ``target``'s, to have a second target to load."""

    def relabel(card: dict[str, Any]) -> None:
        card["target"] = target.value
        card.pop("calibration", None)  # a rule for time, which a cpus card may not carry
        card["unit"], card["transform"] = UNIT[target], "log1p"  # its outputs as the target's

    _edit_card(directory, relabel)


@pytest.mark.parametrize("body", _HOSTILE_CARDS.values(), ids=_HOSTILE_CARDS.keys())
def test_a_hostile_card_is_rejected_at_start_and_on_reload_and_the_other_targets_load(
    version_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    """Before, reload_models raised: `harp serve` ended with a traceback at start instead of serving
    the older version, and on reload the targets after time were not reloaded, poll after poll."""
    store = ModelStore(tmp_path / "store")
    files, card = _publishable(version_dir)
    older = store.publish(Target.TIME, files, card)
    hostile = store.publish(Target.TIME, files, card)
    (store.target_dir(Target.TIME) / hostile / "card.json").write_bytes(body)
    cpus = store.target_dir(Target.CPUS) / version_dir.name
    shutil.copytree(version_dir, cpus)
    _as_target(cpus, Target.CPUS)
    store.set_current(Target.CPUS, version_dir.name)
    at_start = reload_models(store.root, {}, None)  # the start: the older time version serves
    assert at_start.models[Target.TIME].version == older
    assert at_start.models[Target.CPUS].version == version_dir.name
    assert f"serving the older {older}" in caplog.text
    last_good = _Serving()
    on_reload = reload_models(store.root, {Target.TIME: last_good}, None)
    assert on_reload.models[Target.TIME] is last_good  # the last good model keeps serving
    assert on_reload.models[Target.CPUS].version == version_dir.name  # cpus comes after time
    hostile_card = store.target_dir(Target.TIME) / hostile / "card.json"
    assert on_reload.rejected[0].startswith(f"time: {hostile_card}: ")


def test_a_verdict_nested_too_deeply_counts_as_refused(version_dir: Path, tmp_path: Path) -> None:
    """Like a verdict cut short: json's RecursionError escaped verdict(), and with it the fallback
    at start and `harp rollback`."""
    store = ModelStore(tmp_path / "store")
    shutil.copytree(version_dir, store.target_dir(Target.TIME) / version_dir.name)
    verdict = store.target_dir(Target.TIME) / version_dir.name / PROMOTION_FILE
    verdict.write_bytes(b'{"promote": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert store.refusal(Target.TIME, version_dir.name) == (
        "has an unreadable verdict (not JSON (nested too deeply to read))"
    )


def test_an_unforeseen_error_loading_one_target_rejects_it_and_the_others_load(
    version_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error no check foresaw (here a RuntimeError from the load) ended reload_models: the
    targets after it were not reloaded, and `harp serve` did not start."""
    store = ModelStore(tmp_path / "store")
    files, card = _publishable(version_dir)
    older = store.publish(Target.TIME, files, card)
    broken = store.publish(Target.TIME, files, card)
    cpus = store.target_dir(Target.CPUS) / version_dir.name
    shutil.copytree(version_dir, cpus)
    _as_target(cpus, Target.CPUS)
    store.set_current(Target.CPUS, version_dir.name)
    load = QuantileModel.load

    def flaky(directory: Path, target: Target) -> QuantileModel:
        if directory.name == broken:
            raise RuntimeError("onnxruntime: something new")
        return load(directory, target)

    monkeypatch.setattr(QuantileModel, "load", staticmethod(flaky))
    at_start = reload_models(store.root, {}, None)
    assert at_start.models[Target.TIME].version == older
    assert at_start.models[Target.CPUS].version == version_dir.name
    assert "RuntimeError: onnxruntime: something new" in at_start.rejected[0]
    assert "unexpected error while loading" in caplog.text
    last_good = _Serving()
    on_reload = reload_models(store.root, {Target.TIME: last_good}, None)
    assert on_reload.models[Target.TIME] is last_good
    assert on_reload.models[Target.CPUS].version == version_dir.name


def test_a_card_with_a_nan_quantile_is_rejected(copy: Path) -> None:
    """`"quantile": NaN` passed the schema (every comparison with NaN is false) and the checks; served,
    NaN was the quantile closest to any asked and every job failed with a KeyError."""
    _edit_card(copy, lambda card: card["quantiles"][0].__setitem__("quantile", float("nan")))
    assert '"quantile": NaN' in (copy / "card.json").read_text()
    with pytest.raises(ModelError, match=r"card\.json: not valid JSON: NaN is not a JSON number"):
        QuantileModel.load(copy)


def test_a_card_whose_margin_no_training_makes_is_rejected_and_the_last_good_model_serves(
    version_dir: Path, tmp_path: Path
) -> None:
    """A rung margin of 1e308 (finite JSON) passed the schema and the card check: the version
    replaced the last good model, and every submission for the target was a model error
    (OverflowError in decide_limit), a traceback logged each time. Now refused at load, naming the
    card and the margin, by the schema and by Calibration.from_dict alike (the same bound)."""
    store = ModelStore(tmp_path / "store")
    files, card = _publishable(version_dir)
    assert card["calibration"]["rungs"]
    for rung in card["calibration"]["rungs"]:
        rung["margin"] = 1e308
    bad = store.publish(Target.TIME, files, card)
    card_path = store.target_dir(Target.TIME) / bad / "card.json"
    last_good = _Serving()
    result = reload_models(store.root, {Target.TIME: last_good}, None)
    assert result.models[Target.TIME] is last_good
    (rejected,) = result.rejected
    assert rejected.startswith(f"time: {card_path}: card schema: at $.calibration.rungs[")
    assert "].margin: 1e+308 is greater than the maximum of 1000" in rejected
    from slurm_harp.core.safety_rule import MAX_MARGIN  # here: the test runs on code without it too

    schema = json.loads(Path(card_module.__file__).with_name("card.schema.json").read_text())
    rung = schema["$defs"]["calibration"]["properties"]["rungs"]["items"]["properties"]["margin"]
    assert rung["maximum"] == MAX_MARGIN


def test_a_card_larger_than_any_harp_writes_is_refused_before_it_is_parsed(
    version_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A valid card with 19 MiB of padding added 700 MiB to the daemon's memory while it held the
    reload lock, and was then served. Now it is refused, saying its size, and the last good model
    keeps serving."""
    store = ModelStore(tmp_path / "store")
    files, card = _publishable(version_dir)
    store.publish(Target.TIME, files, card)
    huge = store.publish(Target.TIME, files, {**card, "padding": [0] * 2_200_000})
    card_path = store.target_dir(Target.TIME) / huge / "card.json"
    assert card_path.stat().st_size > 4 * 1024 * 1024
    last_good = _Serving()
    result = reload_models(store.root, {Target.TIME: last_good}, None)
    assert result.models[Target.TIME] is last_good
    assert result.rejected == (f"time: {card_path}: larger than 4194304 bytes: no card harp writes",)


@pytest.mark.parametrize("card_says", ["its-size", "no-size"])
def test_a_model_file_of_another_size_than_its_card_says_is_refused_unread(
    copy: Path, card_says: str
) -> None:
    """A model file was read whole before its checksum was compared: one of 2 GiB added 2 GiB to the
    daemon at every reload attempt. Its size is compared first: the card's, or a cap where the card
    gives none (harp's cards always do)."""
    path = copy / "q0.50.onnx"
    size = path.stat().st_size
    if card_says == "no-size":
        _edit_card(copy, lambda card: card["files"]["q0.50.onnx"].pop("bytes"))
        assert QuantileModel.load(copy).version == copy.name  # of a size within the cap: it loads
    with path.open("r+b") as handle:
        handle.truncate(1 << 31)  # sparse: no disk, but read whole, 2 GiB of memory
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ModelError) as err:
        QuantileModel.load(copy)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB
    said = {
        "its-size": f"the card says {size}",
        "no-size": "past 268435456 read where the card gives no size",
    }
    assert str(err.value) == f"{path}: {1 << 31} bytes, {said[card_says]}: not read"


def test_a_model_file_whose_card_gives_no_size_is_read_at_its_own(copy: Path) -> None:
    """Read with the cap as the length, a file of kilobytes set 256 MiB aside first: a MemoryError
    under an address-space limit (LimitAS=), and a good model refused."""
    path = copy / "q0.50.onnx"
    data, peak = traced_peak(lambda: read_model(path, None))
    assert data == path.read_bytes() and peak < 2 * len(data) + (1 << 20)


def test_a_version_linked_out_of_the_store_is_never_loaded(
    version_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a CURRENT naming it refused it: the fallback at start served an older version that was a
    link to a directory outside the store, and promotion or `harp rollback` loaded one. load_version,
    the way all of them load, refuses it, and a store's listing skips it."""
    store = ModelStore(tmp_path / "store")
    files, card = _publishable(version_dir)
    linked = store.publish(Target.TIME, files, card)
    outside = tmp_path / "outside"
    (store.target_dir(Target.TIME) / linked).rename(outside)
    (store.target_dir(Target.TIME) / linked).symlink_to(outside)
    store.publish(Target.TIME, {**files, next(iter(files)): b"not onnx"}, card)  # CURRENT: broken
    with pytest.raises(ModelError, match=f"{linked} is a symbolic link: the store serves only its own"):
        load_version(store.target_dir(Target.TIME) / linked, Target.TIME)
    at_start = reload_models(store.root, {}, None)
    assert Target.TIME not in at_start.models and "serving none" in caplog.text


def test_a_target_directory_linked_out_of_the_store_is_never_loaded(
    version_dir: Path, tmp_path: Path
) -> None:
    """Its CURRENT was refused, then the fallback at start served a version through the same link."""
    store = ModelStore(tmp_path / "store")
    elsewhere = tmp_path / "elsewhere"
    ModelStore(elsewhere).publish(Target.TIME, *_publishable(version_dir))
    store.root.mkdir()
    store.target_dir(Target.TIME).symlink_to(elsewhere / "time")
    (version,) = ModelStore(elsewhere).versions(Target.TIME)
    assert store.versions(Target.TIME) == []
    with pytest.raises(ModelError, match=r"store/time is a symbolic link"):
        load_version(store.target_dir(Target.TIME) / version, Target.TIME)
    at_start = reload_models(store.root, {}, None)
    assert Target.TIME not in at_start.models
    link = store.target_dir(Target.TIME)
    said = f"time: CURRENT: unreadable: {link} is a symbolic link: the store serves only its own files"
    assert at_start.rejected == (said,)
