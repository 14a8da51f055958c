#include "server/content_coding.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <memory>

#include "server/http_types.h"

namespace runnel::server {

namespace {

// A q-value (RFC 9110 12.4.2: "0" to "1" with at most three decimals) in thousandths; nullopt
// when malformed.
std::optional<int> ParseQValue(std::string_view text) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  if (text[0] != '0' && text[0] != '1') return std::nullopt;
  int value = (text[0] - '0') * 1000;
  if (text.size() == 1) return value;
  if (text[1] != '.') return std::nullopt;
  int scale = 100;
  for (size_t i = 2; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    value += (text[i] - '0') * scale;
    scale /= 10;
  }
  if (value > 1000) return std::nullopt;
  return value;
}

}  // namespace

ContentCoding NegotiateCoding(std::optional<std::string_view> accept_encoding) {
  if (!accept_encoding) return ContentCoding::kIdentity;
  // q-values in thousandths; -1: not listed.
  int gzip = -1;
  int zstd = -1;
  int identity = -1;
  int any = -1;
  std::string_view rest = *accept_encoding;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t semi = item.find(';');
    const std::string_view name = TrimBlanks(item.substr(0, semi));
    if (name.empty()) continue;
    int q = 1000;
    bool malformed = false;
    std::string_view params =
        semi == std::string_view::npos ? std::string_view() : item.substr(semi + 1);
    while (!params.empty()) {
      const size_t next = params.find(';');
      const std::string_view param = TrimBlanks(params.substr(0, next));
      params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos) continue;
      if (!EqualsIgnoreCase(TrimBlanks(param.substr(0, eq)), "q")) continue;
      auto value = ParseQValue(TrimBlanks(param.substr(eq + 1)));
      if (!value) {
        malformed = true;
        break;
      }
      q = *value;
    }
    if (malformed) continue;
    // A coding listed twice keeps its highest q-value.
    auto note = [q](int* slot) { *slot = std::max(*slot, q); };
    if (EqualsIgnoreCase(name, "gzip") || EqualsIgnoreCase(name, "x-gzip")) {
      note(&gzip);
    } else if (EqualsIgnoreCase(name, "zstd")) {
      note(&zstd);
    } else if (EqualsIgnoreCase(name, "identity")) {
      note(&identity);
    } else if (name == "*") {
      note(&any);
    }
  }
  if (gzip < 0) gzip = any;
  if (zstd < 0) zstd = any;
  // Identity is always acceptable here (RFC 9110 12.5.3 lets it be refused, but a readable body
  // beats a 406); it is preferred only when listed with a higher q-value than the best coding.
  const int best = std::max(gzip, zstd);
  if (best <= 0 || best < identity) return ContentCoding::kIdentity;
  return zstd == best ? ContentCoding::kZstd : ContentCoding::kGzip;
}

std::string_view CodingName(ContentCoding coding) {
  switch (coding) {
    case ContentCoding::kGzip: return "gzip";
    case ContentCoding::kZstd: return "zstd";
    case ContentCoding::kIdentity: break;
  }
  return "identity";
}

std::optional<std::string> Compress(ContentCoding coding, std::string_view body,
                                    const CompressionOptions& options) {
  switch (coding) {
    case ContentCoding::kIdentity: return std::string(body);
    case ContentCoding::kZstd: {
      std::string out(ZSTD_compressBound(body.size()), '\0');
      const size_t n = ZSTD_compress(out.data(), out.size(), body.data(), body.size(),
                                     std::clamp(options.zstd_level, 1, 19));
      if (ZSTD_isError(n)) return std::nullopt;
      out.resize(n);
      return out;
    }
    case ContentCoding::kGzip: {
      z_stream z{};
      // windowBits 15 + 16: a gzip header and trailer around the deflate data.
      if (deflateInit2(&z, std::clamp(options.gzip_level, 1, 9), Z_DEFLATED, 15 + 16, 8,
                       Z_DEFAULT_STRATEGY) != Z_OK) {
        return std::nullopt;
      }
      // One call: the output has room for the worst case (deflateBound), so Z_FINISH ends it.
      std::string out(deflateBound(&z, static_cast<uLong>(body.size())), '\0');
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
      z.avail_in = static_cast<uInt>(body.size());
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      const int rc = deflate(&z, Z_FINISH);
      const size_t n = out.size() - z.avail_out;
      deflateEnd(&z);
      if (rc != Z_STREAM_END) return std::nullopt;
      out.resize(n);
      return out;
    }
  }
  return std::nullopt;
}

std::optional<std::string> Decompress(ContentCoding coding, std::string_view body,
                                      size_t max_bytes) {
  std::string out;
  char buf[16384];
  switch (coding) {
    case ContentCoding::kIdentity:
      if (body.size() > max_bytes) return std::nullopt;
      return std::string(body);
    case ContentCoding::kZstd: {
      std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> d(ZSTD_createDStream(),
                                                                 ZSTD_freeDStream);
      if (!d) return std::nullopt;
      ZSTD_inBuffer in{body.data(), body.size(), 0};
      size_t last = 1;
      while (in.pos < in.size || last != 0) {
        ZSTD_outBuffer o{buf, sizeof(buf), 0};
        last = ZSTD_decompressStream(d.get(), &o, &in);
        if (ZSTD_isError(last)) return std::nullopt;
        out.append(buf, o.pos);
        if (out.size() > max_bytes) return std::nullopt;
        // No input left and no output made: the frame is truncated.
        if (in.pos == in.size && o.pos == 0 && last != 0) return std::nullopt;
      }
      return out;
    }
    case ContentCoding::kGzip: {
      z_stream z{};
      if (inflateInit2(&z, 15 + 16) != Z_OK) return std::nullopt;
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
      z.avail_in = static_cast<uInt>(body.size());
      int rc = Z_OK;
      while (rc == Z_OK) {
        z.next_out = reinterpret_cast<Bytef*>(buf);
        z.avail_out = sizeof(buf);
        rc = inflate(&z, Z_NO_FLUSH);
        out.append(buf, sizeof(buf) - z.avail_out);
        if (out.size() > max_bytes) break;
        if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) break;  // truncated
      }
      const bool whole = rc == Z_STREAM_END && z.avail_in == 0 && out.size() <= max_bytes;
      inflateEnd(&z);
      if (!whole) return std::nullopt;
      return out;
    }
  }
  return std::nullopt;
}

std::string MergeVary(std::string_view existing, std::string_view name) {
  if (TrimBlanks(existing).empty()) return std::string(name);
  std::string_view rest = existing;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = TrimBlanks(rest.substr(0, comma));
    if (item == "*" || EqualsIgnoreCase(item, name)) return std::string(existing);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return std::string(existing) + ", " + std::string(name);
}

}  // namespace runnel::server
