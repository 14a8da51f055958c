#include "server/sse_format.h"

namespace runnel::server {

void AppendSseEvent(std::string_view name, std::string_view payload, std::string* out) {
  out->append("event: ");
  out->append(name);
  out->push_back('\n');
  size_t start = 0;
  for (;;) {
    size_t end = payload.find_first_of("\r\n", start);
    std::string_view line =
        payload.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    // A space right after the colon is eaten by SSE parsers; keep a leading space by adding one.
    out->append(!line.empty() && line.front() == ' ' ? "data: " : "data:");
    out->append(line);
    out->push_back('\n');
    if (end == std::string_view::npos) break;
    start = end + 1;
    if (payload[end] == '\r' && start < payload.size() && payload[start] == '\n') ++start;
  }
  out->push_back('\n');
}

void AppendSseDataEvent(std::string_view payload, std::string* out) {
  AppendSseEvent("data", payload, out);
}

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t n = (static_cast<uint8_t>(bytes[i]) << 16) |
                 (static_cast<uint8_t>(bytes[i + 1]) << 8) | static_cast<uint8_t>(bytes[i + 2]);
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(kAlphabet[(n >> 6) & 63]);
    out.push_back(kAlphabet[n & 63]);
  }
  if (i < bytes.size()) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace runnel::server
