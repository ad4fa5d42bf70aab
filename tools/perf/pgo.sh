#!/bin/bash
# pgo.sh: regenerate cmd/default.pgo, the CPU profile every goroce command
# is built with (profile-guided optimization: go build reads each main
# package's default.pgo, here a link to cmd/default.pgo). It runs the
# tools between two processes on loopback, each end writing a CPU profile
# (GOROCE_CPUPROFILE): the 2-byte latency test, 64-byte and 64 KiB WRITEs,
# over UDP and over the same-host path, and merges the profiles. About a
# minute; no root. docs/PERFORMANCE.md says what it is worth.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -pgo=off -o "$bin" ./cmd/ib_write_lat ./cmd/ib_write_bw
port=$((23000 + RANDOM % 1000))
# run NAME TOOL ARGS...: one test, both ends profiled.
run() {
	local name=$1 tool=$2
	shift 2
	port=$((port + 1))
	GOROCE_CPUPROFILE="$bin/$name.server.prof" "$bin/$tool" -p $port -d 127.0.0.1 "$@" >/dev/null &
	local srv=$!
	sleep 0.3
	GOROCE_CPUPROFILE="$bin/$name.client.prof" "$bin/$tool" -p $port -d 127.0.0.2 "$@" 127.0.0.1 >/dev/null
	wait $srv
}
run lat ib_write_lat -s 2 -n 1000000
run rate ib_write_bw -s 64 -n 10000000
run bw ib_write_bw -s 65536 -n 300000
GOROCE_SAMEHOST=1 run shlat ib_write_lat -s 2 -n 1000000
GOROCE_SAMEHOST=1 run shbw ib_write_bw -s 65536 -n 1000000
go tool pprof -proto "$bin"/*.prof >cmd/default.pgo
echo "cmd/default.pgo: $(stat -c %s cmd/default.pgo) bytes from $(ls "$bin"/*.prof | wc -l) profiles"
