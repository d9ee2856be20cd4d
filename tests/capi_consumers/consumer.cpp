// A C++ extension (plain C++ against the Python C-API) that embeds fastopt
// through its published C API only: built by tests/test_capi_consumers.py
// against fastopt.get_include(). adam(...) runs torch's Adam on one tensor
// given by addresses, without the GIL, through the list call (a
// std::vector of tensors) or the typed one-tensor call.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <vector>

#include "fastopt/fastopt_capi.h"

namespace {

template <class T>
T init()
{
    T value{};                  // zero: every reserved field and flag
    value.size = sizeof(T);
    return value;
}

PyObject *adam(PyObject *, PyObject *args)
{
    unsigned long long x, g, m, v;
    long long n, step;
    int dtype, n_threads, typed;
    double lr, b1, b2, eps, wd;
    if (!PyArg_ParseTuple(args, "KKKKLidddddLii", &x, &g, &m, &v, &n, &dtype, &lr, &b1, &b2,
                          &eps, &wd, &step, &n_threads, &typed))
        return nullptr;
    auto grp = init<fastopt_group>();
    grp.rule = FASTOPT_RULE_ADAM_TORCH;
    grp.t = step;
    grp.lr = lr;
    grp.alpha = b1;
    grp.beta = b2;
    grp.eps = eps;
    grp.decay = wd;
    auto o = init<fastopt_opts>();
    o.grad_scale = 1.0;
    auto res = init<fastopt_result>();
    std::vector<fastopt_tensor> ts(1, init<fastopt_tensor>());
    ts[0].x = reinterpret_cast<void *>(static_cast<std::uintptr_t>(x));
    ts[0].g = reinterpret_cast<const void *>(static_cast<std::uintptr_t>(g));
    ts[0].s1 = reinterpret_cast<void *>(static_cast<std::uintptr_t>(m));
    ts[0].s2 = reinterpret_cast<void *>(static_cast<std::uintptr_t>(v));
    ts[0].n = n;
    ts[0].dtype = ts[0].gdtype = dtype;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (typed && dtype == FASTOPT_F32)
        rc = fastopt_step_f32(static_cast<float *>(ts[0].x),
                              static_cast<const float *>(ts[0].g),
                              static_cast<float *>(ts[0].s1), static_cast<float *>(ts[0].s2),
                              nullptr, n, &grp, &o, &res, n_threads);
    else if (typed)
        rc = fastopt_step_f64(static_cast<double *>(ts[0].x),
                              static_cast<const double *>(ts[0].g),
                              static_cast<double *>(ts[0].s1),
                              static_cast<double *>(ts[0].s2), nullptr, n, &grp, &o, &res,
                              n_threads);
    else
        rc = fastopt_step(ts.data(), static_cast<int64_t>(ts.size()), &grp, 1, &o, &res,
                          n_threads);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("ii", rc, static_cast<int>(res.error_field));
}

PyObject *abi(PyObject *, PyObject *)
{
    return Py_BuildValue("IIs", fastopt_api->abi_major, fastopt_api->abi_minor,
                         fastopt_version());
}

PyMethodDef methods[] = {
    {"adam", adam, METH_VARARGS, "torch Adam on one tensor, without the GIL"},
    {"abi", abi, METH_NOARGS, "the imported table's version"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fo_consumer_cpp", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__fo_consumer_cpp(void)
{
    if (import_fastopt() < 0)
        return nullptr;
    return PyModule_Create(&module);
}
