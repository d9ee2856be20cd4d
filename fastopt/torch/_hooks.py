"""The step of fastopt.torch's optimizers wrapped as torch.optim wraps a
step (``Optimizer.profile_hook_step``): the global and the optimizer's own
step pre-hooks before it (a pre-hook may return new ``(args, kwargs)``),
``_optimizer_step_code`` and the post-hooks after it, inside a profiler
range named ``Optimizer.step#<class>.step``.

The range is opened (by torch's own wrapper) only while a profiler is
enabled on the calling thread (``torch.profiler.profile``, the autograd
profiler, ``emit_nvtx``, ``emit_itt``): entering one costs a dispatcher
call, and after a step that streamed more than the caches hold its code
and objects are misses (bench/RESULTS.md). Recorders that attach without
enabling a profiler on the thread (on-demand Kineto tracing, a lone
``ExecutionTraceObserver``) see no range for the step. The function carries
torch's ``hooked`` mark, so torch.optim.Optimizer does not wrap it again; a
subclass that overrides ``step`` is wrapped by torch, which runs the hooks,
and its ``super().step()`` then runs this step without them (it sees
torch's wrapper as the class's step), once. A torch
without the hook registries or the profiler queries this reads gets the
function unmarked, and wraps it its own way.
"""
from __future__ import annotations

import functools
from itertools import chain

import torch
from torch.optim import optimizer as _optimizer

_profiling = getattr(torch._C._autograd, "_profiler_enabled", None)
_OURS = (_profiling is not None
         and hasattr(torch.autograd.profiler, "_is_profiler_enabled")
         and hasattr(_optimizer.Optimizer, "_optimizer_step_code")
         and hasattr(_optimizer.Optimizer, "profile_hook_step")
         and all(hasattr(_optimizer, n) for n in ("_global_optimizer_pre_hooks",
                                                  "_global_optimizer_post_hooks")))


def hooked(func):
    """func (an optimizer's step(self, ...)) with torch's step hooks."""
    if not _OURS:
        return func
    profiled = _optimizer.Optimizer.profile_hook_step(func)

    @functools.wraps(func)
    def step(self, *args, **kwargs):
        if getattr(type(self).step, "__code__", None) is profiled.__code__:
            return func(self, *args, **kwargs)  # inside torch's wrapper: the hooks ran
        if _profiling() or torch.autograd.profiler._is_profiler_enabled:
            return profiled(self, *args, **kwargs)
        return _run(func, self, args, kwargs)

    step.hooked = True
    return step


def _run(func, self, args, kwargs):
    """torch's profile_hook_step without its profiler range."""
    pre, post = _optimizer._global_optimizer_pre_hooks, _optimizer._global_optimizer_post_hooks
    args = (self, *args)
    if pre or self._optimizer_step_pre_hooks:
        for hook in chain(pre.values(), self._optimizer_step_pre_hooks.values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{func} must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {result}.")
                args, kwargs = result
    out = func(*args, **kwargs)
    self._optimizer_step_code()
    if post or self._optimizer_step_post_hooks:
        for hook in chain(self._optimizer_step_post_hooks.values(), post.values()):
            hook(self, args, kwargs)
    return out
