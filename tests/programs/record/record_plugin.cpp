/* A C++ plugin for the recorder test (record.sh, part plugin): loaded
 * RTLD_LOCAL by a C program, so its libstdc++ is not in the global scope and
 * the recorder's operator new has no next definition to forward to. */
#include <new>

char *volatile sink; /* keeps the compiler from removing the new/delete pair */

extern "C" int record_plugin_run(void) {
    sink = new char[5432];
    sink[0] = 1;
    delete[] sink;
    void *aligned = ::operator new(6543, std::align_val_t(64));
    if (reinterpret_cast<unsigned long>(aligned) & 63) return 1;
    ::operator delete(aligned, std::align_val_t(64));
    return 0;
}
