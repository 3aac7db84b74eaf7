// model_folder.h: where a checkpoint's files are, given what the user passed as --model.
//
// A Hugging Face cache repository folder (~/.cache/huggingface/hub/models--org--name) holds no
// config.json itself: refs/main names a commit, and snapshots/<commit>/ holds that commit's files
// (symlinks into blobs/). Such a folder resolves to the snapshot refs/main names.
#pragma once
#include <string>

namespace olmo {

// `dir` itself when it has a config.json or does not look like a cache repository folder (no
// refs/ and no snapshots/); else DIR/snapshots/<refs/main>. A cache folder whose refs/main is
// missing, or names a snapshot that is not there, is an error naming the path.
std::string resolve_model_folder(const std::string& dir);

}  // namespace olmo
