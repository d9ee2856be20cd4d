// A pybind11 extension that embeds fastopt through its published C API only:
// built by tests/test_capi_consumers.py against fastopt.get_include() when
// pybind11 is installed. adam(...) runs torch's Adam on one tensor given by
// addresses, with the GIL released, through the list call or the typed
// one-tensor call.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>

#include "fastopt/fastopt_capi.h"

namespace py = pybind11;

namespace {

template <class T>
T init()
{
    T value{};
    value.size = sizeof(T);
    return value;
}

template <class T>
T *at(std::uintptr_t address)
{
    return reinterpret_cast<T *>(address);
}

std::pair<int, int> adam(std::uintptr_t x, std::uintptr_t g, std::uintptr_t m,
                         std::uintptr_t v, std::int64_t n, int dtype, double lr, double b1,
                         double b2, double eps, double wd, std::int64_t step, int n_threads,
                         int typed)
{
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
    auto t = init<fastopt_tensor>();
    t.x = at<void>(x);
    t.g = at<const void>(g);
    t.s1 = at<void>(m);
    t.s2 = at<void>(v);
    t.n = n;
    t.dtype = t.gdtype = dtype;
    int rc;
    {
        py::gil_scoped_release nogil;
        if (typed && dtype == FASTOPT_F32)
            rc = fastopt_step_f32(at<float>(x), at<const float>(g), at<float>(m), at<float>(v),
                                  nullptr, n, &grp, &o, &res, n_threads);
        else if (typed)
            rc = fastopt_step_f64(at<double>(x), at<const double>(g), at<double>(m),
                                  at<double>(v), nullptr, n, &grp, &o, &res, n_threads);
        else
            rc = fastopt_step(&t, 1, &grp, 1, &o, &res, n_threads);
    }
    return {rc, res.error_field};
}

}  // namespace

PYBIND11_MODULE(_fo_consumer_pybind, mod)
{
    if (import_fastopt() < 0)
        throw py::error_already_set();
    mod.def("adam", &adam, "torch Adam on one tensor, without the GIL");
    mod.def("abi", [] {
        return py::make_tuple(fastopt_api->abi_major, fastopt_api->abi_minor,
                              fastopt_version());
    });
}
