// Internal to flowline::models and flowline::tokenizers: reading a model folder's files as the untrusted
// input they are. Not installed.
//
// A checkpoint folder comes from a hub or a download: any of its names may be a FIFO, a device, a
// directory or a file of any size. Every read of a model folder's file goes through read_model_file(): it
// opens without blocking (a FIFO cannot hold the open), reads only a regular file (checked on the open
// descriptor, so the answer is about the file read), and only up to the bound of the file's kind — each
// refusal a flowline::Error naming the file and the bound. model.safetensors is mapped, not read: its
// reader (safetensors.cpp) makes the same checks on open and bounds its header.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace flowline::models {

// The kinds of file a model folder holds, each with its own size bound.
enum class ModelFile {
  Json,           // config.json, modules.json, the module configs, sentence_bert_config.json,
                  // tokenizer_config.json, config_sentence_transformers.json: 16 MiB
  TokenizerJson,  // tokenizer.json: 256 MiB (the largest hub tokenizers are a few tens of MiB)
  Vocabulary,     // vocab.txt: 64 MiB
};

// The most bytes a file of `kind` may hold, and how it is named in errors ("a JSON config").
std::uint64_t model_file_bound(ModelFile kind);
std::string_view model_file_kind(ModelFile kind);

// The whole of `path`, a regular file of at most model_file_bound(kind) bytes (a link to one is fine).
// Throws flowline::Error: "'PATH': cannot be read: ...", "'PATH': not a regular file (a FIFO); ...",
// "'PATH': 17179869184 bytes, over the 16 MiB a JSON config may hold".
std::string read_model_file(const std::filesystem::path& path, ModelFile kind);

// A JSON value of a model folder's file as an error message shows it: serialized, cut to 40 characters ("..." at
// the end of a longer one), so that a megabyte string in config.json does not become a megabyte message.
std::string json_excerpt(const boost::json::value& v);

// Whether a module path of modules.json stays inside the model folder: relative, and no ".." part.
bool stays_inside(const std::filesystem::path& relative);

}  // namespace flowline::models
