// Registration functions of the executors compiled into flowline::core. Private to the library:
// register_builtin_executors() (flowline/registry.hpp) calls them all.
#pragma once

#include "flowline/registry.hpp"

namespace flowline::builtin {

void register_text_splitter(Registry& registry);
void register_jsonl_writer(Registry& registry);
void register_tsv_writer(Registry& registry);
void register_no_op(Registry& registry);
void register_text_stats(Registry& registry);

}  // namespace flowline::builtin
