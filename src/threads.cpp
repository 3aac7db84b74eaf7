// threads.cpp: CPU thread count and OpenMP wait policy (see threads.h).
#include "threads.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>

namespace olmo {

namespace {

// The integer in a sysfs file, or -1.
int read_int(const std::string& path) {
    int v = -1;
    if (std::FILE* f = std::fopen(path.c_str(), "r")) {
        if (std::fscanf(f, "%d", &v) != 1) v = -1;
        std::fclose(f);
    }
    return v;
}

}  // namespace

int physical_cores() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    std::set<std::pair<int, int>> cores;
    int cpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        cpus++;
        const std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
        const int package = read_int(topo + "physical_package_id"), core = read_int(topo + "core_id");
        if (package < 0 || core < 0) return cpus > 0 ? CPU_COUNT(&set) : 1;
        cores.insert({package, core});
    }
    return cores.empty() ? 1 : (int)cores.size();
}

void set_cpu_threads(int n) { omp_set_num_threads(n > 0 ? n : physical_cores()); }

void exec_with_passive_omp_wait(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);   // returns only on failure: run on, with the default policy
}

}  // namespace olmo
