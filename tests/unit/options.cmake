# The option table of every design (src/base/option_list.h): its entries and
# reader, the core under out-of-range values (core_api asserts the defaults,
# so they must stay), and docs/options.md against the table.
ts_test(options_table SOURCES ${CMAKE_CURRENT_LIST_DIR}/options_table.c
        $<TARGET_OBJECTS:ts_platform>)
if(TARGET core_api)
  add_test(NAME core_api_out_of_range COMMAND core_api)
  set_tests_properties(core_api_out_of_range PROPERTIES TIMEOUT 60 ENVIRONMENT
    "TSALLOC_PURGE_DELAY_MS=3600001;TSALLOC_STATS=3;TSALLOC_PURGE_THREAD=2;TSALLOC_RESCUE=x")
endif()
add_test(NAME options_doc COMMAND tsalloc-options --check-doc ${PROJECT_SOURCE_DIR}/docs/options.md)
