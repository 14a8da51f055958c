// Content codings of response bodies (RFC 9110 8.4): choosing one from a request's
// Accept-Encoding, and gzip (zlib) and zstd (libzstd) compression of a whole body.
//
// What is compressed, and what is not (StreamService::ReadResponse applies this):
// - catch-up and long-poll reads of a stream (200 answers with records), when the client
//   accepts a coding we have and the body is at least CompressionOptions::min_bytes long;
// - never SSE: its events go out one by one as records arrive, many readers share one framed
//   event, and a compressor per live reader would cost its window (tens to hundreds of KiB) for
//   every open response; an SSE request gets identity whatever it accepts;
// - never error answers, HEAD, or anything but stream reads.
// A compressed answer carries `Content-Encoding`, and every read answer that could have been
// compressed carries `Vary: Accept-Encoding` (beside any other Vary, such as Authorization), so
// a shared cache keeps one copy per coding. Each coding has an entity tag of its own (the
// identity tag with the coding's name added inside the quotes), so If-None-Match only matches
// the representation the client holds.
//
// Thread-safety: plain functions; each call uses a compressor of its own.
#ifndef RUNNEL_SERVER_CONTENT_CODING_H_
#define RUNNEL_SERVER_CONTENT_CODING_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace runnel::server {

enum class ContentCoding { kIdentity, kGzip, kZstd };

struct CompressionOptions {
  // False sends every body as it is, whatever the client accepts.
  bool enabled = true;
  // Bodies shorter than this are sent as they are: below about a kilobyte the coding's framing
  // and the CPU cost outweigh what is saved.
  size_t min_bytes = 1024;
  // zlib's level, 1 (fastest) to 9 (smallest). 1 is what a server that answers each read once
  // wants: JSON still shrinks several-fold at a third of the default level's CPU.
  int gzip_level = 1;
  // zstd's level, 1 to 19 (its own default is 3).
  int zstd_level = 3;
};

// The coding to answer with, given the request's Accept-Encoding (RFC 9110 12.5.3): of the
// codings we have (zstd, gzip; "x-gzip" is gzip, "*" stands for any not listed), the one with
// the highest q-value above 0, preferring zstd on a tie; identity when "identity" is listed with
// a higher q-value than that one, when nothing we have is acceptable, or with no header. A coding
// with q=0 is refused. Identity is sent even when the client refuses it too (`identity;q=0`): a
// body it can read in some form beats a 406 for a stream read. Malformed items are ignored.
ContentCoding NegotiateCoding(std::optional<std::string_view> accept_encoding);

// "gzip", "zstd", or "identity".
std::string_view CodingName(ContentCoding coding);

// `body` in `coding` (identity returns it unchanged); nullopt when the compressor fails (out of
// memory).
std::optional<std::string> Compress(ContentCoding coding, std::string_view body,
                                    const CompressionOptions& options);

// The decoded form of a gzip or zstd body, at most `max_bytes` long; nullopt when it is
// malformed, truncated or longer. For tests and clients; the server never decodes bodies.
std::optional<std::string> Decompress(ContentCoding coding, std::string_view body,
                                      size_t max_bytes);

// A Vary field value with `name` added unless it is already listed (case-insensitive), or the
// value is "*".
std::string MergeVary(std::string_view existing, std::string_view name);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_CONTENT_CODING_H_
