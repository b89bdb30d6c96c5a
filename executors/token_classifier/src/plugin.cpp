// Entry point of the TokenClassifier plugin, libflowline_token_classifier.so in the executor folder.
#include "flowline/token_classifier/token_classifier.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::token_classifier::register_token_classifier(registry); }
