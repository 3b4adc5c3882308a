// What a build says about itself (`bigpeer version`): release builds made by scripts/package-deb.sh
// and deploy/docker/Dockerfile define these with -Xcc -D...; a plain `swift build` leaves them unknown.
#ifndef BIGPEER_BUILD_INFO_H
#define BIGPEER_BUILD_INFO_H

#ifndef BIGPEER_COMMIT
#define BIGPEER_COMMIT "unknown"
#endif
#ifndef BIGPEER_BUILD_DATE
#define BIGPEER_BUILD_DATE "unknown"
#endif

static inline const char *bigpeer_build_commit(void) { return BIGPEER_COMMIT; }
static inline const char *bigpeer_build_date(void) { return BIGPEER_BUILD_DATE; }

#endif
