#!/bin/sh
# egl_check.sh VIEW PNG_CHECK MODEL OUT: headless frames through EGL with no X server ($DISPLAY
# unset), as on a GPU server: a valid 640x480 PNG, not blank, the chain in it (render_check.sh's
# checks); and where with_display.sh finds an X server, byte for byte the frame of the GLFW path
# (both Mesa's software OpenGL here). SKIPPED (77) where there is no libEGL.so.1 or EGL display.
set -u
view=$1 check=$2 model=$3 out=$4
here=$(dirname "$0")
rm -rf "$out"
frames() {  # frames DIR [options]: two frames after half a simulated second, through EGL
  dir=$1
  shift
  env -u DISPLAY "$view" "$model" --headless --gl egl --frames 2 --warmup 0.5 --out "$out/$dir" "$@" 2>&1
}
log=$(frames egl)
status=$?
echo "$log"
if [ $status -ne 0 ]; then
  case "$log" in
    *"cannot open libEGL"* | *"no EGL display"*) echo "SKIPPED: no EGL here"; exit 77 ;;
  esac
  exit 1
fi
echo "$log" | grep -q "(EGL " || { echo "FAILED: the frames did not come through EGL"; exit 1; }
frames egl_hidden --hide-moving || exit 1
"$check" "$out/egl/frame_00001.png" "$out/egl_hidden/frame_00001.png" --size 640x480 || exit 1

"$here/with_display.sh" "$view" "$model" --headless --gl glfw --frames 2 --warmup 0.5 --out "$out/glfw"
status=$?
if [ $status -eq 77 ]; then
  echo "no X server: the frame was not compared with the GLFW path's"
  exit 0
fi
[ $status -eq 0 ] || exit 1
if cmp "$out/egl/frame_00001.png" "$out/glfw/frame_00001.png"; then
  echo "EGL frame: the same bytes as the GLFW frame"
else
  echo "FAILED: the EGL frame differs from the GLFW frame"
  exit 1
fi
