// Server-Sent Events framing and base64, CRLF-safe: payload line breaks (\r\n, \r, \n) always
// become separate `data:` lines, so a payload can never end an event or start a new one.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_SERVER_SSE_FORMAT_H_
#define RUNNEL_SERVER_SSE_FORMAT_H_

#include <string>
#include <string_view>

namespace runnel::server {

// Appends "event: data\n" + one "data:" line per payload line + "\n".
void AppendSseDataEvent(std::string_view payload, std::string* out);
// Appends "event: <name>\n" + data lines + "\n".
void AppendSseEvent(std::string_view name, std::string_view payload, std::string* out);
// Standard base64 (RFC 4648) with padding.
std::string Base64Encode(std::string_view bytes);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_SSE_FORMAT_H_
