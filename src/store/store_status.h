// Refusals that every store words the same way.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_STORE_STORE_STATUS_H_
#define RUNNEL_STORE_STORE_STATUS_H_

#include <string>
#include <string_view>

#include "runnel/status.h"

namespace runnel::store {

// An append whose AppendRequest::expected_attributes no longer match the stream's.
inline Status AttributesChanged(std::string_view stream) {
  return Status::Conflict("the attributes of stream '" + std::string(stream) +
                              "' changed since they were read; nothing was written",
                          0, 0);
}

}  // namespace runnel::store

#endif  // RUNNEL_STORE_STORE_STATUS_H_
