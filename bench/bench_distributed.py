"""fastopt.distributed.ShardedOptimizer vs torch's ZeroRedundancyOptimizer.

One run, under mpiexec (each rank prints nothing but rank 0's table)::

    mpiexec -bind-to core -n 2 python bench/bench_distributed.py   # the comparison
    python bench/bench_distributed.py --no-torch                   # 1 process: baseline
    mpiexec -bind-to core -n 2 python bench/bench_distributed.py --no-torch --bf16
                  # and the same model in bfloat16 with master weights (16-bit exchange)

Bind the ranks to cores (MPICH: ``-bind-to core``): unbound, on a loaded machine, the
scheduler may put both ranks on one core for a whole run, and MPICH's shared-memory
allgather, which spins while it waits for its peer, then takes seconds per step.

25 M float32 parameters (100 tensors of 250 x 1000), Adam. Per step:

- fastopt: the step split into copy (gradients into the flat buffer),
  reduce-scatter, update (the inner fastopt.optim.OnnxAdam over this rank's
  shard) and allgather; for the update part, the single-process
  fastopt.optim.OnnxAdam step over arrays of the same size as the shard, timed on
  every rank at once (so both see the same memory-bandwidth contention);
- torch: what a ZeRO-1 step costs there: ``all_reduce`` of the gradients
  over gloo in 25 MB buckets (what DDP does; ZeroRedundancyOptimizer itself
  does not average gradients), then ``ZeroRedundancyOptimizer(Adam).step()``
  (its partition's update, then a broadcast of every partition). Its process
  group is created with env:// on 127.0.0.1, ranks taken from MPI.

Threads: each rank uses (cores // ranks) threads, for fastopt and torch
alike. Median and p90 over --steps timed steps after one warm-up step.
Not a pytest benchmark (needs mpiexec); pytest collects nothing here.
"""
import argparse
import os
import time

import numpy as np


def _stats(xs):
    xs = np.sort(np.asarray(xs)) * 1e3
    return float(np.median(xs)), float(xs[min(len(xs) - 1, int(0.9 * len(xs)))])


def make_model(n_tensors, rows, cols, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(n_tensors)]


def bench_fastopt(args, comm, threads, half=False):
    """The fastopt step's parts; half: the model in bfloat16 with float32
    masters (master_weights=True), the ranks exchanging 16-bit words."""
    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer

    params = make_model(args.tensors, args.rows, args.cols, 0)
    if half:
        import ml_dtypes
        params = [p.astype(ml_dtypes.bfloat16) for p in params]
    opt = ShardedOptimizer(fo.OnnxAdam, params, lr=1e-3, comm=comm,
                           bucket_bytes=int(args.bucket_mb * (1 << 20)), master_weights=half)
    del params
    grads = opt.grad_buffers          # written in place: no copy in step()
    rng = np.random.default_rng(comm.Get_rank() + 1)
    for g in grads:
        g[...] = rng.standard_normal(g.shape, dtype=np.float32) * 0.01
    parts = {k: [] for k in ("copy", "reduce_scatter", "update", "sync", "allgather")}
    total = []
    for i in range(args.steps + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        opt.step(grads)
        dt = time.perf_counter() - t0
        if i:
            total.append(dt)
            for k, acc in parts.items():
                acc.append(opt.last_timing[k])
    shard = sum(opt.layout.shard_length(dt, comm.Get_rank()) for dt in opt.layout.dtypes)
    # the same update alone: fastopt.optim.OnnxAdam over shard-sized arrays
    per = max(1, shard // args.tensors)
    sizes = [per] * (args.tensors - 1) + [shard - per * (args.tensors - 1)]
    xs = [np.zeros(s, np.float32) for s in sizes]
    gs = [np.full(s, 0.01, np.float32) for s in sizes]
    alone = fo.OnnxAdam(xs, lr=1e-3, n_threads=threads)
    kernel = []
    for i in range(args.steps + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        alone.step(gs)
        if i:
            kernel.append(time.perf_counter() - t0)
    return {"total": total, **parts, "kernel": kernel, "shard": shard,
            "state_bytes": opt.state_bytes}


def bench_torch(args, comm, threads):
    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    rank, world = comm.Get_rank(), comm.Get_size()
    port = comm.bcast(args.port if rank == 0 else None, root=0)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    try:
        params = [torch.nn.Parameter(torch.from_numpy(p))
                  for p in make_model(args.tensors, args.rows, args.cols, 0)]
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, lr=1e-3)
        gen = torch.Generator().manual_seed(rank + 1)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 0.01
        flat = torch.empty(sum(p.numel() for p in params))
        bucket = max(1, (25 << 20) // 4)
        total, reduce = [], []
        for i in range(args.steps + 1):
            comm.Barrier()
            t0 = time.perf_counter()
            torch.cat([p.grad.reshape(-1) for p in params], out=flat)
            for k in range(0, flat.numel(), bucket):
                dist.all_reduce(flat[k:k + bucket])
            flat.div_(world)
            o = 0
            for p in params:
                p.grad.copy_(flat[o:o + p.numel()].view_as(p))
                o += p.numel()
            t1 = time.perf_counter()
            opt.step()
            t2 = time.perf_counter()
            if i:
                total.append(t2 - t0)
                reduce.append(t1 - t0)
        return {"total": total, "allreduce": reduce}
    finally:
        dist.destroy_process_group()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--tensors", type=int, default=100)
    ap.add_argument("--rows", type=int, default=250)
    ap.add_argument("--cols", type=int, default=1000)
    ap.add_argument("--bucket-mb", type=float, default=8.0)
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--bf16", action="store_true",
                    help="also the model in bfloat16 with master weights")
    args = ap.parse_args(argv)
    from mpi4py import MPI

    from fastopt.distributed._comm import default_n_threads
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    threads, _ = default_n_threads(comm)
    threads = threads or 1
    n = args.tensors * args.rows * args.cols
    fo_res = bench_fastopt(args, comm, threads)
    half = bench_fastopt(args, comm, threads, half=True) if args.bf16 else None
    th_res = None if args.no_torch else bench_torch(args, comm, threads)
    every = comm.gather((fo_res, th_res), root=0)
    halves = comm.gather(half, root=0)
    if rank:
        return 0
    print(f"{n / 1e6:.1f} M float32 parameters, Adam, {world} rank(s) x {threads} "
          f"thread(s), buckets of {args.bucket_mb:g} MiB, {args.steps} steps "
          f"(median / p90 ms, the slowest rank)")
    slow = max(every, key=lambda e: np.median(e[0]["total"]))
    f = slow[0]
    for k in ("total", "copy", "reduce_scatter", "update", "sync", "allgather", "kernel"):
        m, p = _stats(f[k])
        label = {"total": "fastopt step", "kernel": "  single-process Adam on a shard-sized "
                 "list"}.get(k, f"  {k}")
        print(f"{label:44s}{m:9.1f}{p:9.1f}")
    print(f"  shard: {f['shard']:,} values; optimizer state on this rank "
          f"{f['state_bytes'] / 2**20:.1f} MiB")
    if args.bf16:
        h = max(halves, key=lambda e: np.median(e["total"]))
        print(f"the same model in bfloat16, master weights (16-bit exchange; "
              f"{2 * (world - 1) / world * n * 2 / 1e6:.0f} MB a rank a step, float32 "
              f"{2 * (world - 1) / world * n * 4 / 1e6:.0f})")
        for k in ("total", "copy", "reduce_scatter", "update", "sync", "allgather"):
            m, p = _stats(h[k])
            print(f"{'fastopt step' if k == 'total' else '  ' + k:44s}{m:9.1f}{p:9.1f}")
        print(f"  optimizer state (masters included) on this rank "
              f"{h['state_bytes'] / 2**20:.1f} MiB")
    if slow[1] is not None:
        tslow = max(every, key=lambda e: np.median(e[1]["total"]))[1]
        for k, label in (("total", "torch ZeRO-1 step (gloo)"), ("allreduce",
                                                                 "  all_reduce of gradients")):
            m, p = _stats(tslow[k])
            print(f"{label:44s}{m:9.1f}{p:9.1f}")
        print(f"fastopt / torch: {np.median(f['total']) / np.median(tslow['total']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
