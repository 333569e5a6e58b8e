# JWT verification module (jwt_auth.[ch]); include()d from gateway/CMakeLists.txt.
#
#   moat_jwt    static library: pinned-algorithm JWT verification
#
# Its tests are registered in tests/CMakeLists.txt:
#   tests/unit/test_jwt_auth.c   cmocka tests             -> ctest unit_gateway_jwt
#   tests/fuzz/fuzz_jwt_auth.c   fuzz target, replayed    -> ctest unit_fuzz_jwt_replay
#                                (libFuzzer build fuzz_jwt_auth with -DMOAT_FUZZ=ON)
# Both link with --wrap=jwt_decode so that every call into libjwt's decoder is
# counted and checked for a non-NULL, non-empty key (G3).

set(MOAT_JWT_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(moat_jwt STATIC ${MOAT_JWT_DIR}/jwt_auth.c)
target_include_directories(moat_jwt PUBLIC ${MOAT_JWT_DIR}/..)
target_link_libraries(moat_jwt PUBLIC PkgConfig::JWT PkgConfig::SSL PkgConfig::JANSSON)
