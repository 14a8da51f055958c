// Names threads (visible in `top -H`, `ps -L`, /proc/<pid>/task/<tid>/comm, gdb and perf), so an
// operator can tell runnel's io, log and database threads apart. The main thread keeps the
// program's name: renaming it would rename the process in `ps` and `pgrep`.
#ifndef RUNNEL_BASE_THREAD_NAME_H_
#define RUNNEL_BASE_THREAD_NAME_H_

#include <pthread.h>

#include <string>
#include <thread>

namespace runnel {

// Linux keeps at most 15 bytes of a thread name; longer names are cut.
inline void SetThreadName(std::thread& thread, std::string name) {
  if (name.size() > 15) name.resize(15);
  (void)pthread_setname_np(thread.native_handle(), name.c_str());
}

}  // namespace runnel

#endif  // RUNNEL_BASE_THREAD_NAME_H_
