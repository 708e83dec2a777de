# What `cmake --install` puts under the prefix, for C++ projects that embed the client:
#   include/sluice/{core,protocol,net,cluster,client,rules}/*.h   the public headers
#   lib/libsluice_{core,protocol,net,cluster,client,rules}.a      the libraries
#   lib/cmake/Sluice/                                            find_package(Sluice 0.2)
#   lib/pkgconfig/sluice-client.pc                               pkg-config --libs sluice-client
# Targets for users: Sluice::client (the client library and what it needs) and Sluice::rules
# (the YAML rules library). The daemon, the gateway and the tools are installed as programs.
include(CMakePackageConfigHelpers)

set(sluice_public_libraries sluice_core sluice_protocol sluice_net sluice_cluster sluice_client
                            sluice_rules)
foreach(lib ${sluice_public_libraries})
  string(REPLACE "sluice_" "" short ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${short})
  add_library(Sluice::${short} ALIAS ${lib})
endforeach()

install(TARGETS ${sluice_public_libraries}
        EXPORT SluiceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice)
foreach(dir core protocol net cluster client rules)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice/${dir}
          COMPONENT dev
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/generated/core/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice/core COMPONENT dev)

set(sluice_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Sluice)
install(EXPORT SluiceTargets NAMESPACE Sluice:: DESTINATION ${sluice_cmake_dir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/SluiceConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/SluiceConfig.cmake
                              INSTALL_DESTINATION ${sluice_cmake_dir})
# 0.x: a minor version may break the API, so 0.2 finds 0.2.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/SluiceConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/SluiceConfig.cmake ${PROJECT_BINARY_DIR}/SluiceConfigVersion.cmake
        DESTINATION ${sluice_cmake_dir} COMPONENT dev)

file(RELATIVE_PATH sluice_pc_to_prefix ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
configure_file(${PROJECT_SOURCE_DIR}/cmake/sluice-client.pc.in
               ${PROJECT_BINARY_DIR}/sluice-client.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/sluice-client.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
