# Misuse aborts with an exact message, for every design.
add_executable(generic_misuse ${CMAKE_CURRENT_LIST_DIR}/generic_misuse.c)
target_include_directories(generic_misuse PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(generic_misuse PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
ts_preload_test(generic_misuse generic_misuse)
