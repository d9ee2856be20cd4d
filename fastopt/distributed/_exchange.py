"""A ShardedOptimizer's collectives: the gradients' reduce-scatter and the
parameters' allgather, bucket by bucket in the layout's order (methods of
ShardedOptimizer)."""
from __future__ import annotations

import numpy as np

from .. import _ext
from ._comm import mpi, mpi_type


def reduce_scatter(self):
    """The ranks' gradients (in _gstage) summed and divided by the world
    size into this rank's shard (_gshard), bucket by bucket."""
    MPI = mpi()
    w = self.world
    for dt, d in self.layout.dtypes.items():
        stage, shard, typ = self._gstage[dt], self._gshard[dt], mpi_type(dt)
        if dt in self._half:
            _half(self, d, stage, shard, typ)
            continue
        off = 0
        for cuts in d.buckets:
            counts = [cuts[r + 1] - cuts[r] for r in range(w)]
            mine = counts[self.rank]
            if w > 1:
                self.comm.Reduce_scatter([stage[cuts[0]:cuts[-1]], typ],
                                         [shard[off:off + mine], typ], counts, op=MPI.SUM)
            off += mine
        if w > 1:
            np.divide(shard, dt.type(w), out=shard)


def _half(self, d, stage, shard, typ):
    """16-bit gradients: every rank receives each rank's 16-bit words of
    its slices (one all-to-all per bucket, half the bytes of float32's)
    and adds them in float32 in rank order, then divides by the world
    size: the same sum whatever order MPI would reduce in."""
    w, off = self.world, 0
    # the receive buffer and a float32 one, of the largest slice, kept
    most = max((c[self.rank + 1] - c[self.rank] for c in d.buckets), default=0)
    bufs = self._half_bufs
    if d.dtype not in bufs or bufs[d.dtype][0].size < w * most:   # (most 0: a rank
        # that owns none of the dtype's elements still takes part)
        bufs[d.dtype] = (np.empty(w * most, stage.dtype), np.empty(most, np.float32))
    recv_all, wide = bufs[d.dtype]
    for cuts in d.buckets:
        counts = [cuts[r + 1] - cuts[r] for r in range(w)]
        mine = counts[self.rank]
        part = shard[off:off + mine]
        if w == 1:
            _ext.convert(stage[cuts[0]:cuts[1]], part)
        else:
            recv = recv_all[:w * mine]
            self.comm.Alltoallv(
                [stage[cuts[0]:cuts[-1]], (counts, [c - cuts[0] for c in cuts[:-1]]), typ],
                [recv, ([mine] * w, [q * mine for q in range(w)]), typ])
            # widened by the kernels' loops (exact; NumPy's casts of
            # ml_dtypes' bfloat16 are several times slower)
            _ext.convert(recv[:mine], part)
            for q in range(1, w):
                _ext.convert(recv[q * mine:(q + 1) * mine], wide[:mine])
                np.add(part, wide[:mine], out=part)
        off += mine
    if w > 1:
        np.divide(shard, np.float32(w), out=shard)


def allgather(self):
    """Every rank's updated slices of the flat parameter buffers to every
    rank, in place."""
    if self.world == 1:
        return
    MPI = mpi()
    w = self.world
    for dt, d in self.layout.dtypes.items():
        flat, typ = self._flat[dt], mpi_type(dt)
        for cuts in d.buckets:
            counts = [cuts[r + 1] - cuts[r] for r in range(w)]
            displs = [c - cuts[0] for c in cuts[:-1]]
            self.comm.Allgatherv(MPI.IN_PLACE,
                                 [flat[cuts[0]:cuts[-1]], (counts, displs), typ])
