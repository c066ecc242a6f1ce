# Install rules, the CMake package (find_package(collective) -> collective::collective) and the
# pkg-config file.
include(CMakePackageConfigHelpers)

install(TARGETS collective collective_static EXPORT collectiveTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/collective DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT collectiveTargets NAMESPACE collective::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/collective)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/collectiveConfig.cmake.in
  ${PROJECT_BINARY_DIR}/collectiveConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/collective)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/collectiveConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/collectiveConfig.cmake ${PROJECT_BINARY_DIR}/collectiveConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/collective)

# The .pc file finds the prefix relative to itself, so an installed tree can be moved.
file(RELATIVE_PATH COLL_PC_PREFIX_FROM_PCDIR "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/$" "" COLL_PC_PREFIX_FROM_PCDIR "${COLL_PC_PREFIX_FROM_PCDIR}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/collective.pc.in ${PROJECT_BINARY_DIR}/collective.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/collective.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The launcher and the first-stop tool go beside the libraries: the README launches jobs with
# collrun, and collinfo lists this build's knobs and capabilities; collsim simulates a collective
# on a cluster fabric.
install(TARGETS collrun collinfo RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET collsim)
  install(TARGETS collsim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
