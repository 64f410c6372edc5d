"""A session's one-row runs on buffers bound once (onnxruntime's I/O binding).

The daemon asks its models for one row per submission. ``session.run`` checks the feed, wraps the
row in a new tensor and allocates every output on each call; bound to buffers that each thread
keeps, a run is one copy into the input buffer and the run itself: after idle, a quarter to a
third less time per session run (docs/benchmarks.md, "Bound runs"). The kernels are the same, so
the values are too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np


class RowRun:
    """``outputs`` of ``session`` for one row at a time; each output must be one float32 value."""

    def __init__(
        self, session: Any, input_name: str, outputs: Sequence[tuple[str, list[int]]], width: int
    ) -> None:
        self._session = session
        self._input = input_name
        self._outputs = tuple(outputs)  # (name, shape of one row's value)
        self._width = width
        # Each thread binds its own buffers: the worker pool may run a model in several at once.
        self._local = threading.local()

    @classmethod
    def of(cls, session: Any, input_name: str, outputs: Sequence[str], width: int) -> RowRun | None:
        """A RowRun for ``session``, or None when an output is not one float32 value per row
        (then ``session.run`` serves it as before). What onnxruntime raises when the session cannot
        run or bind one row passes through: a model that fails one row fails every submission."""
        row = np.full((1, width), np.nan, dtype=np.float32)
        values = [np.asarray(v) for v in session.run(list(outputs), {input_name: row})]
        if any(v.dtype != np.float32 or v.size != 1 for v in values):
            return None
        run = cls(
            session, input_name, [(n, list(v.shape)) for n, v in zip(outputs, values, strict=True)], width
        )
        run._bind()  # fail here, at load, rather than on a submission
        return run

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The outputs for the one row ``x`` (shape (1, width), float32) as a new float64 array
        (outputs, 1), as ``ladder.stacked`` gives them."""
        result: np.ndarray = self._run(x).astype(np.float64)
        return result

    def first(self, x: np.ndarray) -> float:
        """The first output for the one row ``x``, as a float (the same value ``__call__`` gives):
        the serving path's one value per model, without an array to hold it."""
        value: float = self._run(x).item(0)
        return value

    def _run(self, x: np.ndarray) -> np.ndarray:
        """Run on this thread's buffers; returns its output buffer, valid until its next run."""
        bound = getattr(self._local, "bound", None)
        if bound is None:
            bound = self._local.bound = self._bind()
        binding, row, out = bound
        row[...] = x
        self._session.run_with_iobinding(binding)
        return out

    def _bind(self) -> tuple[Any, np.ndarray, np.ndarray]:
        row = np.zeros((1, self._width), dtype=np.float32)
        out = np.zeros((len(self._outputs), 1), dtype=np.float32)
        binding = self._session.io_binding()
        binding.bind_input(self._input, "cpu", 0, np.float32, [1, self._width], row.ctypes.data)
        for i, (name, shape) in enumerate(self._outputs):
            # Output i is row i of ``out``: the buffers live as long as the binding (the tuple).
            binding.bind_output(name, "cpu", 0, np.float32, shape, out[i].ctypes.data)
        return binding, row, out
