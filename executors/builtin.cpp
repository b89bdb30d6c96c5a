#include "builtin.hpp"

namespace flowline {

void register_builtin_executors(Registry& registry) {
  builtin::register_text_splitter(registry);
  builtin::register_jsonl_writer(registry);
  builtin::register_tsv_writer(registry);
  builtin::register_testing_executors(registry);
}

}  // namespace flowline
