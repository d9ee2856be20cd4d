/*
 * The published C API's table (capi.c), for the extension that puts it in
 * its capsule (fastopt/_capi.pxi). Private: consumers include the
 * generated fastopt/include/fastopt/fastopt_capi.h instead.
 */
#ifndef FASTOPT_CAPI_PRIVATE_H
#define FASTOPT_CAPI_PRIVATE_H

/* The static table (a const fastopt_capi) and the capsule's name. */
const void *fo_capi_table(void);
const char *fo_capi_name(void);

#endif
