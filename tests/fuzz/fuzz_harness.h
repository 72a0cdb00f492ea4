/* The fuzz harness (fuzz_harness.c): runs an input's program of
 * malloc-family operations on an allocator and checks it against the model
 * of the API; fz_differential runs it on the design and on the reference
 * (the process's malloc) and aborts where their visible outcomes differ. */
#ifndef TS_FUZZ_HARNESS_H
#define TS_FUZZ_HARNESS_H

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_api.h"

/* The process's own malloc family (glibc, or ASan's in a sanitized build). */
extern const fz_api_t fz_libc;

/* Runs the program; aborts with a message on a broken promise. Returns the
 * trace of outcomes, one character an operation (valid until the next run). */
const char *fz_run(const fz_api_t *api, const uint8_t *data, size_t len);

void fz_differential(const fz_api_t *design, const fz_api_t *reference, const uint8_t *data,
                     size_t len);

#endif
