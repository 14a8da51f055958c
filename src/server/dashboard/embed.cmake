# Writes OUT, a C++ source defining runnel::server::DashboardAsset(path), from the dashboard's
# files (ASSETS: a list of `url-path=file` pairs), each embedded as a raw string literal. Run
# by the build (cmake -P), so an edited asset is embedded again by the next build. The pairs
# are separated by '|'.
string(REPLACE "|" ";" ASSETS "${ASSETS}")
set(delimiter "runnel_asset")
set(body "")
foreach(pair IN LISTS ASSETS)
  string(FIND "${pair}" "=" eq)
  string(SUBSTRING "${pair}" 0 ${eq} url)
  math(EXPR from "${eq} + 1")
  string(SUBSTRING "${pair}" ${from} -1 file)
  file(READ "${file}" text)
  string(FIND "${text}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${file} contains the raw-string delimiter )${delimiter}\"")
  endif()
  string(APPEND body "  if (path == \"${url}\") return std::string_view(R\"${delimiter}(${text})${delimiter}\");\n")
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from src/server/dashboard by embed.cmake; do not edit.
#include \"server/dashboard.h\"

namespace runnel::server {

std::optional<std::string_view> DashboardAsset(std::string_view path) {
${body}  return std::nullopt;
}

}  // namespace runnel::server
")
# Only a changed file is replaced, so an unchanged dashboard recompiles nothing.
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
