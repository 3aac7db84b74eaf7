// fuzz_util.h: what the libFuzzer targets share: a private scratch folder for inputs that the
// code under test reads from files, and the rule every target enforces: bad input may only
// ever end in olmo::Error (any other exception, crash, leak or sanitizer report is a finding).
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace olmo::fuzz {

// A folder of this process, made once (in /dev/shm when there is one: faster than a disk) and
// removed at exit.
inline const std::string& scratch_dir() {
    static const std::string dir = [] {
        std::string tmpl = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + std::string("/olmo_fuzz_XXXXXX");
        if (!mkdtemp(tmpl.data())) abort();
        return tmpl;
    }();
    // libFuzzer ends with exit(). Registered after dir was made, so it runs before dir's destructor.
    static const bool cleanup = (std::atexit([] { std::filesystem::remove_all(scratch_dir()); }), true);
    (void)cleanup;
    return dir;
}

// Writes bytes to scratch_dir()/name and returns the path.
inline std::string put_file(const std::string& name, const uint8_t* data, size_t size) {
    const std::string path = scratch_dir() + "/" + name;
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
    return path;
}

// The repository's root, where the targets find the tokenizers they load once (make fuzz runs
// them from there; OLMO_ROOT overrides).
inline std::string repo_path(const std::string& rel) {
    const char* root = getenv("OLMO_ROOT");
    return (root ? std::string(root) + "/" : std::string()) + rel;
}

}  // namespace olmo::fuzz
