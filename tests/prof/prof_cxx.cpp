/* operator new under the heap profiler (check_prof.py, case cxx): cxx_kept
 * keeps 100 arrays of 1000 bytes and 50 objects aligned to 64 (the aligned
 * form); everything else is deleted. Prints the truth as `key value`. */
#include <cstdio>
#include <new>
#include <unistd.h>

struct alignas(64) aligned_obj {
    char bytes[192];
};

static char *arrays[100];
static aligned_obj *objs[50];

__attribute__((noinline)) void cxx_kept() {
    for (auto &a : arrays) a = new char[1000];
    for (auto &o : objs) o = new aligned_obj;
}

__attribute__((noinline)) void cxx_freed() {
    for (int i = 0; i < 1000; i++) {
        int *volatile p = new int(i); /* volatile: the pair is not elided */
        delete p;
    }
}

int main() {
    cxx_kept();
    cxx_freed();
    char line[64];
    int n = std::snprintf(line, sizeof line, "cxx_kept %zu\n",
                          sizeof arrays / sizeof *arrays * 1000 + 50 * sizeof(aligned_obj));
    return write(1, line, (size_t)n) == n ? 0 : 1;
}
