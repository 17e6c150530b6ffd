#!/bin/sh
# video_check.sh VIEW FAKE_FFMPEG_DIR DIR
# --video with a stand-in ffmpeg that stores what it is sent: 3 raw RGB frames of 64x48 must
# arrive (the real ffmpeg then encodes them; the command line is in viewer/view.c).
set -eu
view=$1 fake=$2 dir=$3
rm -rf "$dir"
PATH="$fake:$PATH" "$view" chain:20,damping=0.05 --headless --frames 3 --size 64x48 --video --out "$dir"
size=$(wc -c < "$dir/chainfd.mp4")
[ "$size" -eq $((3 * 64 * 48 * 3)) ] || { echo "FAIL: ffmpeg got $size bytes, expected $((3 * 64 * 48 * 3))"; exit 1; }
[ -f "$dir/frame_00002.png" ] || { echo "FAIL: no PNG frames beside the video"; exit 1; }
echo "video pipe: $size bytes for 3 frames of 64x48"
