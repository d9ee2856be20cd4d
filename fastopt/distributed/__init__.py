"""Data-parallel training over MPI with sharded optimizer state (ZeRO-1).

::

    from mpi4py import MPI
    import fastopt.optim
    from fastopt.distributed import ShardedOptimizer

    opt = ShardedOptimizer(fastopt.optim.OnnxAdam, params, lr=1e-3)  # comm=MPI.COMM_WORLD
    params = opt.params              # train these: views into the flat buffers
    for batch in my_shard_of_the_data:
        opt.step(local_grads)        # average, update my shard, gather everything
    opt.save("ckpt/")                # collective; loads at any world size

Needs mpi4py and an MPI library (``python -m pip install ".[mpi]"`` in a
clone: mpi4py and the MPICH wheel). See
docs/distributed.md for the design, the checkpoint format and the
communication model.
"""
from fastopt.optim import CheckpointError

from ._sharded import DEFAULT_BUCKET_BYTES, ShardedOptimizer

__all__ = ["DEFAULT_BUCKET_BYTES", "CheckpointError", "ShardedOptimizer"]
