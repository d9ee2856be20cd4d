"""Shared by the AGC tests: the shapes and layouts they run over, gradients
whose units straddle the clipping threshold, and a mixed workload of tensors.
"""
import numpy as np

from fastopt import _reference as ref

LAYOUTS = ["oi", "io"]
# ranks 0 to 5, with length-1 axes that squeeze away, odd lengths, a row
# longer than one 4096-element block and a row long enough for two passes
SHAPES = [
    (), (1,), (7,), (1, 1), (1, 5), (5, 1), (4, 6), (33, 17), (3, 5000),
    (1, 1, 9), (3, 5, 7), (2, 1, 3), (4, 3, 1),
    (8, 3, 3, 3), (3, 3, 4, 8), (1, 6, 1, 1),
    (2, 3, 2, 2, 3), (1, 4, 1, 3, 1), (2, 40000),
]
EMPTY = [(0,), (0, 3), (3, 0), (2, 0, 4)]
RTOL = {np.float32: 5e-7, np.float64: 1e-13}


def make(shape, dtype, layout, seed=0, clip_fraction=True):
    """x ~ N(0, 1) and g whose units are scaled so that, with clipping 0.01,
    about half of them are clipped (and none is near the threshold)."""
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.standard_normal(shape), dtype)
    g = np.asarray(rng.standard_normal(shape))
    if clip_fraction and g.size:
        nshape = ref.agc.unit_norms(g, layout).shape
        scale = np.where(rng.random(nshape) < 0.5, 3e-3, 3e-2)
        g = g * scale
    return x, np.asarray(g, dtype)


def snapshot(*arrays):
    return [a.tobytes() for a in arrays]


def mixed_workload(layout, seed=0, big=False):
    """Tensors of every unit kind: short rows, long rows (two passes),
    strided units, vectors, scalars, both dtypes, F order, an excluded one."""
    shapes = [(64, 3, 3, 3), (64,), (), (128, 64, 1, 1), (3, 5, 7), (2, 40000),
              (300, 70), (5, 1)]
    if big:
        # (24, 50000) holds more than 8 MiB of x and g in two passes (long rows
        # for "oi", strided units for "io"): the C driver splits the call into
        # groups after it
        shapes += [(256, 128, 3, 3), (24, 50000), (1000, 512)]
    dtypes = [np.float32, np.float64, np.float32, np.float32, np.float64, np.float32,
              np.float64, np.float32] + [np.float32, np.float32, np.float64][: len(shapes) - 8]
    xs, gs = [], []
    for k, (s, d) in enumerate(zip(shapes, dtypes)):
        x, g = make(s, d, layout, seed=seed + k)
        if k == 4:
            x, g = np.asfortranarray(x), np.asfortranarray(g)
        xs.append(x)
        gs.append(g)
    vs = [np.asarray(np.random.default_rng(seed + 99 + k).standard_normal(x.shape) * 0.01,
                     x.dtype) for k, x in enumerate(xs)]
    vs = [np.asfortranarray(v) if x.flags.f_contiguous and not x.flags.c_contiguous else v
          for v, x in zip(vs, xs)]
    clipping = [0.01] * len(xs)
    clipping[1] = None
    clipping[6] = 0.02
    return xs, gs, vs, clipping
