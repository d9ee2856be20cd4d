# The flat check's prefetcher (included by _flatcheck.pyx): the memory each
# parameter's check reads, asked for a few parameters ahead.

# ---- prefetching what the check reads -------------------------------------------------

cdef extern from *:
    """
    #define fo_prefetch(p) __builtin_prefetch((p), 0, 3)
    """
    void _prefetch "fo_prefetch"(const void *p) noexcept nogil


# how many parameters ahead a per-parameter loop asks for the objects it will read
cdef enum:
    _AHEAD = 6


cdef Py_ssize_t _noted(const void **pf, Py_ssize_t q, object t) except -1:
    """Note in pf[q:] the memory a check reads of t: the object and, for a
    tensor, the first 256 bytes of its TensorImpl and its StorageImpl's first
    line (torch's ``_cdata`` of a tensor and of a storage: their addresses);
    an int is an address, noted as it is where it fits one (an int a state
    dict holds comes here too: prefetching it is harmless, and one beyond a
    pointer's range is left out). The new q (at most q + 6)."""
    if type(t) is int:          # an address (an autograd record's)
        if -(1 << 63) <= t < (1 << 64):
            pf[q] = PyLong_AsVoidPtr(t)
            return q + 1
        return q
    pf[q] = <PyObject *>t
    q += 1
    try:
        impl, storage = t._cdata, t.untyped_storage()._cdata
    except Exception:       # not a tensor, or one that hides them: the object only
        return q
    if type(impl) is int and type(storage) is int:
        pf[q] = PyLong_AsVoidPtr(impl)
        pf[q + 1] = <char *>pf[q] + 64
        pf[q + 2] = <char *>pf[q] + 128
        pf[q + 3] = <char *>pf[q] + 192
        pf[q + 4] = PyLong_AsVoidPtr(storage)
        q += 5
    return q


cdef class Ahead:
    """The memory each parameter's per-step check will read, prefetched a
    few parameters ahead (:meth:`at`). After a step that streamed more
    than the caches hold, every torch object a check reads is a miss, and
    waiting for them one by one costs more than the reads themselves
    (figures in bench/RESULTS.md). Only ever prefetched, never read: a
    prefetch does not fault, so an address gone stale (an object freed
    since) costs a miss, no more, and the objects are not held."""

    cdef const void **pf        # what item k's check reads: pf[pf0[k]:pf0[k + 1]]
    cdef Py_ssize_t *pf0
    cdef Py_ssize_t n

    def __cinit__(self, items):
        """items: per parameter, in the order checked, the objects its
        check reads, or addresses as ints (None entries skipped)."""
        cdef Py_ssize_t k, q = 0, total = 0
        items = [tuple(o for o in objs if o is not None) for objs in items]
        self.n = len(items)
        for objs in items:
            total += 6 * len(objs)
        self.pf0 = <Py_ssize_t *>PyMem_Calloc(self.n + 1, sizeof(Py_ssize_t))
        self.pf = <const void **>PyMem_Calloc(total + 1, sizeof(void *))
        if not self.pf0 or not self.pf:
            raise MemoryError()
        for k in range(self.n):
            self.pf0[k] = q
            for o in items[k]:
                q = _noted(self.pf, q, o)
        self.pf0[self.n] = q

    def __dealloc__(self):
        PyMem_Free(self.pf)
        PyMem_Free(self.pf0)

    cdef void at(self, Py_ssize_t k) noexcept:
        """Prefetch what item k + _AHEAD reads (call as item k is checked)."""
        cdef Py_ssize_t j
        if k + _AHEAD < self.n:
            for j in range(self.pf0[k + _AHEAD], self.pf0[k + _AHEAD + 1]):
                _prefetch(self.pf[j])
