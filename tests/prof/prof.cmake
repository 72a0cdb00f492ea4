# The heap profiler of libtsalloc (src/core/prof.c, docs/profiling.md):
# prof_program's known allocations against its profiles and leak report
# (check_prof.py), and the sampler's arithmetic (prof_sampler: unbiased
# estimates over many seeded runs). prof_program keeps its frame pointers and
# its calls (no sibling calls), and exports its symbols for dladdr.
if(TARGET tsalloc-tsalloc)
  add_executable(prof_program ${CMAKE_CURRENT_LIST_DIR}/prof_program.c)
  target_compile_options(prof_program PRIVATE -fno-omit-frame-pointer
                                              -fno-optimize-sibling-calls)
  set_target_properties(prof_program PROPERTIES ENABLE_EXPORTS ON)
  target_link_libraries(prof_program PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  add_library(prof_plugin MODULE ${CMAKE_CURRENT_LIST_DIR}/prof_plugin.c)
  set_target_properties(prof_plugin PROPERTIES PREFIX "" LIBRARY_OUTPUT_DIRECTORY
                                                           ${CMAKE_BINARY_DIR}/tests)
  add_dependencies(prof_program prof_plugin)
  # prof_unwind: built without frame pointers, for the unwinder (unwind.c).
  add_executable(prof_unwind ${CMAKE_CURRENT_LIST_DIR}/prof_unwind.c)
  target_compile_options(prof_unwind PRIVATE -O2 -fomit-frame-pointer)
  target_link_libraries(prof_unwind PRIVATE Threads::Threads)
  add_executable(prof_cxx ${CMAKE_CURRENT_LIST_DIR}/prof_cxx.cpp)
  target_compile_options(prof_cxx PRIVATE -fno-omit-frame-pointer -fno-optimize-sibling-calls)
  set_target_properties(prof_cxx PROPERTIES ENABLE_EXPORTS ON)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    foreach(case shares exact exact_fp peak leaks pprof fork twins dlopen altstack nomap signal dump sigdump active launcher base collapsed cxx reuse unwind zero prefixed google_pprof)
      set(program $<TARGET_FILE:prof_program>)
      if(case STREQUAL "cxx")
        set(program $<TARGET_FILE:prof_cxx>)
      elseif(case STREQUAL "unwind")
        set(program $<TARGET_FILE:prof_unwind>)
      endif()
      add_test(NAME prof_${case}
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_prof.py ${case}
                       ${CMAKE_BINARY_DIR} ${program} ${PROJECT_SOURCE_DIR}/tools)
      set_tests_properties(prof_${case} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
    endforeach()
  endif()
  ts_test(prof_sampler SOURCES ${CMAKE_CURRENT_LIST_DIR}/prof_sampler.c
          LIBS tsalloc-tsalloc-static)
endif()
