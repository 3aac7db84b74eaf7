// common.cpp: file helpers shared by the loaders.
#include "common.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace olmo {

std::string read_file(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) fail(path + ": cannot open (" + std::strerror(errno) + ")");
    if (S_ISDIR(st.st_mode)) fail(path + ": is a directory, expected a file");
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path + ": cannot open for reading");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace olmo
