// threads.h: how many CPU threads the parallel loops use (OpenMP: the CPU engine's matmul and
// the CPU loader), and how they wait.
//
// The default is one thread per physical core this process may run on: a second hyperthread of
// a core adds little to a bandwidth-bound matmul. Threads that finish a loop early sleep instead
// of spinning (OMP_WAIT_POLICY=PASSIVE): on a machine where another program keeps a core busy,
// a spinning thread takes the time its descheduled partner needs to reach the barrier, and
// every one of the dozens of loops per token waits a scheduler slice.
#pragma once

namespace olmo {

// Distinct (package, core) pairs among the CPUs in this process's affinity mask (sysfs);
// the number of CPUs in the mask when the topology cannot be read.
int physical_cores();

// Sets the threads of the parallel loops: n, or physical_cores() when n is 0.
void set_cpu_threads(int n);

// libgomp reads OMP_WAIT_POLICY once, when it is loaded, before main(): so when the variable is
// unset this sets it to PASSIVE and executes the program again (/proc/self/exe, same argv).
// Returns only when the policy is already chosen (or the exec failed). First thing in main().
void exec_with_passive_omp_wait(char** argv);

}  // namespace olmo
