# The multi-threaded stress test, for every design (and glibc as a baseline).
add_executable(generic_stress ${CMAKE_CURRENT_LIST_DIR}/generic_stress.c)
target_include_directories(generic_stress PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(generic_stress PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_test(NAME "generic_stress[glibc]" COMMAND generic_stress 4 3 10000)
set_tests_properties("generic_stress[glibc]" PROPERTIES TIMEOUT 120)
ts_preload_test(generic_stress generic_stress ARGS 4 4 15000 TIMEOUT 240)
ts_preload_test(generic_stress_8t generic_stress ARGS 8 3 6000 1048576 TIMEOUT 240)

# fork while other threads allocate, for every design.
add_executable(generic_fork ${CMAKE_CURRENT_LIST_DIR}/generic_fork.c)
target_include_directories(generic_fork PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(generic_fork PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_test(NAME "generic_fork[glibc]" COMMAND generic_fork)
set_tests_properties("generic_fork[glibc]" PROPERTIES TIMEOUT 120)
ts_preload_test(generic_fork generic_fork TIMEOUT 120)

# The seed designs with each kind of lock TSALLOC_LOCK can choose (their own
# kind is covered above): the stress test, and fork (the locks' reset in the
# child) with the two kinds that are not pthread mutexes.
set(TS_SEED_LOCK_DESIGNS bestfit bestfit-tls pow2 pow2-partitioned)
foreach(kind futex pthread spin)
  ts_preload_test("generic_stress_lock=${kind}" generic_stress ARGS 4 3 6000 TIMEOUT 240
                  DESIGNS ${TS_SEED_LOCK_DESIGNS} ENV TSALLOC_LOCK=${kind})
endforeach()
foreach(kind futex spin)
  ts_preload_test("generic_fork_lock=${kind}" generic_fork TIMEOUT 120
                  DESIGNS ${TS_SEED_LOCK_DESIGNS} ENV TSALLOC_LOCK=${kind})
endforeach()
