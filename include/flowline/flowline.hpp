// flowline/flowline.hpp — everything a program using flowline needs, in one include.
#pragma once

#include "flowline/document.hpp"
#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/flow.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/flow_file_limits.hpp"
#include "flowline/flow_results.hpp"
#include "flowline/io.hpp"
#include "flowline/params.hpp"
#include "flowline/plugin.hpp"
#include "flowline/queue.hpp"
#include "flowline/registry.hpp"
#include "flowline/text.hpp"
#include "flowline/version.hpp"
