// A C++ plugin that cxx_plugin_host (a C program) loads with dlopen, as
// Python loads a C++ extension: libstdc++ arrives with it, after tsalloc was
// bound, so operator new must find the new-handler and the bad_alloc throw
// at run time. Runs the shared out-of-memory cases from inside the plugin.
#include "cxx_oom_cases.h"

extern "C" __attribute__((visibility("default"))) int cxx_plugin_run(void) {
    oom_cases::run();
    // Ordinary use still works after all that.
    char *s = new char[1000];
    std::memset(s, 'x', 1000);
    delete[] s;
    return 0;
}
