#include "base/thread_slice.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace runnel {

namespace {

// struct sched_attr of sched_setattr(2), its first version (48 bytes), declared here: glibc
// before 2.41 has neither the struct nor the call.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
};
static_assert(sizeof(SchedAttr) == 48);

}  // namespace

void RequestShortSlice(std::chrono::microseconds slice) {
  if (::sched_getscheduler(0) != SCHED_OTHER) return;  // a policy the operator chose stays
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, tid);
  if (nice == -1 && errno != 0) return;
  SchedAttr attr{};
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  attr.sched_nice = nice;
  attr.sched_runtime = static_cast<uint64_t>(slice.count()) * 1000;  // nanoseconds
  (void)::syscall(SYS_sched_setattr, 0, &attr, 0u);
}

}  // namespace runnel
