// LogStore: the background scrub that verifies written segments and reports damage.
#include "store/log/log_store_internal.h"

namespace runnel::log {

// ------------------------------------------------------------------------------------------
// The scrub

Status LogStore::ScrubOnce() {
  std::vector<uint64_t> numbers = SegmentNumbers();
  for (uint64_t n : numbers) ScrubSegment(n, 0);
  scrub_passes_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

void LogStore::ScrubLoop() {
  const auto pause = std::chrono::milliseconds(options_.scrub_pass_interval_ms);
  // The first pass starts at once: damage a checkpoint covers is found soon after a start.
  auto next_pass = std::chrono::steady_clock::now();
  for (;;) {
    {
      MutexLock lock(scrub_mu_);
      while (!scrub_stop_ && lock.WaitUntil(scrub_cv_, next_pass) != std::cv_status::timeout) {
      }
      if (scrub_stop_) return;
    }
    for (uint64_t n : SegmentNumbers()) {
      if (!ScrubSegment(n, options_.scrub_bytes_per_sec)) return;
    }
    scrub_passes_.fetch_add(1, std::memory_order_relaxed);
    next_pass = std::chrono::steady_clock::now() + pause;
  }
}

bool LogStore::ScrubSegment(uint64_t number, uint64_t rate) {
  std::shared_ptr<env::File> file;
  uint64_t end = 0;
  {
    ReaderLock lock(state_mu_);
    // A segment is listed once it exists; of the one being written, the frames written so far
    // (`end` when the scrub starts) are verified.
    auto it = segments_.find(number);
    if (it == segments_.end() || !it->second.file) return true;
    file = it->second.file;  // keeps the file readable if the segment is deleted meanwhile
    end = it->second.end;
  }
  if (end == 0) {  // a segment the checkpoint covers: its end is where the zeros begin
    Result<uint64_t> size = file->Size();
    if (!size.ok()) {
      ReportDamage(number, 0, "cannot be read: " + size.status().ToString());
      return true;
    }
    end = *size;
  }
  SegmentWindow window(*file, end);
  auto view = [&](uint64_t a, uint64_t n) { return window.View(a, n); };
  const auto started = std::chrono::steady_clock::now();
  uint64_t pos = kSegmentHeaderSize;
  uint64_t counted = pos;  // bytes of this segment added to scrubbed_bytes_ so far
  while (pos < end) {
    FrameView f;
    Result<FrameCheck> c = window.ParseAt(pos, &f);
    if (!c.ok()) {
      ReportDamage(number, pos, "cannot be read: " + c.status().ToString());
      break;
    }
    if (*c == FrameCheck::kOk) {
      pos += f.size;
    } else if (*c == FrameCheck::kEnd) {
      // Zeros: the end of the written frames, if only zeros follow (segments are zero-filled
      // ahead of their frames). Checked at the same pace as frames.
      const uint64_t zeros_from = pos;
      bool zero = true;
      while (zero && pos < end) {
        Result<std::string_view> v = window.View(pos, 1u << 20);
        if (!v.ok() || v->empty()) break;
        zero = AllZero(*v);
        pos += v->size();
        if (!Pace(started, pos, rate, &counted)) return false;
      }
      if (!zero) ReportDamage(number, zeros_from, "a zero frame header amid written bytes");
      break;
    } else {
      ReportDamage(number, pos, FrameCheckName(*c));
      Result<std::optional<uint64_t>> next = ValidFrameAfter(view, pos, end);
      if (!next.ok() || !next->has_value()) break;
      pos = **next;
    }
    if (!Pace(started, pos, rate, &counted)) return false;
  }
  scrubbed_bytes_.fetch_add(pos > counted ? pos - counted : 0, std::memory_order_relaxed);
  MutexLock lock(scrub_mu_);
  return !scrub_stop_;
}

bool LogStore::Pace(std::chrono::steady_clock::time_point started, uint64_t pos, uint64_t rate,
                    uint64_t* counted) {
  if (pos - *counted < (1u << 20)) return true;
  scrubbed_bytes_.fetch_add(pos - *counted, std::memory_order_relaxed);
  *counted = pos;
  if (rate == 0) return true;
  // At most `rate` bytes per second: wait until this segment's bytes so far are due.
  const auto due = started + std::chrono::microseconds(pos * 1000000 / rate);
  MutexLock lock(scrub_mu_);
  while (!scrub_stop_ && lock.WaitUntil(scrub_cv_, due) != std::cv_status::timeout) {
  }
  return !scrub_stop_;
}

void LogStore::ReportDamage(uint64_t segment, uint64_t pos, std::string_view why) {
  {
    MutexLock lock(damage_mu_);
    if (!damage_seen_.insert({segment, pos}).second) return;
  }
  // Which live records the damaged frame held: the references that start at or before it in
  // this segment and reach past it (a reference may span several frames).
  std::string held;
  {
    ReaderLock lock(state_mu_);
    streams_.ForEach([&](const StreamState& st) {
      for (size_t i = st.batch_begin; i < st.batches.size(); ++i) {
        const BatchRef& b = st.batches[i];
        if (b.segment != segment || b.pos > pos || uint64_t{b.pos} + b.len <= pos) continue;
        const uint64_t last =
            (i + 1 < st.batches.size() ? st.batches[i + 1].first_offset : st.next) - 1;
        if (!held.empty()) held += ", ";
        held += "stream '" + st.name.str() + "' records " + std::to_string(b.first_offset) +
                " to " + std::to_string(last);
      }
    });
  }
  if (options_.on_damage) {
    options_.on_damage(
        "damaged log data: segment " + SegmentName(segment) + " at byte " + std::to_string(pos) +
        ": " + std::string(why) + "; " +
        (held.empty() ? std::string("no live record is in it") : "it holds " + held));
  }
}

}  // namespace runnel::log
