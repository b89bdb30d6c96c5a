// Entry point of the PgVectorWriter plugin, libflowline_pg_vector_writer.so in the executor folder.
#include "flowline/pgvector_writer/pgvector_writer.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::pgvector_writer::register_pgvector_writer(registry); }
