/* A C program that dlopens the C++ plugin argv[1] RTLD_LOCAL and runs it. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    void *plugin = argc == 2 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    int (*run)(void) = plugin ? (int (*)(void))dlsym(plugin, "record_plugin_run") : NULL;
    if (!run) {
        fprintf(stderr, "record_plugin_host: cannot load %s\n", argc == 2 ? argv[1] : "?");
        return 2;
    }
    return run();
}
