// The teaching view as a page (collective --explain --html FILE): who sends to whom drawn as
// ranks on a circle, then every round's buffers as a grid (a row per rank, a column per slice,
// coloured by what the slice holds), stepped with buttons or the arrow keys (a few lines of
// inline script; PAGE.html#3 opens at round 3; without script every round shows), then the
// --explain text. One offline file.
#pragma once

#include <string>

#include "schedule/buffer_view.h"

namespace meshsim {

std::string teaching_html(const BufferView& v, const CollectiveSpec& spec, const std::string& title,
                          const std::string& explanation);

}  // namespace meshsim
