/* The libFuzzer target of one design (make fuzz): the design's objects are
 * linked in, built with coverage instrumentation, and each input runs on the
 * design and on the process's malloc (ASan's here) through fuzz_harness.c. */
#include "fuzz_harness.h"

/* ASan's malloc answers NULL (errno ENOMEM) to an impossible request, as
 * glibc does, instead of reporting it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
    fz_differential(&fz_design, &fz_libc, data, len);
    return 0;
}
