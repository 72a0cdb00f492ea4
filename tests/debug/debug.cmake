# Debugging support (docs/debugging.md).
#
# valgrind_memcheck[static] and valgrind_memcheck[<design>]: memcheck with
# tsalloc's malloc kept in place (--soname-synonyms=somalloc=nouserintercepts)
# reports planted leaks, reads after free, overruns and uninitialised reads,
# and nothing for a clean program: linked with libtsalloc.a, preloaded with
# each design, and with Valgrind's own malloc ([glibc], the reference).
find_program(TS_VALGRIND valgrind)
if(TS_VALGRIND AND TARGET tsalloc-tsalloc-static)
  add_executable(vg_program ${CMAKE_CURRENT_LIST_DIR}/vg_program.c)
  target_link_libraries(vg_program PRIVATE Threads::Threads)
  add_executable(vg_program_static ${CMAKE_CURRENT_LIST_DIR}/vg_program.c)
  target_link_libraries(vg_program_static PRIVATE tsalloc-tsalloc-static Threads::Threads)
  set(_vg_check ${CMAKE_CURRENT_LIST_DIR}/valgrind_memcheck.sh)
  add_test(NAME "valgrind_memcheck[static]"
           COMMAND sh ${_vg_check} ${TS_VALGRIND} $<TARGET_FILE:vg_program_static>)
  # The reference: Valgrind's own malloc reports the same.
  add_test(NAME "valgrind_memcheck[glibc]"
           COMMAND sh ${_vg_check} ${TS_VALGRIND} $<TARGET_FILE:vg_program>)
  set(_vg_tests "valgrind_memcheck[static]" "valgrind_memcheck[glibc]")
  foreach(d ${TS_ALL_DESIGNS})
    add_test(NAME "valgrind_memcheck[${d}]"
             COMMAND sh ${_vg_check} ${TS_VALGRIND} $<TARGET_FILE:vg_program>
                     $<TARGET_FILE:tsalloc-${d}>)
    list(APPEND _vg_tests "valgrind_memcheck[${d}]")
  endforeach()
  set_tests_properties(${_vg_tests} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
else()
  message(STATUS "valgrind not found: valgrind_memcheck tests skipped")
endif()

# ts_heap_check and ts_block_info; the checked build also catches the
# corruptions at its page transitions.
if(TARGET tsalloc-tsalloc-static)
  ts_test(heap_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_check.c
          LIBS tsalloc-tsalloc-static TIMEOUT 60)
endif()
if(TARGET tsalloc-checked-static)
  ts_test(heap_check_checked SOURCES ${CMAKE_CURRENT_LIST_DIR}/heap_check.c
          LIBS tsalloc-checked-static TIMEOUT 60)
  target_compile_definitions(heap_check_checked PRIVATE TS_CHECKED=1)
endif()
