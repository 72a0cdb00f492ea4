# What `make install` and `make deb` ship besides the libraries (installed
# by ts_install_library): the headers, the pkg-config files, the CMake
# package (tsallocConfig.cmake, its version file, the exported targets), the
# man pages and the docs. The version is project(VERSION) in CMakeLists.txt.
include(CMakePackageConfigHelpers)

install(FILES include/tsalloc.h include/my_malloc.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/tsalloc DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(TS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tsalloc)
install(EXPORT tsallocTargets NAMESPACE tsalloc:: DESTINATION ${TS_CMAKE_DIR})
configure_package_config_file(cmake/tsallocConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/tsallocConfig.cmake INSTALL_DESTINATION ${TS_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may change the API, so only 0.6.* satisfies 0.6.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/tsallocConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/tsallocConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/tsallocConfigVersion.cmake
        DESTINATION ${TS_CMAKE_DIR})

install(FILES docs/man/tsalloc.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES docs/man/tsalloc.3 DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)
install(FILES README.md CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md")

# make deb: a Debian package of everything `make install` installs, under /usr.
set(CPACK_PACKAGE_NAME tsalloc)
set(CPACK_PACKAGE_VENDOR tsalloc)
set(CPACK_PACKAGE_CONTACT "tsalloc maintainers <tsalloc@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "thread-safe memory allocator, its seed designs and the tsalloc launcher")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6")
# tsalloc compare runs the tsbench package with python3.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/package)
include(CPack)
