// Entry point of the SequenceClassifier plugin, libflowline_sequence_classifier.so in the executor folder.
#include "flowline/sequence_classifier/sequence_classifier.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::sequence_classifier::register_sequence_classifier(registry); }
