#!/bin/bash
# veth-bench.sh: ib_write_bw (64 KiB, 20000 iterations) between two network
# namespaces joined by a veth pair (MTU 9000, so RoCE MTU 4096), and iperf3
# moving the same bytes over the same veth right after, three rounds.
# Root only; needs iperf3 (apt-get install iperf3). docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)
trap 'ip netns del goroce-vb-a 2>/dev/null || true; ip netns del goroce-vb-b 2>/dev/null || true; rm -rf "$bin"' EXIT
go build -o "$bin" ./cmd/ib_write_bw
ip netns add goroce-vb-a
ip netns add goroce-vb-b
ip link add grvb-va type veth peer name grvb-vb
ip link set grvb-va netns goroce-vb-a
ip link set grvb-vb netns goroce-vb-b
ip -n goroce-vb-a addr add 198.18.8.1/24 dev grvb-va
ip -n goroce-vb-b addr add 198.18.8.2/24 dev grvb-vb
for n in a b; do
	ip -n goroce-vb-$n link set lo up
	ip -n goroce-vb-$n link set grvb-v$n mtu 9000 up
done
iters=20000 size=65536
for round in 1 2 3; do
	ip netns exec goroce-vb-a "$bin/ib_write_bw" -d 198.18.8.1 -n $iters -s $size >/dev/null 2>&1 &
	srv=$!
	sleep 0.3
	g=$(ip netns exec goroce-vb-b "$bin/ib_write_bw" -d 198.18.8.2 -n $iters -s $size 198.18.8.1 | awk '/#bytes/ {getline; print $4}')
	wait $srv
	ip netns exec goroce-vb-a iperf3 -s -1 -B 198.18.8.1 >/dev/null 2>&1 &
	srv=$!
	sleep 0.3
	t=$(ip netns exec goroce-vb-b iperf3 -c 198.18.8.1 -n $((iters * size)) -l $size -J |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8/1048576)')
	wait $srv
	python3 -c "print(f'round $round: goroce {$g:.0f} MiB/s, TCP {$t:.0f} MiB/s, goroce/TCP {$g/$t:.2f}x')"
done
