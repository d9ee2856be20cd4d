# A Cython extension that embeds fastopt through its published C API only
# (fastopt/cython_api.pxd), built by tests/test_capi_consumers.py as C and as
# C++: adam(...) runs torch's Adam on one tensor given by addresses, without
# the GIL, through the list call or the typed one-tensor call.
from libc.stdint cimport uintptr_t
from libc.string cimport memset

from fastopt.cython_api cimport *

import_fastopt()


def adam(uintptr_t x, uintptr_t g, uintptr_t m, uintptr_t v, int64_t n, int dtype, double lr,
         double b1, double b2, double eps, double wd, int64_t step, int n_threads, int typed):
    cdef fastopt_group grp
    cdef fastopt_opts o
    cdef fastopt_result res
    cdef fastopt_tensor t
    cdef int rc
    memset(&grp, 0, sizeof(grp))
    memset(&o, 0, sizeof(o))
    memset(&res, 0, sizeof(res))
    memset(&t, 0, sizeof(t))
    grp.size, o.size, res.size, t.size = (sizeof(grp), sizeof(o), sizeof(res), sizeof(t))
    grp.rule, grp.t, grp.lr = FASTOPT_RULE_ADAM_TORCH, step, lr
    grp.alpha, grp.beta, grp.eps, grp.decay = b1, b2, eps, wd
    o.grad_scale = 1.0
    t.x, t.g, t.s1, t.s2 = <void *>x, <const void *>g, <void *>m, <void *>v
    t.n, t.dtype, t.gdtype = n, dtype, dtype
    with nogil:
        if typed and dtype == FASTOPT_F32:
            rc = fastopt_step_f32(<float *>x, <const float *>g, <float *>m, <float *>v, NULL,
                                  n, &grp, &o, &res, n_threads)
        elif typed:
            rc = fastopt_step_f64(<double *>x, <const double *>g, <double *>m, <double *>v,
                                  NULL, n, &grp, &o, &res, n_threads)
        else:
            rc = fastopt_step(&t, 1, &grp, 1, &o, &res, n_threads)
    return rc, res.error_field


def abi():
    return fastopt_api.abi_major, fastopt_api.abi_minor, fastopt_version().decode()
