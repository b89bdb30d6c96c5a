// Entry point of the ClipEncoder plugin, libflowline_clip_encoder.so in the executor folder.
#include "flowline/clip_encoder/clip_encoder.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::clip_encoder::register_clip_encoder(registry); }
