// One-line renderings of store results, for tests that run the same operations on two stores
// and compare what each answered (the differential tests).
#ifndef RUNNEL_TESTS_SUPPORT_STORE_SHOW_H_
#define RUNNEL_TESTS_SUPPORT_STORE_SHOW_H_

#include <string>
#include <vector>

#include "runnel/store.h"

namespace runnel::testing {

// A catalog row; the stream id only when `with_id` (ids are each store's own).
inline std::string Show(const Result<StreamInfo>& r, bool with_id = true) {
  if (!r.ok()) return std::string(StatusCodeName(r.status().code()));
  const StreamInfo& i = *r;
  return (with_id ? "id=" + std::to_string(i.id) + " " : std::string()) +
         "head=" + std::to_string(i.head_offset) + " tail=" + std::to_string(i.tail_offset) +
         " next=" + std::to_string(i.next_offset) + " count=" + std::to_string(i.event_count) +
         " bytes=" + std::to_string(i.retained_bytes) + " closed=" + std::to_string(i.closed) +
         " attrs=" + i.spec.attributes + " ct=" + i.spec.content_type +
         " first=" + std::to_string(i.spec.first_offset) +
         " ev=" + std::to_string(i.spec.retention.max_events.value_or(0)) +
         " age=" + std::to_string(i.spec.retention.max_age_ms.value_or(0)) +
         " mb=" + std::to_string(i.spec.retention.max_bytes.value_or(0));
}

inline std::string Show(const Result<std::vector<StoredRecord>>& r) {
  if (!r.ok()) return std::string(StatusCodeName(r.status().code()));
  std::string out;
  for (const auto& rec : *r) {
    out += "[" + std::to_string(rec.offset) + "@" + std::to_string(rec.appended_at_ms) +
           (rec.key ? " k=" + *rec.key : "") + " " + rec.payload + "]";
  }
  return out;
}

// An append's offsets, or its status code (with the actual next offset of a conflict).
inline std::string Show(const Result<AppendResult>& r) {
  if (!r.ok()) {
    std::string s(StatusCodeName(r.status().code()));
    if (r.status().conflict_actual())
      s += " actual=" + std::to_string(*r.status().conflict_actual());
    return s;
  }
  return std::to_string(r->first_offset) + "-" + std::to_string(r->last_offset) + " next " +
         std::to_string(r->next_offset);
}

inline std::string Show(const Result<uint64_t>& r) {
  return r.ok() ? std::to_string(*r) : std::string(StatusCodeName(r.status().code()));
}

inline std::string ShowCursors(Store& s, StreamId id) {
  auto r = s.ListCursors(id);
  if (!r.ok()) return std::string(StatusCodeName(r.status().code()));
  std::string out;
  for (const auto& c : *r) {
    out +=
        c.consumer + "=" + std::to_string(c.offset) + "@" + std::to_string(c.updated_at_ms) + " ";
  }
  return out;
}

inline std::string ShowProducer(Store& s, StreamId id, const std::string& p) {
  auto r = s.GetProducer(id, p);
  if (!r.ok()) return std::string(StatusCodeName(r.status().code()));
  if (!*r) return "none";
  return (*r)->producer_id + "/" + std::to_string((*r)->epoch) + "/" + std::to_string((*r)->seq) +
         "/" + std::to_string((*r)->last_offset);
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_STORE_SHOW_H_
