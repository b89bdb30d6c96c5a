// Entry point of the SentenceEncoder plugin, libflowline_sentence_encoder.so in the executor folder: how the
// launcher and Registry::global() load SentenceEncoder (a program may link flowline::sentence_encoder instead).
#include "flowline/sentence_encoder/sentence_encoder.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::sentence_encoder::register_sentence_encoder(registry); }
