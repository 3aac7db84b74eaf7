// model_folder.cpp: Hugging Face cache repository folders as --model (see model_folder.h).
#include "model_folder.h"

#include <sys/stat.h>

#include <cctype>
#include <filesystem>

#include "common.h"

namespace olmo {

namespace {

bool is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The snapshot folders present, for the error message: "a1b2c3, d4e5f6" (at most a few).
std::string snapshot_list(const std::string& snapshots) {
    std::string names;
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(snapshots, ec)) {
        if (n++ == 4) return names + ", ...";
        names += (names.empty() ? "" : ", ") + e.path().filename().string();
    }
    return names.empty() ? "none" : names;
}

}  // namespace

std::string resolve_model_folder(const std::string& dir) {
    const std::string snapshots = dir + "/snapshots", ref = dir + "/refs/main";
    if (file_exists(dir + "/config.json") || (!is_dir(snapshots) && !is_dir(dir + "/refs"))) return dir;
    if (!file_exists(ref))
        fail(dir + ": a Hugging Face cache folder without refs/main (snapshots: " + snapshot_list(snapshots) +
             "); pass --model " + dir + "/snapshots/<hash>");
    std::string commit = read_file(ref);
    while (!commit.empty() && std::isspace((unsigned char)commit.back())) commit.pop_back();
    if (commit.empty() || commit.find_first_of("/\\") != std::string::npos || commit == "." || commit == "..")
        fail(ref + ": \"" + commit.substr(0, 60) + "\" is not a snapshot name");
    const std::string snapshot = snapshots + "/" + commit;
    if (!is_dir(snapshot))
        fail(ref + " names snapshot " + commit + ", which is missing (" + snapshot + "; snapshots present: " +
             snapshot_list(snapshots) + ")");
    return snapshot;
}

}  // namespace olmo
