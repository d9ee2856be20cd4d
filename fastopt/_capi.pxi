# The published C API (src_c/capi.c, docs/embedding.md): its static table of
# entry points in a capsule named as the generated header says
# (FASTOPT_CAPI_NAME), the module attribute import_fastopt() reads.
from cpython.pycapsule cimport PyCapsule_New


cdef extern from "capi.h":
    const void *fo_capi_table()
    const char *fo_capi_name()


_C_API = PyCapsule_New(<void *>fo_capi_table(), fo_capi_name(), NULL)
