/*
 * A C extension that embeds fastopt through its published C API only:
 * built by tests/test_capi_consumers.py against fastopt.get_include().
 * adam(...) runs torch's Adam on one tensor given by addresses, without
 * the GIL, through the list call or the typed one-tensor call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "fastopt/fastopt_capi.h"

#ifndef CONSUMER_NAME
#define CONSUMER_NAME _fo_consumer_c
#endif
#define STR2(x) #x
#define STR(x) STR2(x)
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

static PyObject *adam(PyObject *self, PyObject *args)
{
    unsigned long long x, g, m, v;
    long long n, step;
    int dtype, n_threads, typed;
    double lr, b1, b2, eps, wd;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKKKLidddddLii", &x, &g, &m, &v, &n, &dtype, &lr, &b1, &b2,
                          &eps, &wd, &step, &n_threads, &typed))
        return NULL;
    fastopt_group grp;
    memset(&grp, 0, sizeof grp);
    grp.size = sizeof grp;
    grp.rule = FASTOPT_RULE_ADAM_TORCH;
    grp.t = step;
    grp.lr = lr;
    grp.alpha = b1;
    grp.beta = b2;
    grp.eps = eps;
    grp.decay = wd;
    fastopt_opts o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.grad_scale = 1.0;
    fastopt_result res;
    memset(&res, 0, sizeof res);
    res.size = sizeof res;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (typed && dtype == FASTOPT_F32) {
        rc = fastopt_step_f32((float *)(uintptr_t)x, (const float *)(uintptr_t)g,
                              (float *)(uintptr_t)m, (float *)(uintptr_t)v, NULL, n, &grp,
                              &o, &res, n_threads);
    } else if (typed) {
        rc = fastopt_step_f64((double *)(uintptr_t)x, (const double *)(uintptr_t)g,
                              (double *)(uintptr_t)m, (double *)(uintptr_t)v, NULL, n, &grp,
                              &o, &res, n_threads);
    } else {
        fastopt_tensor t;
        memset(&t, 0, sizeof t);
        t.size = sizeof t;
        t.x = (void *)(uintptr_t)x;
        t.g = (const void *)(uintptr_t)g;
        t.s1 = (void *)(uintptr_t)m;
        t.s2 = (void *)(uintptr_t)v;
        t.n = n;
        t.dtype = t.gdtype = dtype;
        rc = fastopt_step(&t, 1, &grp, 1, &o, &res, n_threads);
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("ii", rc, (int)res.error_field);
}

static PyObject *abi(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("IIs", fastopt_api->abi_major, fastopt_api->abi_minor,
                         fastopt_version());
}

static PyMethodDef methods[] = {
    {"adam", adam, METH_VARARGS, "torch Adam on one tensor, without the GIL"},
    {"abi", abi, METH_NOARGS, "the imported table's version"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, STR(CONSUMER_NAME), NULL, -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC CAT(PyInit_, CONSUMER_NAME)(void)
{
    if (import_fastopt() < 0)
        return NULL;
    return PyModule_Create(&module);
}
