#include "core/protocol/rules.h"

#include <algorithm>

#include "base/utf8.h"
#include "core/state_compaction.h"

namespace runnel::protocol {

namespace {

int DaysFromCivil(int y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int>(doe) - 719468;
}

}  // namespace

uint64_t TailPosition(const StreamInfo& info) {
  return info.next_offset - 1;
}

uint64_t PastTrimmed(const StreamInfo& info, uint64_t position) {
  const uint64_t first_kept = info.head_offset ? info.head_offset : info.next_offset;
  return std::max(position, first_kept - 1);
}

std::optional<int64_t> ParseRfc3339(std::string_view s) {
  auto num = [&](size_t pos, size_t len) -> std::optional<int> {
    if (pos + len > s.size()) return std::nullopt;
    int v = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s.size() < 20) return std::nullopt;
  auto year = num(0, 4), month = num(5, 2), day = num(8, 2), hour = num(11, 2), minute = num(14, 2),
       second = num(17, 2);
  if (!year || !month || !day || !hour || !minute || !second) return std::nullopt;
  if (s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  if (*month < 1 || *month > 12 || *day < 1 || *hour > 23 || *minute > 59 || *second > 60) {
    return std::nullopt;
  }
  // The days of that month: 2024-02-30 is no date, 2024-02-29 is.
  const bool leap = (*year % 4 == 0 && *year % 100 != 0) || *year % 400 == 0;
  constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (*day > kDays[*month - 1] + (*month == 2 && leap ? 1 : 0)) return std::nullopt;
  size_t pos = 19;
  int64_t millis = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    size_t start = pos;
    int64_t scale = 100;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      millis += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return std::nullopt;
  }
  if (pos >= s.size()) return std::nullopt;
  int64_t offset_minutes = 0;
  if (s[pos] == 'Z' || s[pos] == 'z') {
    ++pos;
  } else if (s[pos] == '+' || s[pos] == '-') {
    auto oh = num(pos + 1, 2), om = num(pos + 4, 2);
    if (!oh || !om || pos + 3 >= s.size() || s[pos + 3] != ':' || *oh > 23 || *om > 59) {
      return std::nullopt;
    }
    offset_minutes = (*oh * 60 + *om) * (s[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  int64_t days = DaysFromCivil(*year, static_cast<unsigned>(*month), static_cast<unsigned>(*day));
  int64_t secs = days * 86400 + *hour * 3600 + *minute * 60 + *second - offset_minutes * 60;
  return secs * 1000 + millis;
}

bool Expired(const Meta& meta, const ExpiryClock& clock) {
  // E3: a channel's partition or checkpoint lives as long as its channel: a TTL or expiry the
  // stream had before a channel adopted it never deletes the channel's messages.
  if (meta.channel) return false;
  // E1.
  if (meta.expires_at_ms && static_cast<int64_t>(clock.now_ms) >= *meta.expires_at_ms) {
    return true;
  }
  // E2.
  if (meta.ttl_s) {
    const uint64_t last = std::max(clock.last_access_ms, meta.touched_ms);
    const uint64_t ttl_ms = *meta.ttl_s * 1000;
    // Another node's accesses are recorded at most a quarter of the TTL apart.
    const uint64_t unrecorded = clock.shared_with_other_nodes ? ttl_ms / 4 : 0;
    if (clock.now_ms >= last + ttl_ms + unrecorded + clock.grace_ms) return true;
  }
  return false;
}

bool RecordAccessDue(const Meta& meta, uint64_t recorded_ms, uint64_t now_ms) {
  return meta.ttl_s && now_ms >= recorded_ms + *meta.ttl_s * 1000 / 4;
}

Status ValidateStreamSeq(std::string_view seq) {
  if (!IsValidUtf8(seq)) return Status::InvalidArgument("Stream-Seq must be valid UTF-8");
  return Status::OK();
}

Status CheckStreamSeq(const std::optional<std::string>& last, std::string_view seq) {
  if (last && seq <= *last) {
    return Status::Conflict("Stream-Seq must increase (last '" + *last + "')", 0, 0);
  }
  return Status::OK();
}

ProducerCheck CheckProducer(const std::optional<ProducerState>& stored, uint64_t epoch,
                            uint64_t seq) {
  if (stored && epoch < stored->epoch) return {ProducerVerdict::kStaleEpoch, 0};
  if (!stored || epoch > stored->epoch) {
    if (seq == 0) return {ProducerVerdict::kAccept, 0};
    // A known producer's new epoch restarts at 0; an unknown producer's first append is 0.
    if (stored) return {ProducerVerdict::kBadNewEpoch, 0};
    return {ProducerVerdict::kGap, 0};
  }
  if (seq <= stored->seq) return {ProducerVerdict::kDuplicate, 0};
  if (seq > stored->seq + 1) return {ProducerVerdict::kGap, stored->seq + 1};
  return {ProducerVerdict::kAccept, 0};
}

Status CheckExpectedPosition(uint64_t expected_position, uint64_t next_offset) {
  if (expected_position != next_offset - 1) {
    return Status::Conflict("Stream-Expected-Offset does not match the stream's next offset",
                            expected_position, next_offset - 1);
  }
  return Status::OK();
}

Status ValidateStateMessages(const std::vector<AppendRecord>& records) {
  for (size_t i = 0; i < records.size(); ++i) {
    auto m = compaction::ParseMessage(records[i].payload);
    if (!m.ok()) {
      return Status::InvalidArgument("message " + std::to_string(i + 1) +
                                     " is not a State Protocol message for a compacted stream: " +
                                     std::string(m.status().message()));
    }
  }
  return Status::OK();
}

}  // namespace runnel::protocol
