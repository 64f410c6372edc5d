"""Benchmark (an experiment): what a compiled, compact tree walk would save the daemon per call.

    .venv/bin/python -m benchmarks.bench_tree_walk [--rounds 300] [--store DIR]

Needs a C compiler (`cc`). The daemon walks its models' trees in onnxruntime; after idle that walk is
most of the model's cost and leaves the rest of the call cold (docs/benchmarks.md, "The trees'
memory"). This flattens each model of the calibrated ladder of the bundled trace's model (ONNX
TreeEnsembleRegressor) into 12-byte nodes laid out depth first (benchmarks/c/tree_walk.c), checks
that the walk answers exactly as onnxruntime on random rows with missing values, then times, in one
process, each variant in turn in random order, back to back and after 7 ms idle (p50 µs): one
model's walk, every model's, and the daemon's whole handler (service.predict) for jobs of
bench_predict_phases' sizes, its models run by onnxruntime as shipped and by the walk. The daemon
itself has no compiled code: this measures what it would gain (docs/benchmarks.md, "A compiled tree
walk").
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from benchmarks.bench_predict_phases import IDLE_S, _sized_requests
from benchmarks.common import serving, train_bundled
from slurm_harp.core.request import Target
from slurm_harp.model.card import INPUT_NAME

SOURCE = Path(__file__).parent / "c" / "tree_walk.c"
NODE = np.dtype([("value", "<f4"), ("right", "<i4"), ("feature", "<u2"), ("flags", "u1"), ("unused", "u1")])
LEAF, MISSING_TRUE = 1, 2
CHECK_ROWS = 5000


class Forest:
    """One model's trees as NODE records, depth first (a branch's true child right after it)."""

    def __init__(self, data: bytes) -> None:
        graph = onnx.load_from_string(data).graph
        kinds = [n.op_type for n in graph.node]
        if kinds.count("TreeEnsembleRegressor") != 1 or set(kinds) - {"TreeEnsembleRegressor", "Identity"}:
            raise ValueError(f"not one tree ensemble: {kinds}")
        node = next(n for n in graph.node if n.op_type == "TreeEnsembleRegressor")
        a = {attr.name: onnx.helper.get_attribute_value(attr) for attr in node.attribute}
        if any(a.get("base_values", [])) or a.get("post_transform", b"NONE") != b"NONE":
            raise ValueError("base values or a post transform: not in this experiment")
        keys = list(zip(a["nodes_treeids"], a["nodes_nodeids"], strict=True))
        self._at = {key: i for i, key in enumerate(keys)}
        self._a = a
        self._weight: dict[tuple[int, int], float] = {}
        for tree, leaf, w in zip(a["target_treeids"], a["target_nodeids"], a["target_weights"], strict=True):
            self._weight[(tree, leaf)] = self._weight.get((tree, leaf), 0.0) + w
        self._out: list[tuple[float, int, int, int, int]] = []
        roots = []
        for tree in range(max(a["nodes_treeids"]) + 1):
            roots.append(len(self._out))
            self._emit(tree, 0)
        self.nodes = np.array(self._out, dtype=NODE)
        self.roots = np.array(roots, dtype=np.int32)

    def _emit(self, tree: int, node: int) -> None:
        a, i = self._a, self._at[(tree, node)]
        here = len(self._out)
        self._out.append((0.0, 0, 0, 0, 0))
        mode = a["nodes_modes"][i]
        if mode == b"LEAF":
            self._out[here] = (self._weight[(tree, node)], 0, 0, LEAF, 0)
            return
        if mode != b"BRANCH_LEQ":
            raise ValueError(f"branch mode {mode!r}: not in this experiment")
        self._emit(tree, a["nodes_truenodeids"][i])
        right = len(self._out)
        self._emit(tree, a["nodes_falsenodeids"][i])
        missing = a.get("nodes_missing_value_tracks_true") or [0] * len(a["nodes_modes"])
        flags = MISSING_TRUE if missing[i] else 0
        self._out[here] = (a["nodes_values"][i], right, a["nodes_featureids"][i], flags, 0)


class Walker:
    """The compiled walk: ``walker(forest, x)`` -> the model's raw output for the one row ``x``."""

    def __init__(self, work: Path) -> None:
        library = work / "tree_walk.so"
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(SOURCE)], check=True)
        self._walk = ctypes.CDLL(str(library)).tree_walk
        self._walk.restype = ctypes.c_float
        self._walk.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]

    def bind(self, forest: Forest) -> Callable[[np.ndarray], float]:
        nodes, roots, trees = forest.nodes.ctypes.data, forest.roots.ctypes.data, len(forest.roots)
        walk = self._walk
        return lambda x: float(walk(nodes, roots, trees, x.ctypes.data))


def exact(walk: Callable[[np.ndarray], float], session: ort.InferenceSession, rows: np.ndarray) -> bool:
    want = np.asarray(session.run(None, {INPUT_NAME: rows})[0], dtype=np.float32).reshape(-1)
    got = np.array([walk(np.ascontiguousarray(row)) for row in rows], dtype=np.float32)
    return bool(np.array_equal(got, want))


def p50s(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, tuple[float, float]]:
    """(back to back, after IDLE_S) p50 µs of each case, the cases in random order each round."""
    times: dict[tuple[str, bool], list[float]] = {(n, idle): [] for n in cases for idle in (False, True)}
    for _ in range(rounds):
        for name in random.sample(list(cases), len(cases)):
            for idle in (False, True):
                if idle:
                    time.sleep(IDLE_S)
                else:
                    cases[name]()
                started = time.perf_counter()
                cases[name]()
                times[(name, idle)].append(time.perf_counter() - started)
    return {n: (median_us(times[(n, False)]), median_us(times[(n, True)])) for n in cases}


def median_us(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--store", type=Path, help="a store with a trained time model (default: train one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = args.store
        if store is None:
            store = work / "store"
            train_bundled(store)
        walker = Walker(work)
        _, shipped_service = serving(store)
        walked, walked_service = serving(store)
        model: Any = walked.predictor.models[Target.TIME]
        version_dir = store / "time" / model.version
        files = {str(m["name"]): version_dir / str(m["file"]) for m in model.card["models"]}
        forests = {name: Forest(path.read_bytes()) for name, path in files.items()}
        walks = {name: walker.bind(forest) for name, forest in forests.items()}
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        sessions = {name: ort.InferenceSession(str(p), sess_options=options) for name, p in files.items()}

        rng = np.random.default_rng(0)
        rows = (rng.normal(size=(CHECK_ROWS, len(model.card["features"]))) * 3).astype(np.float32)
        rows[rng.random(rows.shape) < 0.2] = np.nan
        same = all(exact(walks[n], sessions[n], rows) for n in walks)
        print(f"walk equals onnxruntime bit for bit on {CHECK_ROWS} rows x {len(walks)} models: {same}")
        sizes = {n: f"{f.nodes.nbytes // 1024} KB, {len(f.roots)} trees" for n, f in forests.items()}
        print("models:", ", ".join(f"{n} {s}" for n, s in sizes.items()))

        def raw(name: str, x: np.ndarray) -> np.ndarray:  # QuantileModel._raw, by the walk
            return np.array([[walks[name](x)]], dtype=np.float32)

        setattr(model, "_raw", raw)  # noqa: B010 - an experiment swaps the model's one seam
        model._ladder = None  # the walk runs each model read; no merged graph
        x = np.full((1, len(model.card["features"])), 1.0, dtype=np.float32)
        first = next(iter(files))
        cases: dict[str, Callable[[], object]] = {
            "one model: onnxruntime": lambda: sessions[first].run(None, {INPUT_NAME: x}),
            "one model: walk": lambda: walks[first](x),
            "every model: onnxruntime": lambda: [s.run(None, {INPUT_NAME: x}) for s in sessions.values()],
            "every model: walk": lambda: [w(x) for w in walks.values()],
        }
        for label, reads, body in _sized_requests(model.calibration):
            if shipped_service.predict(body) != walked_service.predict(body):
                raise SystemExit(f"{label}: the walk's decision differs from onnxruntime's")
            case = f"handler {label} ({reads} read)"
            cases[f"{case}: onnxruntime"] = functools.partial(shipped_service.predict, body)
            cases[f"{case}: walk"] = functools.partial(walked_service.predict, body)
        idle_ms = IDLE_S * 1e3
        print(f"p50 µs, {args.rounds} rounds of every case in random order, back to back and after", end=" ")
        print(f"{idle_ms:.0f} ms idle")
        print(f"{'case':<48} {'back to back':>12} {'after idle':>11}")
        for name, (hot, cold) in p50s(cases, args.rounds).items():
            print(f"{name:<48} {hot:>12.1f} {cold:>11.1f}")


if __name__ == "__main__":
    main()
