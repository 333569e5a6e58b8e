add_executable(moat-audit ${CMAKE_CURRENT_LIST_DIR}/moat_audit_main.c)
target_link_libraries(moat-audit PRIVATE moat_audit)
install(TARGETS moat-audit RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

if(MOAT_TESTS)
    # The writer's core and the verifier: tests/unit/test_audit_log.c
    # (ctest unit_audit_log), registered in tests/CMakeLists.txt.

    # The writer process and the moat-audit CLI, black box: kill -9 mid-stream,
    # hostile strings, group commit with 8 clients, disk full on a small
    # tmpfs, packets, query/show/stats/export.  Root only (tmpfs mounts).
    find_program(MOAT_AUDIT_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
    add_test(NAME e2e_audit
             COMMAND ${MOAT_AUDIT_PYTHON3} -m unittest -v test_audit
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/e2e)
    set_tests_properties(e2e_audit PROPERTIES
        ENVIRONMENT "MOAT_BUILD_DIR=${CMAKE_BINARY_DIR};PYTHONDONTWRITEBYTECODE=1"
        RUN_SERIAL TRUE TIMEOUT 900)
endif()
