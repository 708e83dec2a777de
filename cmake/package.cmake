# The programs, their systemd units and sample configs, and the Debian packages made from them
# with `cpack -G DEB` in the build directory (tools/check_packages.sh checks them):
#   sluice         /usr/bin/{sluiced,sluicectl,sluice-gateway,sluice-load},
#                  /usr/lib/systemd/system/{sluiced,sluice-gateway}.service,
#                  /etc/sluice/{sluiced.conf,gateway.conf,rules.yaml} (conffiles),
#                  /usr/share/doc/sluice/ (README, docs/*.md, each program's --help)
#   libsluice-dev  what cmake/install.cmake installs: headers, static libraries, CMake package
#                  and pkg-config file
# Versions come from project(). A plain `cmake --install` puts the same files under its prefix
# (the configs under /etc/sluice only for the /usr prefix; otherwise under PREFIX/etc/sluice).
set(sluice_programs sluiced sluicectl sluice-gateway sluice-load)
install(TARGETS ${sluice_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)

# The sample configs go to /etc/sluice when the prefix is /usr (the packages), else under
# PREFIX/etc/sluice: decided when installing, since cpack installs with its own prefix. Never
# over a file already there (an operator's edits stay).
set(sluice_etc_files ${PROJECT_SOURCE_DIR}/packaging/etc/sluiced.conf
                     ${PROJECT_SOURCE_DIR}/packaging/etc/gateway.conf
                     ${PROJECT_SOURCE_DIR}/examples/rules.yaml)
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
    set(sluice_etc \"/etc/sluice\")
  else()
    set(sluice_etc \"\${CMAKE_INSTALL_PREFIX}/etc/sluice\")
  endif()
  foreach(f ${sluice_etc_files})
    get_filename_component(name \${f} NAME)
    if(NOT EXISTS \"\$ENV{DESTDIR}\${sluice_etc}/\${name}\")
      file(INSTALL \${f} DESTINATION \"\${sluice_etc}\")  # DESTDIR: file() adds it
    endif()
  endforeach()" COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/systemd/sluiced.service
              ${PROJECT_SOURCE_DIR}/packaging/systemd/sluice-gateway.service
        DESTINATION lib/systemd/system COMPONENT runtime)

# Each program's --help as a text file beside the docs.
set(sluice_help_files)
foreach(program ${sluice_programs})
  set(help ${PROJECT_BINARY_DIR}/doc/${program}.help.txt)
  add_custom_command(OUTPUT ${help}
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/doc
                     COMMAND sh -c "\"$1\" --help > \"$2\"" sh $<TARGET_FILE:${program}> ${help}
                     DEPENDS ${program}
                     COMMENT "${program} --help"
                     VERBATIM)
  list(APPEND sluice_help_files ${help})
endforeach()
add_custom_target(sluice_help_texts ALL DEPENDS ${sluice_help_files})
file(GLOB sluice_docs ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${sluice_docs} ${sluice_help_files}
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_VENDOR "Sluice")
set(CPACK_PACKAGE_CONTACT "Sluice developers <sluice@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Distributed rate limiter")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Debug information stays in the build; the packages carry stripped programs and libraries.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME sluice)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION net)
# The shared libraries the programs link (grpc, protobuf, yaml-cpp, fmt, ...), found by
# dpkg-shlibdeps.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
# The sample configs are conffiles: an upgrade keeps an operator's edits.
set(sluice_conffiles ${PROJECT_BINARY_DIR}/packaging/conffiles)
file(WRITE ${sluice_conffiles} "")
foreach(f ${sluice_etc_files})
  get_filename_component(name ${f} NAME)
  file(APPEND ${sluice_conffiles} "/etc/sluice/${name}\n")
endforeach()
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${sluice_conffiles})
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "Sluice, a distributed rate limiter: sluiced (the counter daemon), sluice-gateway (HTTP and Envoy's Rate Limit Service), sluicectl, sluice-load; systemd units")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libsluice-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# What find_package(Sluice) and the headers need.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libfmt-dev, libboost-dev (>= 1.74), libyaml-cpp-dev, libxxhash-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "Sluice's C++ client and rules libraries: headers, static libraries, CMake package (find_package(Sluice)) and pkg-config file (sluice-client)")
include(CPack)
