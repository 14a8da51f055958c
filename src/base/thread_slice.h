// A short scheduler time slice for threads that others wait on (the log writer, the io threads).
//
// On a machine whose CPUs are busy, a thread woken with the default slice (0.75 ms times 1 +
// log2 of the CPUs, ended only at a scheduler tick) waits for the running task's slice to end:
// on the reference machine (2 CPUs, 250 Hz) a write + fdatasync loop under other processes'
// builds took 4.0 ms p50, 3 ms of it waiting for a CPU, against 0.11 ms with a 200 us slice
// (bench/sync_probe_bench.cc). From Linux 6.12 (EEVDF custom slices) a thread with a shorter
// slice has the earlier deadline and preempts at once. Its share of the CPU is unchanged (that
// follows its nice), and no privilege is needed.
//
// Thread-safety: affects the calling thread only.
#ifndef RUNNEL_BASE_THREAD_SLICE_H_
#define RUNNEL_BASE_THREAD_SLICE_H_

#include <chrono>

namespace runnel {

// Asks the scheduler for a `slice` time slice for the calling thread, if it runs SCHED_OTHER,
// keeping its policy and nice. Best effort: older kernels ignore the slice, and a failure
// changes nothing.
void RequestShortSlice(std::chrono::microseconds slice);

}  // namespace runnel

#endif  // RUNNEL_BASE_THREAD_SLICE_H_
