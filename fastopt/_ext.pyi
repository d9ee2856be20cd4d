"""Type stub for fastopt's one extension module (fastopt/_ext.pyx).

The op entry points are fast paths: True when the call ran, False when it
was declined (nothing written); they never raise for user input.
"""
from typing import Any, Optional, Sequence, Union

import numpy as np

_Arrays = Union[np.ndarray, Sequence[np.ndarray]]
_Clipping = Union[float, Sequence[Optional[float]]]

# thread facts (_threadfacts.pxi)
def have_openmp() -> bool: ...
def max_threads() -> int: ...
def num_procs() -> int: ...
def tuning() -> dict[str, int]: ...

# build facts (_buildfacts.pxi)
def build_info() -> dict[str, str]: ...

# bandwidth probe (_bandwidth_probe.pxi)
def probe(arrays: Sequence[np.ndarray], n_threads: int) -> None: ...

# fast paths
def momentum(xs: _Arrays, gs: _Arrays, vs: _Arrays, lr: Any, t: Any, alpha: Any,
             beta: Any, norm_coefficient: Any, mode: Any,
             n_threads: Optional[int]) -> bool: ...
def adagrad(xs: _Arrays, gs: _Arrays, hs: _Arrays, lr: Any, t: Any, decay_factor: Any,
            epsilon: Any, norm_coefficient: Any, n_threads: Optional[int]) -> bool: ...
def adam(xs: _Arrays, gs: _Arrays, vs: _Arrays, hs: _Arrays, lr: Any, t: Any,
         alpha: Any, beta: Any, epsilon: Any, norm_coefficient: Any,
         norm_coefficient_post: Any, n_threads: Optional[int]) -> bool: ...
def agc(xs: _Arrays, gs: _Arrays, clipping: _Clipping, eps: Any, layout: Any,
        n_threads: Optional[int]) -> bool: ...
def agc_momentum(xs: _Arrays, gs: _Arrays, vs: _Arrays, lr: Any, t: Any, alpha: Any,
                 beta: Any, norm_coefficient: Any, mode: Any, clipping: _Clipping,
                 eps: Any, layout: Any, n_threads: Optional[int]) -> bool: ...
def unit_norms(x: np.ndarray, layout: str) -> np.ndarray: ...

# the whole step (_step.pxi, issue 13); None: declined, nothing written
_StepOut = Optional[tuple[bool, float, bool]]
_Maybe = tuple[Optional[np.ndarray], ...]
def step(xs: tuple[np.ndarray, ...], gs: tuple[np.ndarray, ...], s1s: _Maybe,
         s2s: _Maybe, s3s: _Maybe, index: tuple[int, ...], groups: tuple[tuple, ...],
         grad_scale: float, max_norm: float, clip_value: float, clip: int,
         norm_type: int, check_finite: bool, n_threads: Optional[int],
         given_norm: float = ...) -> _StepOut: ...
def global_norm(gs: tuple[np.ndarray, ...], grad_scale: float, norm_type: int,
                n_threads: Optional[int]) -> Optional[tuple[float, bool]]: ...
def clip_grads(gs: tuple[np.ndarray, ...], grad_scale: float, max_norm: float,
               clip_value: float, clip: int, norm_type: int, check_finite: bool,
               n_threads: Optional[int]) -> _StepOut: ...
class StepPlan:
    @staticmethod
    def make(xs: tuple[np.ndarray, ...], s1s: _Maybe, s2s: _Maybe, s3s: _Maybe,
             index: tuple[int, ...], ng: int) -> Optional[StepPlan]: ...
    def run(self, gs: tuple[np.ndarray, ...], groups: tuple[tuple, ...],
            grad_scale: float, max_norm: float, clip_value: float, clip: int,
            norm_type: int, check_finite: bool, n_threads: Optional[int],
            given_norm: float = ...) -> _StepOut: ...
