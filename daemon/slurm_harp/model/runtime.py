"""Serve one model version: validated ONNX quantile models behind a numpy predict()."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import Calibration
from slurm_harp.model import ladder, probe
from slurm_harp.model.card import CARD_FILE, INPUT_NAME, to_unit, unit_value
from slurm_harp.model.card_check import CardError, calibration_of, check_card, read_card
from slurm_harp.model.row_run import RowRun
from slurm_harp.model.store_files import WrongSize, read_model, refuse_links, sha256_hex

log = logging.getLogger(__name__)


class ModelError(Exception):
    """A model version that must not be served; the message names the file and the problem."""


class QuantileModel:
    """One ONNX session per model; predict() returns each quantile in the target's unit.

    Format-2 cards also name non-quantile models (predict_named) and carry the calibrated
    safety rule (``calibration``, for core.safety_rule.decide_limit; None in format 1)."""

    def __init__(
        self,
        target: Target,
        version: str,
        card: Mapping[str, Any],
        sessions: Mapping[float, ort.InferenceSession],
        transform: str,
        named: Mapping[str, ort.InferenceSession] | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self.target = target
        self.version = version
        self.card = card
        self.quantiles: tuple[float, ...] = tuple(sorted(sessions))
        self._runs = [(q, sessions[q], sessions[q].get_outputs()[0].name) for q in self.quantiles]
        self._named = {name: (s, s.get_outputs()[0].name) for name, s in (named or {}).items()}
        self._transform = transform
        self.calibration = calibration
        self._ladder: ladder.Ladder | None = None  # set by load() where the models merge
        self._row_runs: dict[int, RowRun] = {}  # by id(session), set by load(): one-row runs
        self._negative_logged = False  # whether _negative has logged
        chosen = card.get("selection", {}).get("chosen") if isinstance(card.get("selection"), dict) else None
        self.chosen: str | None = chosen if isinstance(chosen, str) else None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._named)

    @classmethod
    def load(cls, version_dir: Path, target: Target | None = None) -> QuantileModel:
        """The model in ``version_dir``, or ModelError naming the file and the problem. ``target``:
        the store directory's, which the card must name (a copied version would otherwise serve
        another quantity's predictions, in its unit)."""
        version_dir = Path(version_dir)
        card_path = version_dir / CARD_FILE
        try:
            card = read_card(card_path)
            card_target = check_card(card, card_path, version_dir.name)
            calibration = calibration_of(card, card_path)
        except CardError as exc:
            raise ModelError(str(exc)) from None
        if target is not None and card_target is not target:
            raise ModelError(
                f"{card_path}: the card is for target {card_target.value!r}, the version is in the "
                f"store's {target.value!r} directory"
            )
        transform = str(card["transform"])
        listed = card.get("files", {})
        by_file: dict[str, ort.InferenceSession] = {}
        data_of: dict[str, bytes] = {}

        def session_for(entry: Mapping[str, Any]) -> ort.InferenceSession:
            name = str(entry["file"])
            if name not in by_file:
                path = version_dir / name
                data = _read(path, _size(listed.get(name)))
                digest = sha256_hex(data)
                claims = {entry["sha256"], listed.get(name, {}).get("sha256", entry["sha256"])}
                if claims != {digest}:
                    raise ModelError(
                        f"{path}: sha256 mismatch: file has {digest[:16]}, card says {sorted(claims)}"
                    )
                by_file[name] = _session(path, data)
                data_of[name] = data
            return by_file[name]

        sessions = {float(entry["quantile"]): session_for(entry) for entry in card["quantiles"]}
        named = {str(entry["name"]): session_for(entry) for entry in card.get("models", [])}
        model = cls(card_target, version_dir.name, card, sessions, transform, named, calibration)
        model._probe(version_dir)
        files = {str(e["name"]): data_of[str(e["file"])] for e in card.get("models", [])}
        model._ladder = ladder.merge(
            files, INPUT_NAME, lambda data: _session(version_dir, data), probe.rows(), model._raw
        )
        model._bind_rows(version_dir, by_file)
        model._probe_one_row(version_dir)
        return model

    def _bind_rows(self, version_dir: Path, sessions: Mapping[str, ort.InferenceSession]) -> None:
        """One-row runs on bound buffers for every session (by file name), where its output allows;
        a session that cannot run one row is no model to serve: the daemon serves row by row."""
        width = len(FEATURE_NAMES)
        for name, session in sessions.items():
            try:
                run = RowRun.of(session, INPUT_NAME, [session.get_outputs()[0].name], width)
            except Exception as exc:  # onnxruntime raises its own exception types
                raise ModelError(f"{version_dir / name}: cannot run one row: {exc}") from exc
            if run is not None:
                self._row_runs[id(session)] = run

    def _run(self, session: ort.InferenceSession, output: str, x: np.ndarray) -> np.ndarray:
        """One session's output for the rows ``x``: (rows, 1), float32 or, bound, float64."""
        run = self._row_runs.get(id(session)) if x.shape[0] == 1 else None
        if run is not None:
            return run(x)
        return np.asarray(session.run([output], {INPUT_NAME: x})[0])

    def _raw(self, name: str, x: np.ndarray) -> np.ndarray:
        session, output = self._named[name]
        return self._run(session, output, x)

    def predict_named(self, x: np.ndarray, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """Each named model's predictions (format 2) in the target's unit, >= 0, NOT rearranged
        across models: the calibrated rule was fitted on each model alone."""
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        wanted = names if names is not None else self.names
        if not wanted:
            return {}
        # One conversion for all: each numpy call on a one-row array costs more than its arithmetic.
        if self._ladder is not None and len(wanted) >= ladder.MIN_MODELS:
            values = to_unit(self._transform, self._ladder.run_stacked(INPUT_NAME, x), self._negative)
            index = self._ladder.index
            return {name: values[index[name]] for name in wanted}
        values = to_unit(
            self._transform, ladder.stacked([self._raw(name, x) for name in wanted]), self._negative
        )
        return dict(zip(wanted, values, strict=True))

    def predict_row(self, x: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
        """predict_named for one row (shape (1, n)), as floats: the serving path. Below the merged
        ladder's threshold each value is converted alone; numpy calls on one-value arrays cost
        more than their arithmetic, most after the daemon sat idle."""
        if self._ladder is not None and len(names) >= ladder.MIN_MODELS:
            return {name: float(values[0]) for name, values in self.predict_named(x, names).items()}
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        return {name: unit_value(self._transform, self._raw_value(name, x), self._negative) for name in names}

    def _raw_value(self, name: str, x: np.ndarray) -> float:
        """``_raw`` for one row, as a float."""
        session, output = self._named[name]
        run = self._row_runs.get(id(session))
        return run.first(x) if run is not None else float(self._run(session, output, x).item(0))

    def predict(self, x: np.ndarray) -> dict[float, np.ndarray]:
        """Predictions for feature rows ``x`` (n, len(FEATURE_NAMES)) in the target's unit, >= 0.

        Quantile models are fitted separately and may cross; values are sorted across
        quantiles per row (monotone rearrangement) so q0.95 >= q0.90 >= q0.50 always holds.
        """
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        feed = {INPUT_NAME: x}
        raw = [session.run([output], feed)[0] for _, session, output in self._runs]
        values = to_unit(
            self._transform, np.concatenate(raw, axis=None).reshape(len(raw), -1), self._negative
        )
        if len(raw) > 1:
            values.sort(axis=0)
        return {q: values[i] for i, (q, _, _) in enumerate(self._runs)}

    def predict_quantile(self, x: np.ndarray, quantile: float) -> np.ndarray:
        """One quantile only: the serving path needs a single value, and each extra tree
        ensemble walked costs cache misses when the daemon wakes from idle."""
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        for q, session, output in self._runs:
            if q == quantile:
                raw = self._run(session, output, x).astype(np.float32)  # same dtype as predict()
                values: np.ndarray = to_unit(self._transform, raw.reshape(1, -1), self._negative)[0]
                return values
        raise KeyError(f"model {self.version} has no quantile {quantile}")

    def _probe(self, version_dir: Path) -> None:
        """Every model's answer to the probe rows, run as a batch, must pass model.probe."""
        kinds = {
            str(m.get("name")): m.get("kind") for m in self.card.get("models", []) if isinstance(m, dict)
        }
        models: list[tuple[str, object, probe.Run]] = [
            (f"q{q}", "quantile", _batch_run(s, o)) for q, s, o in self._runs
        ]
        models += [(n, kinds.get(n), _batch_run(s, o)) for n, (s, o) in self._named.items()]
        try:
            probe.check_batch(models, self._transform)
        except probe.ProbeError as exc:
            raise ModelError(f"{version_dir}: {exc}") from exc

    def _probe_one_row(self, version_dir: Path) -> None:
        """The plain probe row alone through each path the daemon serves a submission by (bound
        runs, the merged ladder), as model.probe checks it."""
        paths: list[tuple[str, probe.Answer]] = [(f"q{q}", self._quantile_answer(q)) for q in self.quantiles]
        paths += [(n, self._named_answer((n,))) for n in self.names]
        if self._ladder is not None:
            paths.append(("the merged models", self._named_answer(self.names)))
        self._negative_logged = True  # the probe's own values are no submission's: not logged
        try:
            probe.check_one_row(paths)
        except probe.ProbeError as exc:
            raise ModelError(f"{version_dir}: {exc}") from exc
        finally:
            self._negative_logged = False

    def _quantile_answer(self, quantile: float) -> probe.Answer:
        return lambda row: [float(self.predict_quantile(row, quantile)[0])]

    def _named_answer(self, names: tuple[str, ...]) -> probe.Answer:
        return lambda row: list(self.predict_row(row, names).values())

    def _negative(self, raw: float) -> None:
        """A raw prediction below 0, served as 0 (card.to_unit): logged once per version, whose
        models may give such a value at every submission."""
        if not self._negative_logged:
            self._negative_logged = True
            log.warning(
                "%s model %s: raw prediction %.6g (%s) below 0, served as 0; not logged again for it",
                self.target.value,
                self.version,
                raw,
                self._transform,
            )


def load_version(version_dir: Path, target: Target) -> QuantileModel:
    """QuantileModel.load, any failure a ModelError: what no check foresaw (an onnxruntime error
    of its own, say) must reject the version like any other, not stop the daemon's reload of every
    target, a promotion or a rollback. The one way the daemon, promotion and `harp rollback` load a
    version: a version or target directory that is a symbolic link is refused here (store_files)."""
    try:
        refuse_links(version_dir.parent, version_dir.name)
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    try:
        return QuantileModel.load(version_dir, target)
    except ModelError:
        raise
    except Exception as exc:
        log.exception("model %s for %s: unexpected error while loading", version_dir, target.value)
        raise ModelError(f"{version_dir}: {type(exc).__name__}: {exc}") from exc


def _batch_run(session: ort.InferenceSession, output: str) -> probe.Run:
    return lambda rows: np.asarray(session.run([output], {INPUT_NAME: rows})[0])


def _size(listed: object) -> int | None:
    """The size the card's ``files`` entry gives a file, or None where it gives none."""
    size = listed.get("bytes") if isinstance(listed, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _read(path: Path, size: int | None) -> bytes:
    try:
        return read_model(path, size)
    except WrongSize as exc:
        raise ModelError(str(exc)) from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot read: {exc}") from exc


def _session(path: Path, data: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    # The daemon serves one row at a time: threads only add hand-off latency.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ModelError(f"{path}: not a loadable ONNX model: {exc}") from exc
    inputs = session.get_inputs()
    if len(inputs) != 1 or inputs[0].name != INPUT_NAME:
        raise ModelError(f"{path}: expected one input named {INPUT_NAME!r}")
    shape = inputs[0].shape
    width = shape[-1] if shape else None
    if width != len(FEATURE_NAMES):
        raise ModelError(
            f"{path}: feature mismatch: input width {width}, daemon computes {len(FEATURE_NAMES)}"
        )
    if len(shape) != 2 or isinstance(shape[0], int):  # a dynamic dimension is a name, or None
        raise ModelError(
            f"{path}: input shape {shape}: its rows must be a dynamic dimension (the daemon runs "
            "one row per submission, promotion thousands)"
        )
    return session
