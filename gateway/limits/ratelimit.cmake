# Per-tenant rate limiter (GCRA + concurrency cap + CPU budget): a
# self-contained module, include()d from gateway/CMakeLists.txt.
add_library(moat_ratelimit STATIC ${CMAKE_CURRENT_LIST_DIR}/ratelimit.c)
target_include_directories(moat_ratelimit PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(moat_ratelimit PUBLIC Threads::Threads)
# Its tests are tests/unit/test_ratelimit.c (ctest unit_gateway_ratelimit).

# The Redis backend (ratelimit_redis.c) and hiredis' h2o evloop adapter
# (store/redis_h2o.c): shared limits for several gateways.  Its tests are
# tests/unit/test_ratelimit_redis.c and tests/e2e/test_redis_limits.py.
# store/redis_client.c is the one asynchronous Redis client the limiter and
# the submissions queue share.
add_library(moat_ratelimit_redis STATIC ${CMAKE_CURRENT_LIST_DIR}/ratelimit_redis.c ${CMAKE_CURRENT_LIST_DIR}/../store/redis_h2o.c
    ${CMAKE_CURRENT_LIST_DIR}/../store/redis_client.c)
target_include_directories(moat_ratelimit_redis PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_compile_definitions(moat_ratelimit_redis PUBLIC H2O_USE_LIBUV=0)
target_link_libraries(moat_ratelimit_redis PUBLIC moat_ratelimit moat_common PkgConfig::HIREDIS PkgConfig::H2O PkgConfig::SSL Threads::Threads)
