# Per-tenant rate limiter (GCRA + concurrency cap + CPU budget): a
# self-contained module, include()d from gateway/CMakeLists.txt.
add_library(moat_ratelimit STATIC ${CMAKE_CURRENT_LIST_DIR}/ratelimit.c)
target_include_directories(moat_ratelimit PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(moat_ratelimit PUBLIC Threads::Threads)

if(MOAT_TESTS)
    add_executable(test_ratelimit ${CMAKE_CURRENT_LIST_DIR}/test_ratelimit.c)
    target_link_libraries(test_ratelimit PRIVATE moat_ratelimit PkgConfig::CMOCKA)
    add_test(NAME unit_gateway_ratelimit COMMAND test_ratelimit)
    set_tests_properties(unit_gateway_ratelimit PROPERTIES TIMEOUT 120)
endif()
