// The built-in console: a page served at `/` (with its script and style under `/ui/`) that
// charts the server's figures, pages through the streams of a scope, and shows a stream's
// records, metadata and consumer groups, live, with the actions the token allows. The files live in
// src/server/dashboard/ and are embedded in the binary at build time; the page reads everything
// through the public HTTP API with the bearer token typed into it, so it shows exactly what that
// token may see. The files themselves hold no data and are served without a token.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_SERVER_DASHBOARD_H_
#define RUNNEL_SERVER_DASHBOARD_H_

#include <optional>
#include <string_view>

#include "server/http_types.h"

namespace runnel::server {

// The embedded file served at `path` ("/", "/ui/app.js", "/ui/app.css"), if any. Generated from
// src/server/dashboard by embed.cmake.
std::optional<std::string_view> DashboardAsset(std::string_view path);

// True for the paths the dashboard owns: "/" and everything under "/ui/".
bool IsDashboardPath(std::string_view path);

// The answer to `method` on a dashboard path: the file (GET; HEAD without the body) with its
// content type and a Content-Security-Policy that allows only this origin's scripts, styles
// and API calls; 404 for an unknown file under /ui/; 400 for any other method.
HttpResponse DashboardResponse(std::string_view path, std::string_view method);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_DASHBOARD_H_
