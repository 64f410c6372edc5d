"""The calibrated rule's models as one ONNX graph: one session run instead of one per model.

Each onnxruntime session run has a fixed cost beside its trees, and on the submission path the rule
may run most of its ladder: one graph that holds every model answers them all in about half the time
(docs/benchmarks.md). It is built at load from the files already checked against the card, and its
outputs must equal each model's own on the probe rows; otherwise (or without the `onnx` package) the
models keep running one by one, which is what the rule was calibrated on anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from slurm_harp.model.row_run import RowRun

log = logging.getLogger(__name__)

# The merged graph walks every model's trees, however few the rule reads. The whole handler is
# quicker with single sessions up to four models read, back to back and after idle
# (docs/benchmarks.md, "The trees' memory"): most jobs' rules read one to four.
MIN_MODELS = 5


class Ladder:
    """One session whose outputs are the named models' outputs, in ``names`` order."""

    def __init__(self, session: Any, names: tuple[str, ...], outputs: list[str]) -> None:
        self.names = names
        self._session = session
        self._outputs = outputs
        self._index = {name: i for i, name in enumerate(names)}
        self._row_run: RowRun | None = None

    def bind_rows(self, input_name: str, width: int) -> None:
        """Run one-row inputs on bound buffers (model.row_run), where the outputs allow."""
        self._row_run = RowRun.of(self._session, input_name, self._outputs, width)

    @property
    def index(self) -> Mapping[str, int]:
        """Each model's row in ``run_stacked``'s answer."""
        return self._index

    def run(self, input_name: str, x: np.ndarray) -> dict[str, np.ndarray]:
        raw = self._session.run(self._outputs, {input_name: x})
        return {name: np.asarray(raw[i]) for name, i in self._index.items()}

    def run_stacked(self, input_name: str, x: np.ndarray) -> np.ndarray:
        """All models' outputs for the rows ``x`` as one ``stacked`` array."""
        if self._row_run is not None and x.shape[0] == 1:
            return self._row_run(x)
        return stacked(self._session.run(self._outputs, {input_name: x}))


def stacked(outputs: Sequence[np.ndarray]) -> np.ndarray:
    """Model outputs for the same rows as one float64 array (models, rows): one numpy call instead
    of one per model (after the trees' memory sweep each call starts cold)."""
    return np.concatenate(outputs, axis=None).astype(np.float64).reshape(len(outputs), -1)


def merge(
    files: Mapping[str, bytes],
    input_name: str,
    make_session: Callable[[bytes], Any],
    probe: np.ndarray,
    single: Callable[[str, np.ndarray], np.ndarray],
) -> Ladder | None:
    """The models of ``files`` (name -> verified ONNX bytes) as one Ladder, or None (logged) when
    they cannot be merged or the merged graph does not answer exactly as ``single`` does."""
    if len(files) < MIN_MODELS:
        return None
    try:
        merged = _merged_bytes(files, input_name)
        ladder = Ladder(make_session(merged), tuple(files), [f"m{i}_out" for i in range(len(files))])
        got = ladder.run(input_name, probe)
    except Exception as exc:  # onnx and onnxruntime raise their own types; serving goes on without
        log.warning("models not merged into one graph (run one by one): %s", exc)
        return None
    for name in files:
        own = single(name, probe)
        if got[name].shape != own.shape or not np.array_equal(got[name], own, equal_nan=True):
            log.warning("merged graph differs from model %s on the probe rows: run one by one", name)
            return None
    try:
        ladder.bind_rows(input_name, probe.shape[1])
    except Exception as exc:  # onnxruntime raises its own types; each model runs one row alone
        log.warning("merged graph cannot run one row (models run one by one): %s", exc)
        return None
    return ladder


def _merged_bytes(files: Mapping[str, bytes], input_name: str) -> bytes:
    import onnx  # a daemon dependency, imported here: only loading a model needs it
    from onnx import compose, helper

    nodes: list[Any] = []
    initializers: list[Any] = []
    outputs: list[Any] = []
    opsets: dict[str, int] = {}
    first: Any = None
    for i, data in enumerate(files.values()):
        model = onnx.load_from_string(data)
        first = first or model
        for opset in model.opset_import:
            opsets[opset.domain] = max(opsets.get(opset.domain, 0), opset.version)
        graph = compose.add_prefix(model, prefix=f"m{i}_").graph
        if len(graph.input) != 1 or len(graph.output) != 1:
            raise ValueError(f"model {i}: {len(graph.input)} inputs, {len(graph.output)} outputs")
        own_input, own_output = graph.input[0].name, graph.output[0].name
        for node in graph.node:
            node.input[:] = [input_name if name == own_input else name for name in node.input]
            node.output[:] = [f"m{i}_out" if name == own_output else name for name in node.output]
            nodes.append(node)
        initializers += list(graph.initializer)
        output = graph.output[0]
        output.name = f"m{i}_out"
        outputs.append(output)
    graph_input = onnx.ValueInfoProto()
    graph_input.CopyFrom(first.graph.input[0])
    graph_input.name = input_name
    merged = helper.make_model(
        helper.make_graph(nodes, "ladder", [graph_input], outputs, initializers),
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in opsets.items()],
    )
    merged.ir_version = first.ir_version
    return bytes(merged.SerializeToString())
