# `make package` (cpack -G DEB in the release build): one Debian package with the binary, the
# library, its headers, CMake package and pkg-config file, the man page, the completions and the
# systemd unit. Runtime dependencies come from dpkg-shlibdeps.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME runnel)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "durable event-stream engine: server, client and library")
set(CPACK_PACKAGE_DESCRIPTION
  "runnel stores named, append-only streams durably and serves them over the Durable Streams HTTP protocol, with consumer groups, partitioned channels and tokens. The package holds the runnel binary (server and client), a hardened systemd unit, the man page, bash and zsh completions, and the embeddable static library with its headers, CMake package and pkg-config file.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
# Installs with DESTDIR and the /usr prefix, so the unit names /usr/bin/runnel and the
# defaults file lands in /etc/default.
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "runnel maintainers <runnel@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Building against the static library needs these headers and libraries too.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libssl-dev, libpq-dev")
configure_file(${PROJECT_SOURCE_DIR}/packaging/conffiles.in ${PROJECT_BINARY_DIR}/packaging/conffiles
  @ONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_BINARY_DIR}/packaging/conffiles
  ${PROJECT_SOURCE_DIR}/packaging/postinst
  ${PROJECT_SOURCE_DIR}/packaging/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
