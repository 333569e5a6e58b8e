# Per-tenant rate limiter (GCRA + concurrency cap + CPU budget): a
# self-contained module, include()d from gateway/CMakeLists.txt.
add_library(moat_ratelimit STATIC ${CMAKE_CURRENT_LIST_DIR}/ratelimit.c)
target_include_directories(moat_ratelimit PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(moat_ratelimit PUBLIC Threads::Threads)
# Its tests are tests/unit/test_ratelimit.c (ctest unit_gateway_ratelimit).
