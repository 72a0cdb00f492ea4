/* C++ allocations for the recorder test (record.sh): every form of operator
 * new and delete with sizes the test looks for in the trace. After a new that
 * throws std::bad_alloc through the recorder's wrapper, the next new must still
 * be recorded (the wrapper clears its re-entry flag while the exception
 * unwinds). Output goes through write(2) only.
 */
#include <cstdlib>
#include <cstring>
#include <new>
#include <unistd.h>

static void fail(const char *what) {
    (void)!write(2, what, std::strlen(what));
    std::exit(1);
}

/* Keeps the compiler from removing a new/delete pair. */
int *volatile sink;

int main() {
    char *plain = new char[12345];
    void *single = ::operator new(2345);
    void *aligned = ::operator new(23456, std::align_val_t(256));
    char *quiet = new (std::nothrow) char[3456];
    if (!quiet || (reinterpret_cast<unsigned long>(aligned) & 255)) fail("new\n");
    plain[0] = quiet[0] = 1;
    delete[] plain;
    ::operator delete(single, 2345);
    ::operator delete(aligned, std::align_val_t(256));
    delete[] quiet;

    volatile std::size_t huge = std::size_t(1) << 62;
    try {
        void *never = ::operator new(huge);
        ::operator delete(never);
        fail("operator new of 2^62 bytes succeeded\n");
    } catch (const std::bad_alloc &) {
    }
    int *after = new int[1000]; /* 4000 bytes */
    sink = after;
    delete[] after;
    return 0;
}
