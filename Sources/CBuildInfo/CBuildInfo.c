// The build information lives in include/CBuildInfo.h (static inline: the values are those of the
// build that compiles the importing Swift module). SwiftPM needs one source file per C target.
#include "CBuildInfo.h"
