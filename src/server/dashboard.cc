#include "server/dashboard.h"

#include <string>

#include "runnel/status.h"
#include "server/stream_service.h"

namespace runnel::server {
namespace {

std::string_view ContentTypeOf(std::string_view path) {
  if (path.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (path.ends_with(".css")) return "text/css; charset=utf-8";
  return "text/html; charset=utf-8";
}

}  // namespace

bool IsDashboardPath(std::string_view path) {
  return path == "/" || path.starts_with("/ui/");
}

HttpResponse DashboardResponse(std::string_view path, std::string_view method) {
  if (method != "GET" && method != "HEAD") {
    HttpResponse r =
        StreamService::ErrorResponse(Status::InvalidArgument("use GET for the dashboard"));
    r.Set("Allow", "GET, HEAD");
    return r;
  }
  auto asset = DashboardAsset(path);
  if (!asset) return StreamService::ErrorResponse(Status::NotFound("no such dashboard file"));
  HttpResponse r;
  r.status = 200;
  r.Set("Content-Type", std::string(ContentTypeOf(path)));
  // Revalidated on every load: a server upgrade serves its own page at once.
  r.Set("Cache-Control", "no-cache");
  r.Set("Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  r.Set("X-Frame-Options", "DENY");
  r.Set("Referrer-Policy", "no-referrer");
  r.body = std::string(*asset);
  return r;
}

}  // namespace runnel::server
