"""Helpers of the fastopt.torch tests: what an optimizer's step may write,
and its comparison (test files import this after importorskip("torch"))."""
import torch

#: the keyword-only arguments every fastopt.torch drop-in adds after torch's
EXTRAS = ("n_threads", "flat", "master_weights", "state_dtype", "state_rounding", "seed")


def count_calls(monkeypatch, cls, name):
    """A one-element list counting the calls of cls.name that returned
    something other than None (a route taken, not declined)."""
    count = [0]
    orig = getattr(cls, name)

    def spy(self, *args):
        out = orig(self, *args)
        count[0] += out is not None
        return out
    monkeypatch.setattr(cls, name, spy)
    return count


def snapshot(opt, ps):
    """Every byte the step may write: parameters, states, counts."""
    out = [p.detach().clone() for p in ps]
    for p in ps:
        for k, v in sorted(opt.state.get(p, {}).items()):
            out.append((k, v.clone() if isinstance(v, torch.Tensor) else v))
    return out


def same(x, y):
    """Two snapshots hold the same values (NaN where the other has NaN)."""
    assert len(x) == len(y)
    for u, v in zip(x, y):
        if isinstance(u, tuple):
            assert u[0] == v[0]
            u, v = u[1], v[1]
        if isinstance(u, torch.Tensor):
            assert u.dtype == v.dtype and u.shape == v.shape
            assert torch.equal(u, v) or (torch.isnan(u).any() and torch.equal(
                u.nan_to_num(), v.nan_to_num()))
        else:
            assert u == v


def randn_list(shapes, seed):
    """Standard normal float32 tensors of the shapes, from one generator seeded so."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]
