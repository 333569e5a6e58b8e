add_executable(moat-audit ${CMAKE_CURRENT_LIST_DIR}/moat_audit_main.c)
target_link_libraries(moat-audit PRIVATE moat_audit)
