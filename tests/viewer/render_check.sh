#!/bin/sh
# render_check.sh VIEW PNG_CHECK MODEL OUT [viewer options]
# Renders MODEL headless twice, as it is and without its moving bodies, and checks with png_check
# that the frame is a valid 640x480 PNG, not blank, and that the chain covers part of it.
set -eu
view=$1 check=$2 model=$3 out=$4
shift 4
rm -rf "$out"
"$view" "$model" --headless --frames 2 --out "$out/shown" "$@"
"$view" "$model" --headless --frames 2 --out "$out/hidden" --hide-moving "$@"
"$check" "$out/shown/frame_00001.png" "$out/hidden/frame_00001.png" --size 640x480
