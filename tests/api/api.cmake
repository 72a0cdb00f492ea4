# The override shim, for every design: every malloc entry point and C++ form.
# The [glibc] runs prove that what the tests expect is glibc's behaviour.
add_executable(override_api ${CMAKE_CURRENT_LIST_DIR}/override_api.c)
target_include_directories(override_api PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(override_api PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_test(NAME "override_api[glibc]" COMMAND override_api)
ts_preload_test(override_api override_api)

add_executable(cxx_new_delete ${CMAKE_CURRENT_LIST_DIR}/cxx_new_delete.cpp)
target_compile_options(cxx_new_delete PRIVATE -fno-builtin)
target_link_libraries(cxx_new_delete PRIVATE Threads::Threads)
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
