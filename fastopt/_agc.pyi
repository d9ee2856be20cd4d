"""Type stub for the compiled AGC fast path (fastopt/_agc.pyx)."""
from typing import Any, Optional, Sequence, Union

import numpy as np

_Arrays = Union[np.ndarray, Sequence[np.ndarray]]
_Clipping = Union[float, Sequence[Optional[float]]]

def agc(xs: _Arrays, gs: _Arrays, clipping: _Clipping, eps: Any, layout: Any,
        n_threads: Optional[int]) -> bool: ...
def agc_momentum(xs: _Arrays, gs: _Arrays, vs: _Arrays, lr: Any, t: Any, alpha: Any,
                 beta: Any, norm_coefficient: Any, mode: Any, clipping: _Clipping,
                 eps: Any, layout: Any, n_threads: Optional[int]) -> bool: ...
def unit_norms(x: np.ndarray, layout: str) -> np.ndarray: ...
