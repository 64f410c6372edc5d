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
the others. The rest of a GPU's peak (activations, temporary buffers, the CUDA context, the
framework's own) is not estimated: it depends on the batch, the sequence length and checkpointing,
which the advice is not told. A headroom of each GPU's memory (HEADROOM, 10 % unless the site sets
``[advice] gpu_memory_headroom``) is kept free for it: the states must fit in the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "HEADROOM",
    "POWERS_OF_TWO",
    "STATE_BYTES",
    "Fit",
    "StateBytes",
    "TrainingFacts",
    "fewest_gpus",
    "model_state_bytes",
    "usable_bytes",
]

POWERS_OF_TWO = tuple(2**i for i in range(11))  # 1 .. 1024: the usual data-parallel degrees
# A GPU's memory kept free of model states, for what they do not count (activations, buffers, the
# CUDA context): a guess, not a fit. 10 % is 8 GB of an 80 GB GPU, 1.6 GB of a 16 GB one.
HEADROOM = 0.1


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


def usable_bytes(memory_bytes: float, headroom: float = HEADROOM) -> float:
    """What one GPU of ``memory_bytes`` holds of model states, ``headroom`` of it kept free."""
    return memory_bytes * (1.0 - headroom)


@dataclass(frozen=True, slots=True)
class Fit:
    partition: str
    gpus: int
    need_bytes: float  # model states per GPU
    memory_bytes: float  # one GPU's memory in that partition
    usable_bytes: float  # of which model states may take (the headroom kept free)

    @property
    def margin_bytes(self) -> float:
        return self.usable_bytes - self.need_bytes


def fewest_gpus(
    facts: TrainingFacts,
    gpu_memory: Mapping[str, float],
    candidates: Sequence[int] = POWERS_OF_TWO,
    most_gpus: Mapping[str, int] | None = None,
    headroom: float = HEADROOM,
) -> Fit | None:
    """The smallest data-parallel degree among ``candidates`` whose model states fit a GPU of
    some partition (``gpu_memory``: partition -> bytes per GPU; ``headroom`` of it kept free), and
    that partition; a partition's degrees stop at ``most_gpus`` (the most GPUs one job may have
    there; a partition it does not name: no limit). Equal degrees go to the larger margin. None
    when nothing fits (stage 0 never shrinks with GPUs)."""
    best: Fit | None = None
    for partition, memory in gpu_memory.items():
        most = (most_gpus or {}).get(partition)
        usable = usable_bytes(memory, headroom)
        for gpus in sorted(c for c in candidates if most is None or c <= most):
            need = model_state_bytes(facts, gpus)
            if need <= usable:
                fit = Fit(partition, gpus, need, float(memory), usable)
                if best is None or (fit.gpus, -fit.margin_bytes) < (best.gpus, -best.margin_bytes):
                    best = fit
                break
    return best
