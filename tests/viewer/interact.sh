#!/bin/sh
# interact.sh VIEW X_INPUT PNG_CHECK MODEL DIR
# Opens MODEL in the window and drives it with synthetic keys and mouse (x_input): next dynamics,
# pause, single step, resume, select a body (double-click), pull it (Ctrl + right drag), a
# screenshot, reset, quit (Ctrl+Q); then checks the viewer's log of what it did.
set -u
view=$1 xin=$2 check=$3 model=$4 dir=$5
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
"$view" "$model" --size 640x480 --no-wave --run-for 60 > log.txt 2>&1 &
pid=$!
"$xin" chainfd-view 30 key:b wait:0.3 key:space wait:0.3 key:Right wait:0.2 key:Right wait:0.2 \
  key:space wait:0.3 dclick:1,320,200 wait:0.3 drag:3,320,200,420,200,ctrl wait:0.3 key:p wait:0.5 \
  key:BackSpace wait:0.3 key:q+ctrl
xs=$?
wait $pid
vs=$?
cat log.txt
[ $xs -eq 0 ] || { echo "FAIL: x_input exited $xs"; exit 1; }
[ $vs -eq 0 ] || { echo "FAIL: chainfd-view exited $vs"; exit 1; }
status=0
for want in "dynamics: cpu.abia" "paused at t = " "step: t = " "running" "selected body link" \
            "perturbation of body link[0-9]* released (peak force [0-9.e+-]*[1-9]" \
            "screenshot: chainfd-view-000.png" "reset" "window: .* state finite"; do
  grep -q "$want" log.txt || { echo "FAIL: the log has no line matching '$want'"; status=1; }
done
"$check" chainfd-view-000.png --size 640x480 || status=1
exit $status
