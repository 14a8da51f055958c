// Value types of the public API: scopes, retention, events, descriptors, group status.
//
// Offsets are public and 1-based everywhere: the first event of a stream has offset 1, and 0
// means "nothing yet" (SEMANTICS choice 1). Times are milliseconds since the Unix epoch.
#ifndef RUNNEL_TYPES_H_
#define RUNNEL_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace runnel {

// Where a stream lives: in one tenant's namespace, or in the global (platform) namespace.
// The same name in two scopes names two unrelated streams (SEMANTICS R2).
class StreamScope {
 public:
  static StreamScope Global() { return StreamScope(); }
  static StreamScope Tenant(std::string id) { return StreamScope(std::move(id)); }
  // Some(t) -> Tenant(t); none (the platform principal) -> Global.
  static StreamScope FromPrincipal(const std::optional<std::string>& principal_tenant) {
    return principal_tenant ? Tenant(*principal_tenant) : Global();
  }

  bool is_global() const { return !tenant_.has_value(); }
  // The tenant id; empty optional for the global scope.
  const std::optional<std::string>& tenant() const { return tenant_; }
  // "global" or "tenant:<id>". Also the namespace key the registry hands to the store.
  std::string Label() const { return tenant_ ? "tenant:" + *tenant_ : std::string("global"); }

  friend bool operator==(const StreamScope& a, const StreamScope& b) {
    return a.tenant_ == b.tenant_;
  }

 private:
  StreamScope() = default;
  explicit StreamScope(std::string id) : tenant_(std::move(id)) {}
  std::optional<std::string> tenant_;
};

// Automatic retention, applied after every append (SEMANTICS P1-P4). Unset caps do not apply;
// the default retains everything. Zero caps are refused at create (SEMANTICS P6).
struct StreamRetention {
  // Keep at most this many of the newest events.
  std::optional<uint64_t> max_events;
  // Drop events whose appended_at_ms is older than (now - max_age_ms), strictly.
  std::optional<uint64_t> max_age_ms;
  // Keep the newest events whose payload and key bytes add up to at most this; the newest
  // event is always kept, even if it alone is larger.
  std::optional<uint64_t> max_bytes;

  friend bool operator==(const StreamRetention&, const StreamRetention&) = default;
};

struct StreamEvent {
  StreamScope scope = StreamScope::Global();
  std::string stream;
  uint64_t offset = 0;
  uint64_t appended_at_ms = 0;
  // Opaque; stored and returned unchanged.
  std::optional<std::string> key;
  // Opaque bytes; never parsed by the engine.
  std::string payload;
};

struct StreamDescriptor {
  StreamScope scope = StreamScope::Global();
  std::string name;
  StreamRetention retention;
  // Oldest retained offset; 0 when nothing is retained.
  uint64_t head_offset = 0;
  // Newest retained offset; 0 when nothing is retained.
  uint64_t tail_offset = 0;
  // Number of retained events.
  uint64_t event_count = 0;
  // The offset the next append will get. Never decreases, even when retention empties the
  // stream (SEMANTICS choice 13).
  uint64_t next_offset = 1;
  // Retained payload and key bytes.
  uint64_t retained_bytes = 0;
  // Set once the stream is closed; closed streams refuse appends.
  bool closed = false;
  std::string content_type;
};

// A consumer group's (or a named consumer's) progress on one stream.
struct ConsumerGroupStatus {
  std::string group;
  std::string stream;
  // The last acknowledged (fully processed) offset; 0 when none.
  uint64_t last_acked = 0;
  // When last_acked last advanced. Acks that do not advance it leave it unchanged.
  uint64_t updated_at_ms = 0;
};

}  // namespace runnel

#endif  // RUNNEL_TYPES_H_
