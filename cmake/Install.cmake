# Installs headers, the library and a CMake package, so that an outside project can
# find_package(mantissa) and link mantissa::mantissa (examples/consumer proves it in the tests).
include(CMakePackageConfigHelpers)

install(TARGETS mantissa EXPORT mantissaTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS mantissa_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/mantissa DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mantissaTargets NAMESPACE mantissa::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mantissa)

configure_package_config_file(cmake/mantissaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mantissaConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mantissa)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mantissaConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mantissaConfig.cmake ${PROJECT_BINARY_DIR}/mantissaConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mantissa)
