"""Parameter shapes of real models, for the demo and the benchmarks."""
from __future__ import annotations

import numpy as np


def resnet50_shapes() -> list[tuple[int, ...]]:
    """The 161 parameter tensors of torchvision's ResNet-50 (25,557,032 values).

    Convolutions in PyTorch's OIHW layout, each followed by its batch norm's
    weight and bias; bottleneck stages of 3, 4, 6, 3 blocks with widths 64,
    128, 256, 512 and expansion 4; the first block of every stage has a 1x1
    downsample; a 2048 -> 1000 classifier at the end.
    """
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),
                       (planes, planes, 3, 3), (planes,), (planes,),
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if b == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(1000, 2048), (1000,)]
    return shapes


def make_tensors(shapes, dtype=np.float32, seed: int = 0):
    """Random parameters, gradients and two zeroed states for each shape."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    gs = [rng.standard_normal(s).astype(dtype) * dtype(1e-2) for s in shapes]
    vs = [np.zeros(s, dtype) for s in shapes]
    hs = [np.zeros(s, dtype) for s in shapes]
    return xs, gs, vs, hs


#: The standard benchmark workloads: name -> list of shapes.
WORKLOADS = {
    "1x1e3": [(1000,)],
    "1x1e6": [(1_000_000,)],
    "1x5e7": [(50_000_000,)],
    "resnet50": None,          # filled below
    "1000x1e3": [(1000,)] * 1000,
}
WORKLOADS["resnet50"] = resnet50_shapes()

#: Bytes moved per element by each op: (arrays read, arrays written).
TRAFFIC = {"momentum": (3, 2), "adagrad": (3, 2), "adam": (4, 3)}
