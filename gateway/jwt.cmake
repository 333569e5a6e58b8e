# JWT verification module (jwt_auth.[ch]); include()d from gateway/CMakeLists.txt.
#
#   moat_jwt                      static library: pinned-algorithm JWT verification
#   test_jwt_auth                 cmocka tests (tests/unit/test_jwt_auth.c, registered in
#                                 tests/CMakeLists.txt) -> ctest unit_gateway_jwt
#   test_jwt_fuzz_replay          fuzz target replayed over generated inputs
#                                                       -> ctest unit_gateway_jwt_fuzz_replay
#   fuzz_jwt_auth                 libFuzzer target, only with -DMOAT_FUZZ=ON and clang:
#       CC=clang cmake -S . -B build-fuzz -DMOAT_FUZZ=ON -DMOAT_SANITIZE=ON
#       cmake --build build-fuzz --target fuzz_jwt_auth test_jwt_fuzz_replay
#       build-fuzz/gateway/test_jwt_fuzz_replay --write-seeds corpus-jwt
#       build-fuzz/gateway/fuzz_jwt_auth -max_total_time=60 corpus-jwt
#
# The tests and fuzz harnesses link with --wrap=jwt_decode so that every call
# into libjwt's decoder is counted and checked for a non-NULL, non-empty key (G3).

set(MOAT_JWT_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(moat_jwt STATIC ${MOAT_JWT_DIR}/jwt_auth.c)
target_include_directories(moat_jwt PUBLIC ${MOAT_JWT_DIR})
target_link_libraries(moat_jwt PUBLIC PkgConfig::JWT PkgConfig::SSL PkgConfig::JANSSON)

if(MOAT_TESTS)
    # The fuzz target's entry point driven by a plain main() over generated
    # inputs, so the harness is exercised by every test run, with any compiler.
    add_executable(test_jwt_fuzz_replay ${MOAT_JWT_DIR}/fuzz_jwt_replay.c)
    target_link_libraries(test_jwt_fuzz_replay PRIVATE moat_jwt)
    target_link_options(test_jwt_fuzz_replay PRIVATE -Wl,--wrap=jwt_decode)
    add_test(NAME unit_gateway_jwt_fuzz_replay COMMAND test_jwt_fuzz_replay)
endif()

if(MOAT_FUZZ)
    if(CMAKE_C_COMPILER_ID MATCHES "Clang")
        # A separately instrumented copy of the library so coverage reaches into it
        # without putting libFuzzer instrumentation into moat_jwt itself.
        add_library(moat_jwt_fuzzcov STATIC ${MOAT_JWT_DIR}/jwt_auth.c)
        target_include_directories(moat_jwt_fuzzcov PUBLIC ${MOAT_JWT_DIR})
        target_compile_options(moat_jwt_fuzzcov PRIVATE
            -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
        target_link_libraries(moat_jwt_fuzzcov PUBLIC PkgConfig::JWT PkgConfig::SSL PkgConfig::JANSSON)

        add_executable(fuzz_jwt_auth ${MOAT_JWT_DIR}/fuzz_jwt_auth.c)
        target_compile_options(fuzz_jwt_auth PRIVATE
            -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
        target_link_options(fuzz_jwt_auth PRIVATE -fsanitize=fuzzer,address,undefined -Wl,--wrap=jwt_decode)
        target_link_libraries(fuzz_jwt_auth PRIVATE moat_jwt_fuzzcov)
    else()
        message(WARNING "MOAT_FUZZ needs clang (CC=clang); fuzz_jwt_auth not built")
    endif()
endif()
