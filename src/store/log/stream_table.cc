// The stream table and the per-stream state's own methods (stream_table.h).
#include "store/log/stream_table.h"

#include <algorithm>
#include <bit>

namespace runnel::log {

StreamState* StreamTable::Insert(std::unique_ptr<StreamState> s) {
  if ((count_ + 1) * 4 > slots_.size() * 3) Rehash(std::max<size_t>(16, slots_.size() * 2));
  for (size_t i = Home(s->id);; i = (i + 1) & mask()) {
    if (slots_[i] == nullptr) {
      slots_[i] = std::move(s);
      ++count_;
      return slots_[i].get();
    }
    if (slots_[i]->id == s->id) return nullptr;
  }
}

void StreamTable::Reserve(size_t n) {
  size_t capacity = 16;
  while (capacity * 3 < n * 4) capacity *= 2;
  if (capacity > slots_.size()) Rehash(capacity);
}

void StreamTable::Erase(StreamId id) {
  if (slots_.empty()) return;
  size_t i = Home(id);
  for (;; i = (i + 1) & mask()) {
    if (slots_[i] == nullptr) return;
    if (slots_[i]->id == id) break;
  }
  slots_[i].reset();
  --count_;
  // Backward-shift deletion: move up every later entry of the run that may live in the hole
  // (its home is not cyclically within (i, j]), so lookups never meet a false gap.
  for (size_t j = (i + 1) & mask(); slots_[j] != nullptr; j = (j + 1) & mask()) {
    const size_t home = Home(slots_[j]->id);
    if (((j - home) & mask()) >= ((j - i) & mask())) {
      slots_[i] = std::move(slots_[j]);
      i = j;
    }
  }
  if (slots_.size() > 16 && count_ * 8 < slots_.size()) Rehash(slots_.size() / 2);
}

void StreamTable::Rehash(size_t capacity) {
  std::vector<std::unique_ptr<StreamState>> old = std::move(slots_);
  slots_.clear();
  slots_.resize(capacity);
  bits_ = static_cast<unsigned>(std::countr_zero(capacity));
  for (auto& p : old) {
    if (!p) continue;
    size_t i = Home(p->id);
    while (slots_[i] != nullptr) i = (i + 1) & mask();
    slots_[i] = std::move(p);
  }
}

StreamSpec StreamState::Spec() const {
  StreamSpec spec;
  spec.ns = *ns;
  spec.name = name.str();
  spec.content_type = *content_type;
  spec.first_offset = FirstOffset();
  spec.created_at_ms = created_at_ms;
  if (extras) {
    spec.retention = extras->retention;
    spec.attributes = extras->attributes;
  }
  return spec;
}

}  // namespace runnel::log
