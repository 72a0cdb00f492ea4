# pow2 and pow2-partitioned: unit tests linked with each design's static
# library (so the hidden dump and check functions are reachable), one ctest
# test per case, each in its own process. The generic tests (api, stress,
# misuse, fuzz, programs) run for both designs automatically.
set(_pow2_cases split realloc mremap giveback dump osfail gap misuse lazy lazyflush trim)
# Cases whose expectations follow the merge policy run again with eager
# merging (the seed's policy, TSALLOC_POW2_LAZY=0).
set(_pow2_eager_cases split realloc dump misuse trim)
foreach(v pow2 pow2-partitioned)
  string(REPLACE "-" "_" _id ${v})
  foreach(exe unit threads)
    set(_srcs ${CMAKE_CURRENT_LIST_DIR}/pow2_${exe}.c)
    if(exe STREQUAL "unit") # the cases by theme: pow2_unit_*.c
      list(APPEND _srcs ${CMAKE_CURRENT_LIST_DIR}/pow2_unit_blocks.c
                        ${CMAKE_CURRENT_LIST_DIR}/pow2_unit_dump.c
                        ${CMAKE_CURRENT_LIST_DIR}/pow2_unit_lazy.c)
    endif()
    add_executable(${_id}_${exe} ${_srcs})
    target_include_directories(${_id}_${exe} PRIVATE ${TS_TEST_SUPPORT}
      ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${_id}_${exe} PRIVATE tsalloc-${v}-static Threads::Threads)
    if(v STREQUAL "pow2-partitioned")
      target_compile_definitions(${_id}_${exe} PRIVATE POW2_PARTITIONED=1)
    endif()
  endforeach()
  foreach(c ${_pow2_cases})
    add_test(NAME "pow2_unit_${c}[${v}]" COMMAND ${_id}_unit ${c})
    set_tests_properties("pow2_unit_${c}[${v}]" PROPERTIES TIMEOUT 60
      ENVIRONMENT "TSALLOC_POW2_PARTITIONS=3")
  endforeach()
  foreach(c ${_pow2_eager_cases})
    add_test(NAME "pow2_unit_${c}_eager[${v}]" COMMAND ${_id}_unit ${c})
    set_tests_properties("pow2_unit_${c}_eager[${v}]" PROPERTIES TIMEOUT 60
      ENVIRONMENT "TSALLOC_POW2_PARTITIONS=3;TSALLOC_POW2_LAZY=0")
  endforeach()
  add_test(NAME "pow2_threads_stress[${v}]" COMMAND ${_id}_threads stress 8 12000)
  add_test(NAME "pow2_threads_owner[${v}]" COMMAND ${_id}_threads owner)
  set_tests_properties("pow2_threads_stress[${v}]" "pow2_threads_owner[${v}]" PROPERTIES
    TIMEOUT 90 ENVIRONMENT "TSALLOC_POW2_PARTITIONS=3;TSALLOC_POW2_GIVE_BACK=256M")
endforeach()

# Regression tests, with sbrk refused so chunks come from mmap.
add_executable(pow2_regress ${CMAKE_CURRENT_LIST_DIR}/pow2_regress.c)
target_include_directories(pow2_regress PRIVATE ${TS_TEST_SUPPORT})
target_link_libraries(pow2_regress PRIVATE ${CMAKE_DL_LIBS})
ts_preload_test(pow2_regress pow2_regress DESIGNS pow2 pow2-partitioned
                ENV TSALLOC_TEST_OS_FAIL=sbrk:0:-1)
