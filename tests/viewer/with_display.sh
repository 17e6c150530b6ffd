#!/bin/sh
# Runs "$@" with an X display for chainfd-view: the session's own, or else a virtual one from
# xvfb-run; exits 77 (ctest: SKIPPED) when there is neither.
if [ -n "${DISPLAY:-}" ]; then
  exec "$@"
fi
if command -v xvfb-run >/dev/null 2>&1; then
  exec xvfb-run -a -s "-screen 0 1280x1024x24" "$@"
fi
echo "no X display and no xvfb-run: skipped"
exit 77
