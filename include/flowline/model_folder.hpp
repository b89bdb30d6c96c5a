// flowline/model_folder.hpp — where a `model` parameter points: a checkpoint folder, or a Hugging Face model
// name (`sentence-transformers/all-MiniLM-L6-v2`) that a sentence-transformers or huggingface_hub user
// already has in the local Hugging Face cache.
//
// The one place that turns what a user wrote into a folder: flow validation calls locate_model() for
// parameters declared ParamSpec::hub_model_name() (the SentenceEncoder's and the Reranker's `model`), so the
// executors receive the folder; the checkpoint reader (flowline/models/checkpoint.hpp) calls it to say where
// it looked when a name is not there. Only reads the file system (no network); safe on any thread.
//
// The cache, as huggingface_hub lays it out: HUB/models--ORG--NAME/snapshots/<revision>/ holds the files of
// each revision downloaded, refs/main the revision `main` pointed at. HUB is $HF_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace flowline {

// The Hugging Face hub cache folder of this environment (see above); it need not exist.
std::filesystem::path hugging_face_hub_cache();

// Whether `text` is written as a hub model name, ORG/NAME: two parts of letters, digits, '-', '_' and '.',
// neither "." nor "..", and nothing else (no leading '/', no "./").
bool is_hub_model_name(std::string_view text);

// What locate_model() found.
struct ModelLocation {
  std::filesystem::path folder;  // the folder to read; empty when `problem` is set
  std::string problem;           // what is wrong and what to do, naming every place looked at
};

// `folder` when it exists (`written` as a path, already made absolute: relative to the flow file's folder or
// the current one); else, when `written` is a hub model name, the snapshot of that name in the cache: the
// revision refs/main names when it is there, else the only or the newest snapshot; else `folder` again, for
// the checkpoint reader to refuse with its own message. `problem` is set only for a name found nowhere.
ModelLocation locate_model(std::string_view written, const std::filesystem::path& folder);

// The file that marks a checkpoint this project made with random weights of a real shape (the tests' tiny
// models, scripts/make_tiny_models.py): what such a model computes is meaningless.
inline constexpr const char* kRandomWeightsMarker = "RANDOM_WEIGHTS";

// A warning for an executor to log when it starts on such a checkpoint (its folder holds the marker), so that
// a flow shipped with a test model (flows/rerank.yml) says its answers mean nothing; empty otherwise.
// `what`: "scores", "embeddings". `executor` and `parameter` name the --set that gives it another model.
std::string random_weights_warning(const std::filesystem::path& folder, std::string_view executor,
                                   std::string_view parameter, std::string_view what);

}  // namespace flowline
