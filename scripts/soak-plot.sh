#!/usr/bin/env bash
# Draws a soak's resources over time (apns-worker-bench soak): DIR/samples.csv -> DIR/soak.png,
# one panel per resource, every sample as a line and the judged ones (the quiet parts of normal
# cycles, which the slope test uses) as points. Installs gnuplot (Debian's gnuplot-nox) if missing.
#   scripts/soak-plot.sh DIR
set -euo pipefail
dir=${1:?"usage: $0 DIR (a soak's output directory, with samples.csv)"}
[ -f "$dir/samples.csv" ] || { echo "soak-plot: no $dir/samples.csv" >&2; exit 1; }
if ! command -v gnuplot > /dev/null; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends gnuplot-nox > /dev/null
fi
gnuplot <<PLOT
set datafile separator ","
set terminal pngcairo size 1400,1000 font ",10"
set output "$dir/soak.png"
set multiplot layout 3,2 title "apns-worker soak: $(head -n 1 "$dir/summary.txt" 2>/dev/null | sed 's/"/\\"/g')"
set xlabel "minutes"
set key top left
set grid
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
judged(column) = (strcol(5) eq "1") ? column : NaN
set title "broker channels (the worker's connections)"
plot "$dir/samples.csv" skip 1 using (\$1/60):7 with lines title "all", '' skip 1 using (\$1/60):(judged(\$7)) with points pt 7 title "judged"
set title "broker connections"
plot "$dir/samples.csv" skip 1 using (\$1/60):6 with lines title "all", '' skip 1 using (\$1/60):(judged(\$6)) with points pt 7 title "judged"
set title "open file descriptors"
plot "$dir/samples.csv" skip 1 using (\$1/60):8 with lines title "all", '' skip 1 using (\$1/60):(judged(\$8)) with points pt 7 title "judged"
set title "threads"
plot "$dir/samples.csv" skip 1 using (\$1/60):9 with lines title "all", '' skip 1 using (\$1/60):(judged(\$9)) with points pt 7 title "judged"
set title "resident memory (MiB)"
plot "$dir/samples.csv" skip 1 using (\$1/60):10 with lines title "all", '' skip 1 using (\$1/60):(judged(\$10)) with points pt 7 title "judged"
set title "jobs in flight; bundles held and paused"
plot "$dir/samples.csv" skip 1 using (\$1/60):11 with lines title "in flight", '' skip 1 using (\$1/60):12 with steps title "held", '' skip 1 using (\$1/60):13 with steps title "paused"
unset multiplot
PLOT
echo "$dir/soak.png"
