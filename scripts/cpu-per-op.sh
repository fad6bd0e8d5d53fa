#!/bin/bash
# cpu-per-op.sh TEST_BINARY BENCH N: the CPU one op of a Go benchmark costs, split by
# process (the test process, mariadbd, redis-server), as a run of N ops minus a run of
# one (the benchmark's setup), over N-1. Build the binary with `go test -c`, run it
# from its package's directory, on a machine with nothing else running (GNU time is
# needed: apt install time):
#
#   go test -c -o /tmp/app.test ./internal/app && cd internal/app
#   ../../scripts/cpu-per-op.sh /tmp/app.test BenchmarkDispatchCompleteCycleParallel 6000
set -euo pipefail
bin=$1 bench=$2 n=$3
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; } # utime + stime, in ticks
my=$(pgrep -x mariadbd || pgrep -x mysqld)
rd=$(pgrep -x redis-server | head -1)
run() {
	local m0 r0 m1 r1 out
	m0=$(cpu "$my") r0=$(cpu "$rd")
	out=$({ /usr/bin/time -f "TIME %U %S" "$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "${1}x"; } 2>&1)
	m1=$(cpu "$my") r1=$(cpu "$rd")
	echo "$(echo "$out" | awk '/^Benchmark/ {print $3; exit}') $(echo "$out" | awk '/^TIME/ {print $2 + $3}') $((m1 - m0)) $((r1 - r0))"
}
read -r _ g1 m1 r1 <<<"$(run 1)"
read -r ns g m r <<<"$(run "$n")"
awk -v n="$((n - 1))" -v t="$tick" -v ns="$ns" -v g="$g" -v g1="$g1" -v m="$m" -v m1="$m1" -v r="$r" -v r1="$r1" 'BEGIN {
	go = (g - g1) * 1e6 / n; my = (m - m1) / t * 1e6 / n; rd = (r - r1) / t * 1e6 / n
	printf "wall %.0f µs/op; CPU µs/op: go %.0f, mysql %.0f, redis %.0f, total %.0f\n", ns / 1000, go, my, rd, go + my + rd
}'
