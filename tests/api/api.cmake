# The override shim, for every design: every malloc entry point and C++ form.
# The [glibc] runs prove that what the tests expect is glibc's behaviour.
add_executable(override_api ${CMAKE_CURRENT_LIST_DIR}/override_api.c)
target_include_directories(override_api PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(override_api PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_test(NAME "override_api[glibc]" COMMAND override_api)
ts_preload_test(override_api override_api)
# The same checks with each design's static library linked into the program
# (a load-time ifunc there would stop the program from starting). Exported
# symbols: the test looks the library's names up with dlsym; -u takes the C++
# operators' member out of the archive, which this C program does not call.
add_library(override_api_obj OBJECT ${CMAKE_CURRENT_LIST_DIR}/override_api.c)
target_include_directories(override_api_obj PRIVATE ${TS_TEST_SUPPORT} ${PROJECT_SOURCE_DIR}/src)
foreach(d ${TS_ALL_DESIGNS})
  add_executable(override_api_static_${d} $<TARGET_OBJECTS:override_api_obj>)
  target_link_libraries(override_api_static_${d} PRIVATE tsalloc-${d}-static ${CMAKE_DL_LIBS})
  target_link_options(override_api_static_${d} PRIVATE "LINKER:-u,_Znwm")
  set_target_properties(override_api_static_${d} PROPERTIES ENABLE_EXPORTS ON)
  add_test(NAME "override_api_static[${d}]" COMMAND override_api_static_${d})
  set_tests_properties("override_api_static[${d}]" PROPERTIES TIMEOUT 120
                       ENVIRONMENT "TSALLOC_EXPECT_DESIGN=${d}")
endforeach()

add_executable(cxx_new_delete ${CMAKE_CURRENT_LIST_DIR}/cxx_new_delete.cpp)
target_compile_options(cxx_new_delete PRIVATE -fno-builtin)
target_include_directories(cxx_new_delete PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(cxx_new_delete PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_test(NAME "cxx_new_delete[glibc]" COMMAND cxx_new_delete)
ts_preload_test(cxx_new_delete cxx_new_delete)

# Every library loaded with dlopen (RTLD_LOCAL) into a running program.
add_executable(dlopen_designs ${CMAKE_CURRENT_LIST_DIR}/dlopen_designs.c)
target_include_directories(dlopen_designs PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(dlopen_designs PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
set(_ts_dlopen_libs "")
foreach(d ${TS_ALL_DESIGNS})
  list(APPEND _ts_dlopen_libs $<TARGET_FILE:tsalloc-${d}>)
endforeach()
if(_ts_dlopen_libs)
  add_test(NAME dlopen_designs COMMAND dlopen_designs ${_ts_dlopen_libs})
  set_tests_properties(dlopen_designs PROPERTIES TIMEOUT 120)
endif()

# A C program that dlopens a C++ plugin: libstdc++ is loaded after tsalloc,
# RTLD_LOCAL (reachable only through the plugin) or RTLD_GLOBAL. The plugin
# runs the out-of-memory cases of cxx_oom_cases.h.
add_library(cxx_plugin MODULE ${CMAKE_CURRENT_LIST_DIR}/cxx_plugin.cpp)
target_include_directories(cxx_plugin PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(cxx_plugin PRIVATE ${CMAKE_DL_LIBS})
# Not in build/lib, where every .so is taken for an allocator.
set_target_properties(cxx_plugin PROPERTIES PREFIX "" LIBRARY_OUTPUT_DIRECTORY
                                            ${CMAKE_CURRENT_BINARY_DIR})
add_executable(cxx_plugin_host ${CMAKE_CURRENT_LIST_DIR}/cxx_plugin_host.c)
target_include_directories(cxx_plugin_host PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(cxx_plugin_host PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(cxx_plugin_host cxx_plugin)
foreach(scope local global)
  add_test(NAME "cxx_plugin_${scope}[glibc]"
           COMMAND cxx_plugin_host $<TARGET_FILE:cxx_plugin> ${scope})
  set_tests_properties("cxx_plugin_${scope}[glibc]" PROPERTIES TIMEOUT 30)
  ts_preload_test(cxx_plugin_${scope} cxx_plugin_host ARGS $<TARGET_FILE:cxx_plugin> ${scope}
                  TIMEOUT 30)
  # Skipped in a sanitizer build, whose runtime loads libstdc++ first.
  foreach(d glibc ${TS_ALL_DESIGNS})
    set_tests_properties("cxx_plugin_${scope}[${d}]" PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endforeach()

# The same C++ cases with clang's runtime, libc++, instead of libstdc++: a
# libc++ program, and a libc++ plugin that a C program dlopens. Only where
# clang++ can build against libc++ (Debian: apt-get install clang libc++-dev
# libc++abi-dev); the cases assert libstdc++'s answers, which the shim gives
# under either runtime (libc++'s own aligned new calls the handler for a
# non-power-of-two alignment, so there is no [glibc] run here).
find_program(TS_CLANGXX NAMES clang++)
set(_ts_libcxx OFF)
if(TS_CLANGXX)
  set(_probe ${CMAKE_CURRENT_BINARY_DIR}/libcxx_probe.cpp)
  file(WRITE ${_probe} "#include <new>\nint main() { return std::get_new_handler() != nullptr; }\n")
  execute_process(COMMAND ${TS_CLANGXX} -stdlib=libc++ ${_probe} -o ${_probe}.out
                  RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
  if(_rc EQUAL 0)
    set(_ts_libcxx ON)
  endif()
endif()
if(_ts_libcxx)
  set(_libcxx_flags -stdlib=libc++ -std=c++17 -O1 -fno-builtin -I${TS_TEST_SUPPORT}
                    -I${CMAKE_CURRENT_LIST_DIR})
  set(_libcxx_exe ${CMAKE_BINARY_DIR}/bin/cxx_new_delete_libcxx)
  set(_libcxx_plugin ${CMAKE_CURRENT_BINARY_DIR}/cxx_plugin_libcxx.so)
  add_custom_command(OUTPUT ${_libcxx_exe}
    COMMAND ${TS_CLANGXX} ${_libcxx_flags} -o ${_libcxx_exe}
            ${CMAKE_CURRENT_LIST_DIR}/cxx_new_delete.cpp -pthread -ldl
    DEPENDS ${CMAKE_CURRENT_LIST_DIR}/cxx_new_delete.cpp ${CMAKE_CURRENT_LIST_DIR}/cxx_oom_cases.h
            ${TS_TEST_SUPPORT}/check.h
    COMMENT "cxx_new_delete with libc++")
  add_custom_command(OUTPUT ${_libcxx_plugin}
    COMMAND ${TS_CLANGXX} ${_libcxx_flags} -fPIC -shared -o ${_libcxx_plugin}
            ${CMAKE_CURRENT_LIST_DIR}/cxx_plugin.cpp -ldl
    DEPENDS ${CMAKE_CURRENT_LIST_DIR}/cxx_plugin.cpp ${CMAKE_CURRENT_LIST_DIR}/cxx_oom_cases.h
            ${TS_TEST_SUPPORT}/check.h
    COMMENT "cxx_plugin with libc++")
  add_custom_target(cxx_libcxx ALL DEPENDS ${_libcxx_exe} ${_libcxx_plugin})
  ts_preload_test(cxx_new_delete_libcxx ${_libcxx_exe})
  foreach(scope local global)
    ts_preload_test(cxx_plugin_libcxx_${scope} cxx_plugin_host ARGS ${_libcxx_plugin} ${scope}
                    TIMEOUT 30)
  endforeach()
else()
  message(STATUS "clang++ with libc++ not found: the libc++ tests are skipped")
endif()
