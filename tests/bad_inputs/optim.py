"""Rejected inputs of fastopt.optim (constructors, step, checkpoints).
"""
from __future__ import annotations

import math

import numpy as np

from bad_inputs.builders import F32, F64, Case, arr, ro


def _optim():
    from fastopt import optim
    return optim


def opt_ctor(*params, **kw):
    return lambda: ((list(params),), kw)


def opt_call(cls, method, *args, ctor=None, **kw):
    """Arguments for a method call on a fresh optimizer over two parameters
    (built with the keyword arguments ``ctor``)."""
    def build():
        opt = getattr(_optim(), cls)([arr(), arr((2, 3), F64)], lr=0.1, **(ctor or {}))
        opt.step([arr(fill=0.5), arr((2, 3), F64, 0.5)])   # non-trivial state
        return (opt,) + tuple(a() if callable(a) else a for a in args), kw
    return build


def other_state_dict():
    return _optim().OnnxAdam([arr(), arr((2, 3), F64)], lr=0.1).state_dict()


def bad_steps_state_dict():
    sd = _optim().OnnxMomentum([arr(), arr((2, 3), F64)], lr=0.1).state_dict()
    sd["steps"] = -1
    return sd


try:
    from fastopt.optim import CheckpointError
except ImportError:  # pragma: no cover - before fastopt.optim existed
    CheckpointError = ValueError

OP = "fastopt.optim."
OPTIM_CASES = [
    Case("optim.OnnxMomentum", "params a single array (not a list)",
         lambda: ((arr(),), {"lr": 0.1}), TypeError,
         OP + "OnnxMomentum: params must be a list of arrays or a list of parameter groups "
              "(dicts with 'params'), got ndarray"),
    Case("optim.OnnxMomentum", "params empty", lambda: (([],), {"lr": 0.1}), ValueError,
         OP + "OnnxMomentum: params is empty; give at least one parameter"),
    Case("optim.OnnxMomentum", "neither lr nor schedule", opt_ctor(arr()), ValueError,
         OP + "OnnxMomentum: give lr, or a schedule that supplies it"),
    Case("optim.OnnxMomentum", "both lr and schedule",
         opt_ctor(arr(), lr=0.1, schedule=abs), ValueError,
         OP + "OnnxMomentum: give lr or schedule, not both: the schedule supplies the learning "
              "rate of every step"),
    Case("optim.OnnxAdam", "lr = -0.1", opt_ctor(arr(), lr=-0.1), ValueError,
         OP + "OnnxAdam: lr must be a finite number >= 0, got -0.1"),
    Case("optim.OnnxAdagrad", "a group with an unknown key",
         lambda: (([{"params": [arr()], "momentum": 0.9}],), {"lr": 0.1}), ValueError,
         OP + "OnnxAdagrad: param_groups[0] has unknown key(s) ['momentum']; OnnxAdagrad takes "
              "['decay_factor', 'epsilon', 'initial_accumulator_value', 'lr', "
              "'norm_coefficient', 'schedule']"),
    Case("optim.OnnxAdagrad", "arrays and groups mixed",
         lambda: (([arr(), {"params": [arr()]}],), {"lr": 0.1}), TypeError,
         OP + "OnnxAdagrad: params mixes arrays and parameter groups; give a list of arrays or "
              "a list of dicts"),
    Case("optim.OnnxAdam", "the same parameter twice",
         lambda: (lambda p: (([p, p],), {"lr": 0.1}))(arr()), ValueError,
         OP + "OnnxAdam: params[0] and params[1] share memory; every parameter and state must "
              "have memory of its own (a parameter may appear only once)"),
    Case("optim.OnnxAdam", "a read-only parameter", lambda: (([arr(), ro(arr())],), {"lr": 0.1}),
         ValueError, OP + "OnnxAdam: params[1] is read-only; it is updated in place"),
    Case("optim.OnnxAdam", "an int64 parameter",
         lambda: (([arr(), arr(dtype=np.int64)],), {"lr": 0.1}), TypeError,
         OP + "OnnxAdam: params[1] has dtype int64; fastopt updates float32 or float64 arrays"),
    Case("optim.AdamW", "decay_mode = 'after'", opt_ctor(arr(), decay_mode="after"),
         ValueError, OP + "AdamW: decay_mode must be 'torch' (the weight decay before the "
         "update) or 'bnb' (after it), got 'after'"),
    Case("optim.AdamW", "state_dtype = 'float16'", opt_ctor(arr(), state_dtype="float16"),
         ValueError, OP + "AdamW: state_dtype must be None, 'float32', 'bfloat16' or "
                          "'int8-blockwise', got 'float16'"),
    Case("optim.AdamW", "state_dtype = 'bfloat16' for float64 parameters",
         opt_ctor(arr(dtype=F64), state_dtype="bfloat16"), ValueError,
         OP + "AdamW: state_dtype='bfloat16' needs float32 parameters (or "
              "master_weights=True); param_groups[0]['params'][0] is float64"),
    Case("optim.RMSprop", "state_dtype = 'int8-blockwise' with centered",
         opt_ctor(arr(), centered=True, state_dtype="int8-blockwise"), ValueError,
         OP + "RMSprop: state_dtype='int8-blockwise': the options of param_groups[0] use 2 "
              "states of rmsprop, and only square_avg has an 8-bit form; use float32 states "
              "with these options"),
    Case("optim.OnnxMomentum", "nesterov = 1 (not a bool)", opt_ctor(arr(), lr=0.1, nesterov=1),
         TypeError, OP + "OnnxMomentum: nesterov must be True or False, got int"),
    Case("optim.OnnxMomentum", "schedule not callable", opt_ctor(arr(), schedule=0.1), TypeError,
         OP + "OnnxMomentum: schedule must be a callable step -> lr (or None), got float"),
    Case("optim.OnnxMomentum.step", "one gradient for two parameters",
         opt_call("OnnxMomentum", "step", lambda: [arr()]), ValueError,
         OP + "OnnxMomentum.step: grads has 1 entries but the optimizer has 2 parameters; give "
              "one gradient (or None) per parameter"),
    Case("optim.OnnxMomentum.step", "grads[1] of the wrong dtype",
         opt_call("OnnxMomentum", "step", lambda: [arr(), arr((2, 3), F32)]), TypeError,
         OP + "OnnxMomentum.step: grads[1] has dtype float32; the gradient of params[1] "
              "(float64) must be float64, bfloat16 or float16"),
    Case("optim.OnnxMomentum.step", "grads[1] of another shape",
         opt_call("OnnxMomentum", "step", lambda: [arr(), arr((3, 2), F64)]), ValueError,
         OP + "OnnxMomentum.step: grads[1] has shape (3, 2) but params[1] has shape (2, 3); the "
              "gradient must have its parameter's shape (or build the optimizer with "
              "broadcast_grads=True to broadcast it)"),
    Case("optim.OnnxMomentum.step", "grads[1] broadcastable, broadcast_grads off",
         opt_call("OnnxMomentum", "step", lambda: [arr(), arr((3,), F64)]), ValueError,
         OP + "OnnxMomentum.step: grads[1] has shape (3,) but params[1] has shape (2, 3); the "
              "gradient must have its parameter's shape (or build the optimizer with "
              "broadcast_grads=True to broadcast it)"),
    Case("optim.OnnxAdam.step", "grads[0] broadcastable, broadcast_grads off",
         opt_call("OnnxAdam", "step", lambda: [arr((1,)), arr((2, 3), F64)]), ValueError,
         OP + "OnnxAdam.step: grads[0] has shape (1,) but params[0] has shape (3,); the "
              "gradient must have its parameter's shape (or build the optimizer with "
              "broadcast_grads=True to broadcast it)"),
    Case("optim.OnnxMomentum.step", "grads[1] not broadcastable, broadcast_grads on",
         opt_call("OnnxMomentum", "step", lambda: [arr(), arr((3, 2), F64)],
                  ctor={"broadcast_grads": True}), ValueError,
         OP + "OnnxMomentum.step: grads[1] with shape (3, 2) cannot be broadcast to params[1]'s "
              "shape (2, 3)"),
    Case("optim.AdamW", "broadcast_grads not a bool", opt_ctor(arr(), broadcast_grads=1),
         TypeError, OP + "AdamW: broadcast_grads must be True or False, got int"),
    Case("optim.OnnxMomentum.step", "grads[0] a NumPy float32 scalar",
         opt_call("OnnxMomentum", "step", lambda: [np.float32(0.5), arr((2, 3), F64)]), TypeError,
         OP + "OnnxMomentum.step: grads[0] must be a numpy.ndarray or None, got a NumPy float32 "
              "scalar, not an array; convert it with np.asarray(..., dtype=...) to an array "
              "of its parameter's dtype"),
    Case("optim.OnnxMomentum.step", "grads a list of Python floats",
         opt_call("OnnxMomentum", "step", lambda: [0.5, 0.5, 0.5]), TypeError,
         OP + "OnnxMomentum.step: grads is a list of numbers; give one gradient array per "
              "parameter (np.asarray(..., dtype=...) makes an array of its parameter's dtype)"),
    Case("optim.OnnxMomentum.step", "grads[1] a str",
         opt_call("OnnxMomentum", "step", lambda: [arr(), "g"]), TypeError,
         OP + "OnnxMomentum.step: grads[1] must be a numpy.ndarray or None, got str"),
    Case("optim.OnnxMomentum.step", "grad_scale = 0",
         opt_call("OnnxMomentum", "step", lambda: [arr(), arr((2, 3), F64)], grad_scale=0.0),
         ValueError, OP + "OnnxMomentum.step: grad_scale must be > 0.0, got 0.0"),
    Case("optim.OnnxMomentum.step", "grad_scale = nan",
         opt_call("OnnxMomentum", "step", lambda: [arr(), arr((2, 3), F64)], grad_scale=math.nan),
         ValueError, OP + "OnnxMomentum.step: grad_scale must be finite, got nan"),
    Case("optim.OnnxMomentum.step", "max_grad_norm = 0",
         opt_call("OnnxMomentum", "step", lambda: [arr(), arr((2, 3), F64)], max_grad_norm=0.0),
         ValueError, OP + "OnnxMomentum.step: max_grad_norm must be > 0 (inf: no clipping), "
                          "got 0.0"),
    Case("optim.AdamW.step", "max_grad_norm = nan",
         opt_call("AdamW", "step", lambda: [arr(), arr((2, 3), F64)], max_grad_norm=math.nan),
         ValueError, OP + "AdamW.step: max_grad_norm must be > 0 (inf: no clipping), "
                          "got nan"),
    Case("optim.AdamW.step", "norm_type = 1",
         opt_call("AdamW", "step", lambda: [arr(), arr((2, 3), F64)], max_grad_norm=1.0,
                  norm_type=1),
         ValueError, OP + "AdamW.step: norm_type must be 2.0 or math.inf, got 1"),
    Case("optim.OnnxMomentum.load_state_dict", "another optimizer's state",
         opt_call("OnnxMomentum", "load_state_dict", other_state_dict), CheckpointError,
         OP + "OnnxMomentum.load_state_dict: the checkpoint was saved by fastopt.optim.OnnxAdam, "
              "not OnnxMomentum"),
    Case("optim.OnnxMomentum.load_state_dict", "a step count of -1",
         opt_call("OnnxMomentum", "load_state_dict", bad_steps_state_dict), CheckpointError,
         OP + "OnnxMomentum.load_state_dict: the checkpoint's step count must be an integer "
              ">= 0 and < 2**63, got -1"),
]
