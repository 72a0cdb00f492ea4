/* A C program, without libstdc++, that dlopens the C++ plugin cxx_plugin.so
 * (argv[1]) with RTLD_LOCAL or RTLD_GLOBAL (argv[2]) and runs its
 * out-of-memory cases. Under LD_PRELOAD the operator new the plugin calls is
 * tsalloc's, bound before any C++ runtime was loaded. */
#include <link.h>
#include <string.h>

#include "check.h"

static int count_cxx_runtimes(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    if (info->dlpi_name &&
        (strstr(info->dlpi_name, "libstdc++") || strstr(info->dlpi_name, "libc++")))
        ++*(int *)arg;
    return 0;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    ts_require_preloaded();
    if (ts_sanitizer_loaded()) {
        printf("cxx_plugin_host: the sanitizer's runtime brought libstdc++: skipped\n");
        return 77;
    }
    /* The point of the test: no C++ runtime until the plugin brings one. */
    int runtimes = 0;
    dl_iterate_phdr(count_cxx_runtimes, &runtimes);
    CHECK(runtimes == 0);
    int scope = strcmp(argv[2], "global") == 0 ? RTLD_GLOBAL : RTLD_LOCAL;
    void *plugin = dlopen(argv[1], RTLD_NOW | scope);
    CHECK_MSG(plugin != NULL, "dlopen: %s", dlerror());
    int (*run)(void) = (int (*)(void))dlsym(plugin, "cxx_plugin_run");
    CHECK(run != NULL);
    CHECK(run() == 0);
    printf("cxx_plugin_host(%s): ok\n", argv[2]);
    return 0;
}
