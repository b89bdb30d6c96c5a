// register_builtin_executors(): the executors compiled into flowline::core (user-facing, no model).
#include "builtin.hpp"

namespace flowline {

void register_builtin_executors(Registry& registry) {
  builtin::register_text_splitter(registry);
  builtin::register_jsonl_writer(registry);
  builtin::register_tsv_writer(registry);
  builtin::register_no_op(registry);
  builtin::register_text_stats(registry);
}

}  // namespace flowline
