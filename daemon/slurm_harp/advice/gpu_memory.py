"""Per-GPU memory of data-parallel DNN training under ZeRO, and the fewest GPUs that hold it.

Model states (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020, section 5): with P parameters, p, g and k bytes per parameter for the
parameters, the gradients and the optimizer states, and Nd data-parallel GPUs, one GPU holds

    stage 0 (plain data parallelism):   (p + g + k) P
    stage 1 (optimizer states split):   (p + g) P + k P / Nd
    stage 2 (and gradients):            p P + (g + k) P / Nd
    stage 3 (and parameters):           (p + g + k) P / Nd

Mixed-precision Adam is the paper's case: fp16 parameters and gradients (2 + 2) and k = 12
(fp32 copies of the parameters, momentum and variance): 16 bytes a parameter. STATE_BYTES has
the others. The rest of a GPU's peak (activations, temporary buffers, the framework's own) is not
split by ZeRO's stages 1-3 (each GPU runs the whole model on its own micro-batch), so it is one
per-GPU term, ``Overhead``, fitted from the site's observed peaks where it has them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "POWERS_OF_TWO",
    "STATE_BYTES",
    "Fit",
    "Overhead",
    "StateBytes",
    "TrainingFacts",
    "fewest_gpus",
    "model_state_bytes",
]

POWERS_OF_TWO = tuple(2**i for i in range(11))  # 1 .. 1024: the usual data-parallel degrees


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of the parameters, the gradients and the optimizer states."""

    params: float
    grads: float
    optimizer: float


# (precision, optimizer) -> bytes per parameter. "mixed": fp16 or bf16 parameters and gradients
# with an fp32 master copy of the parameters in the optimizer states (the paper's setting).
STATE_BYTES: Mapping[tuple[str, str], StateBytes] = {
    ("mixed", "adam"): StateBytes(2, 2, 12),  # fp32 parameters, momentum, variance
    ("mixed", "sgd_momentum"): StateBytes(2, 2, 8),  # fp32 parameters, momentum
    ("mixed", "sgd"): StateBytes(2, 2, 4),  # fp32 parameters
    ("fp32", "adam"): StateBytes(4, 4, 8),  # momentum, variance
    ("fp32", "sgd_momentum"): StateBytes(4, 4, 4),  # momentum
    ("fp32", "sgd"): StateBytes(4, 4, 0),
}
STAGES = (0, 1, 2, 3)


@dataclass(frozen=True, slots=True)
class TrainingFacts:
    parameters: float  # the model's parameter count
    precision: str = "mixed"
    optimizer: str = "adam"  # Adam or AdamW
    stage: int = 0  # ZeRO stage

    def __post_init__(self) -> None:
        if (self.precision, self.optimizer) not in STATE_BYTES:
            known = ", ".join(f"{p}/{o}" for p, o in STATE_BYTES)
            raise ValueError(f"no byte counts for {self.precision}/{self.optimizer} (known: {known})")
        if self.stage not in STAGES:
            raise ValueError(f"ZeRO stage {self.stage}: one of 0, 1, 2, 3")
        if not (math.isfinite(self.parameters) and self.parameters > 0):
            raise ValueError(f"parameter count {self.parameters}: must be a positive number")


def model_state_bytes(facts: TrainingFacts, gpus: int) -> float:
    """Model-state bytes on each of ``gpus`` data-parallel GPUs."""
    if gpus < 1:
        raise ValueError(f"data-parallel degree {gpus}: at least 1")
    b, n = STATE_BYTES[facts.precision, facts.optimizer], facts.parameters
    whole, split = {
        0: (b.params + b.grads + b.optimizer, 0.0),
        1: (b.params + b.grads, b.optimizer),
        2: (b.params, b.grads + b.optimizer),
        3: (0.0, b.params + b.grads + b.optimizer),
    }[facts.stage]
    return whole * n + split * n / gpus


@dataclass(frozen=True, slots=True)
class Overhead:
    """Per-GPU bytes beyond the model states: activations, buffers, the framework's own."""

    per_gpu_bytes: float = 0.0
    observations: int = 0  # how many observed peaks it was fitted on (0: not fitted)

    @classmethod
    def fit(cls, observed: Iterable[tuple[TrainingFacts, int, float]], quantile: float = 1.0) -> Overhead:
        """From (facts, GPUs, observed peak bytes per GPU) of past runs: the ``quantile`` of
        peak - model states (1: the largest; kept only if positive). An observed value is taken
        (numpy's "higher" method), never one interpolated below it."""
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"overhead quantile {quantile}: in [0, 1]")
        residuals = [peak - model_state_bytes(facts, gpus) for facts, gpus, peak in observed]
        if not residuals:
            return cls()
        value = float(np.quantile(np.array(residuals), quantile, method="higher"))
        return cls(per_gpu_bytes=max(value, 0.0), observations=len(residuals))


@dataclass(frozen=True, slots=True)
class Fit:
    partition: str
    gpus: int
    need_bytes: float  # model states + overhead, per GPU
    memory_bytes: float  # one GPU's memory in that partition

    @property
    def margin_bytes(self) -> float:
        return self.memory_bytes - self.need_bytes


def fewest_gpus(
    facts: TrainingFacts,
    gpu_memory: Mapping[str, float],
    candidates: Sequence[int] = POWERS_OF_TWO,
    overhead: Overhead | None = None,
) -> Fit | None:
    """The smallest data-parallel degree among ``candidates`` whose per-GPU need fits a GPU of
    some partition (``gpu_memory``: partition -> bytes per GPU), and that partition; equal
    degrees go to the larger margin. ``overhead``: the fitted per-GPU rest (None: none known,
    the model states alone). None when nothing fits (stage 0 never shrinks with GPUs)."""
    extra = overhead.per_gpu_bytes if overhead is not None else 0.0
    best: Fit | None = None
    for partition, memory in gpu_memory.items():
        for gpus in sorted(candidates):
            need = model_state_bytes(facts, gpus) + extra
            if need <= memory:
                fit = Fit(partition=partition, gpus=gpus, need_bytes=need, memory_bytes=float(memory))
                if best is None or (fit.gpus, -fit.margin_bytes) < (best.gpus, -best.margin_bytes):
                    best = fit
                break
    return best
