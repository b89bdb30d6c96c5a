// profile.hpp — `flowline profile`: what a flow costs at several batch sizes, and the largest that fits.
//
// For each batch size the launcher runs the flow in a fresh child process (`flowline run ... --set
// EXECUTOR.batch_size=B --request-size B --stats-json`), so every figure starts from a clean GPU and
// a clean process: memory in use before start, memory to load the model, peak memory for a batch, total
// peak, peak RAM, total time, mean batch time, documents. It then fits peak batch memory per document and
// per token, recommends the largest batch size that fits a memory budget, prints a report and writes it
// as JSON and as a PNG plot (memory and throughput against batch size). Without a GPU the same report
// gives time and host RAM and says that GPU figures are not available. The files the flow's writers would
// write (JsonlWriter, TsvWriter, ...) go to the child runs' scratch folder and are deleted with it: profile
// writes nowhere the flow names (outputs.hpp).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace flowline::cli {

struct ProfileOptions {
  std::string flow;
  std::string input;
  std::string input_format;  // empty: run's default (jsonl for a .jsonl input, else lines)
  std::string endpoint = "/";
  std::vector<std::size_t> batch_sizes;
  std::string executor;          // empty: the one executor with a batch_size parameter
  double memory_fraction = 0.9;  // budget: this share of the memory free at start
  std::string json = "profile.json";
  std::string plot = "profile.png";
  std::vector<std::string> sets;  // extra EXECUTOR.PARAM=VALUE overrides for every run
  std::string log_level = "warn";
};

// Runs the profile; returns a launcher exit code and prints errors to stderr.
int command_profile(const ProfileOptions& options);

}  // namespace flowline::cli
