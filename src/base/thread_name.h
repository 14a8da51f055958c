// Names the calling thread (visible in `top -H`, `ps -L`, /proc/<pid>/task/<tid>/comm, gdb and
// perf), so an operator can tell runnel's io, log and database threads apart.
#ifndef RUNNEL_BASE_THREAD_NAME_H_
#define RUNNEL_BASE_THREAD_NAME_H_

#include <pthread.h>

#include <string>

namespace runnel {

// Linux keeps at most 15 bytes of a thread name; longer names are cut.
inline void SetCurrentThreadName(std::string name) {
  if (name.size() > 15) name.resize(15);
  (void)pthread_setname_np(pthread_self(), name.c_str());
}

}  // namespace runnel

#endif  // RUNNEL_BASE_THREAD_NAME_H_
