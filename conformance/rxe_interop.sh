#!/usr/bin/env bash
# Interoperability with Linux Soft-RoCE (the kernel's rdma_rxe), using the rxe-lab VM of the
# steering repo's shared/ folder. Needs root. Skips cleanly (exit 0, "SKIPPED") when the lab
# is not there; set RXE_LAB to point at it (default: ../shared/rxe-lab from the repo root).
#
# What it shows, all with real kernel packets on a real (tap) link:
#  1. Soft-RoCE accepts packets built by sluice-wire: `ibv_rc_pingpong` in the VM exits 0 only
#     if our RC SEND ONLY (to its QP, at the PSN it expects) and our RC ACKNOWLEDGE of its reply
#     are valid, ICRC included (rxe drops a packet with a bad ICRC).
#  2. sluice-wire verifies the ICRC of the packets Soft-RoCE builds, in captures taken at both
#     ends (`sluice pcap check`). (Live, on a UDP socket, it cannot: Soft-RoCE puts the
#     kernel's IP identification counter in the header, and the ICRC covers it.)
#  3. tshark decodes the same capture.
set -euo pipefail
cd "$(dirname "$0")/.."
. conformance/lab.sh
cargo build --release --locked -p sluice-cli --bin sluice --example rxe_pingpong
OUT=target/rxe-interop
rm -rf "$OUT"; mkdir -p "$OUT"

cat > "$OUT/guest.sh" <<'GUEST'
tcpdump -i ens3 -U -w /share/guest.pcap udp port 4791 2>/dev/null & TD=$!
sleep 1
timeout 120 ibv_rc_pingpong -d rxe0 -g 1 -n 1 -s 64; rc=$?
sleep 1; kill $TD; wait $TD 2>/dev/null
echo "rxe0 counters:"; for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "  $(basename $f) $(cat $f)"; done
exit $rc
GUEST

"$LAB/vm.sh" start "$OUT/guest.sh"
"$LAB/vm.sh" host dumpcap -q -i tap0 -f "udp port 4791" -w "$PWD/$OUT/host.pcapng" & DUMPCAP=$!
sleep 2
probe_rc=0
"$LAB/vm.sh" host target/release/examples/rxe_pingpong 192.0.2.1 192.0.2.2 64 || probe_rc=$?
guest_rc=0
"$LAB/vm.sh" wait > "$OUT/guest.log" || guest_rc=$?
sleep 1; kill "$DUMPCAP" 2>/dev/null || true; wait "$DUMPCAP" 2>/dev/null || true
cp "$LAB_DIR/share/guest.pcap" "$OUT/guest.pcap" 2>/dev/null || true
echo "--- guest (ibv_rc_pingpong, Soft-RoCE)"; cat "$OUT/guest.log"

status=0
[ "$probe_rc" = 0 ] || { echo "FAIL: the sluice-wire probe exited $probe_rc"; status=1; }
[ "$guest_rc" = 0 ] || { echo "FAIL: ibv_rc_pingpong exited $guest_rc (Soft-RoCE refused our packets?)"; status=1; }
for cap in "$OUT/host.pcapng" "$OUT/guest.pcap"; do
  echo "--- sluice pcap check $cap"
  target/release/sluice pcap check "$cap" || { echo "FAIL: $cap"; status=1; }
done
if command -v tshark >/dev/null; then
  echo "--- tshark (host side)"
  tshark -r "$OUT/host.pcapng" -T fields -e frame.number -e ip.src -e infiniband.bth.opcode \
    -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.aeth.syndrome 2>/dev/null
fi
[ "$status" = 0 ] && echo "rxe interop: PASS" || echo "rxe interop: FAIL"
exit "$status"
