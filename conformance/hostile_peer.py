#!/usr/bin/env python3
"""A hostile or broken RoCE v2 peer, aimed at a live `sluice perf` run between two test
namespaces (crates/cli/tests/hostile.rs, scripts/soak).

Usage:
  hostile_peer.py roce --iface DEV --target IP --allow CIDR [--attacks A,B,..]
                       [--flood-count N] [--flood-seconds S] [--learn-seconds S] [--spray N]
  hostile_peer.py tcp  --target IP --allow CIDR --port P --abuse KIND [--hold-seconds S]

`roce` runs in the namespace of one end, on its side of the veth: it sniffs the live queue
pairs' packets (QPNs, PSNs, the R_Key and address of the WRITEs) and then forges packets to
the other end (TARGET), each with a valid ICRC (scapy's BTH layer computes it, as in
scapy_icrc.py). Sluice computes the ICRC over the headers the kernel writes (Don't-Fragment
set, IP identification 0), so the forged packets carry DF and id 0 too, and go out whole on
an AF_PACKET socket (an IP raw socket would let the kernel pick an identification).

`tcp` abuses perftest's TCP connection exchange on TARGET:PORT.

Every address sent to must lie inside --allow (the test's namespaces): anything else is
refused before a packet leaves. Every loop is bounded in count and in time.
"""
import argparse
import ipaddress
import os
import random
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scapy_build import IMM, RETH, padded  # noqa: E402  (also loads scapy's RoCE contrib)

from scapy.all import IP, UDP, AsyncSniffer, Ether, Raw, bind_layers  # noqa: E402
from scapy.contrib.roce import AETH, BTH  # noqa: E402

ROCE_PORT = 4791
MAX_FLOOD = 100_000  # the bound, whatever is asked
WRITE_ONLY, WRITE_ONLY_IMM, SEND_ONLY, ACK = 0x0A, 0x0B, 0x04, 0x11
WRITE_OPS = {0x06, 0x0A, 0x0B}  # FIRST, ONLY, ONLY with immediate: the ones with a RETH
# AETH syndromes: ACK (credits 31), NAK PSN sequence error, NAK remote access error.
SYN_ACK, SYN_NAK_SEQ, SYN_NAK_ACCESS = 0x1F, 0x60, 0x62


def log(*args):
    print("hostile:", *args, file=sys.stderr, flush=True)


def check_allowed(ip: str, allow: str) -> None:
    """Refuse any destination outside the test's own network."""
    if ipaddress.ip_address(ip) not in ipaddress.ip_network(allow, strict=False):
        sys.exit(f"hostile: refusing to send to {ip}: outside {allow}")


class Live:
    """What the sniffer learned of the run: the packets heading to the target (templates
    and replays), the target's MAC, the last WRITE's R_Key, address and length, and the
    immediate of the last WRITE ONLY with immediate."""

    def __init__(self):
        self.to_target = []
        self.target_mac = None
        self.our_mac = None
        self.our_ip = None
        self.reth = None  # (va, rkey, length) of the newest WRITE to the target
        self.imm = None  # the immediate of the newest WRITE ONLY with immediate

    def ready(self) -> bool:
        return bool(self.to_target) and self.target_mac is not None

    def newest(self):
        return self.to_target[-1]


def learn(iface: str, target: str, seconds: float, want_reth: bool, pause_pid: int = 0) -> Live:
    """Sniff the run on `iface` until both directions (and a RETH, when wanted) were seen.
    With `pause_pid`, that process (the live sender) is then stopped (SIGSTOP; the caller
    resumes it) and the sniffer drains: the newest PSN seen is then the last one sent, so a
    spray from it reaches the PSN the target expects before anything else does."""
    live = Live()
    ref = []  # the first PSN seen to the target: newest is the furthest past it, mod 2^24

    def take(pkt):
        if IP not in pkt or UDP not in pkt or BTH not in pkt:
            return
        if pkt[IP].dst == target:
            live.our_mac, live.our_ip = pkt[Ether].src, pkt[IP].src
            if pkt[BTH].opcode in WRITE_OPS:
                live.reth = struct.unpack("!QII", bytes(pkt[BTH].payload)[:16])
                live.imm = None
            if pkt[BTH].opcode == WRITE_ONLY_IMM:
                live.imm = struct.unpack("!I", bytes(pkt[BTH].payload)[16:20])[0]
            ref.append(pkt[BTH].psn) if not ref else None
            ahead = lambda p: (p[BTH].psn - ref[0]) % (1 << 24)  # noqa: E731
            if len(live.to_target) < 256:
                live.to_target.append(pkt)
            if ahead(pkt) >= ahead(live.to_target[-1]):
                live.to_target[-1] = pkt
        elif pkt[IP].src == target:
            live.target_mac = pkt[Ether].src

    def done():
        return live.ready() and (live.reth is not None or not want_reth) and len(live.to_target) >= 8

    sniffer = AsyncSniffer(iface=iface, prn=take, store=False,
                           lfilter=lambda p: UDP in p and ROCE_PORT in (p[UDP].sport, p[UDP].dport))
    sniffer.start()
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)
    if pause_pid and done():
        os.kill(pause_pid, signal.SIGSTOP)
        time.sleep(0.5)  # what was in flight arrives, the sniffer catches up
    sniffer.stop()
    if not live.ready():
        sys.exit(f"hostile: saw no RoCE traffic both ways with {target} in {seconds}s")
    log(f"learned: target qpn {live.newest()[BTH].dqpn:#x} psn {live.newest()[BTH].psn:#x}"
        f" reth {live.reth}")
    return live


def frame(live: Live, target: str, sport: int, bth: BTH, body: bytes = b""):
    """A RoCE frame to the target as the kernel would write it (DF, id 0): scapy fills the
    lengths, checksums and the ICRC when it is turned into bytes."""
    return (Ether(src=live.our_mac, dst=live.target_mac)
            / IP(src=live.our_ip, dst=target, id=0, flags="DF", ttl=64)
            / UDP(sport=sport, dport=ROCE_PORT, chksum=0) / bth / Raw(body))


def bth(opcode, qpn, psn, pad=0, **kw):
    return BTH(opcode=opcode, dqpn=qpn & 0xFFFFFF, psn=psn & 0xFFFFFF, padcount=pad, ackreq=1, **kw)


def write_only(live, target, sport, qpn, psn, va, rkey, payload):
    body, pad = padded(payload)
    return frame(live, target, sport, bth(WRITE_ONLY, qpn, psn, pad), RETH(va, rkey, len(payload)) + body)


def forge(kind: str, live: Live, target: str) -> list:
    """The frames of one attack `kind`, aimed at the queue pair last seen."""
    t = live.newest()
    qpn, psn, sport = t[BTH].dqpn, t[BTH].psn, t[UDP].sport
    va, rkey, length = live.reth or (0x1000, 0x1234, 64)
    far = [psn + 0x400000, psn - 0x400000, psn + 0x7FFFFF, psn - 0x10000]
    if kind == "garbage":  # not RoCE at all: random bytes to the RoCE port, no ICRC
        return [Ether(src=live.our_mac, dst=live.target_mac)
                / IP(src=live.our_ip, dst=target, id=0, flags="DF")
                / UDP(sport=sport, dport=ROCE_PORT) / Raw(os.urandom(random.randint(0, 300)))
                for _ in range(32)]
    if kind == "malformed":  # valid ICRC, invalid headers
        return [frame(live, target, sport, bth(0x15, qpn, psn)),  # reserved opcode
                frame(live, target, sport, bth(0x0C, qpn, psn, pad=3), RETH(va, rkey, 4)),
                frame(live, target, sport, bth(WRITE_ONLY, qpn, psn), b"\0" * 8),  # short RETH
                frame(live, target, sport, bth(SEND_ONLY, qpn, psn, version=2), b"abcd")]
    if kind == "unknown_qpn":
        return [frame(live, target, sport, bth(op, q, psn + 1), ext)
                for q in (0xABCDE, 0xFFFFFF, qpn ^ 0x800000, 0)
                for op, ext in ((SEND_ONLY, b"hello"), (WRITE_ONLY, RETH(va, rkey, 0)))]
    if kind == "far_psn":  # sequence errors and old duplicates, never the expected PSN
        return [write_only(live, target, sport, qpn, p, va, rkey, b"F" * 64) for p in far]
    if kind == "bad_rkey":  # bad R_Key and out-of-bounds addresses, at far PSNs
        return [write_only(live, target, sport, qpn, p, a, k, b"K" * n)
                for p in far
                for a, k, n in ((va, rkey ^ 0xFFFF, 64), (va + (1 << 40), rkey, 64),
                                (va + max(length, 1) - 1, rkey, 4096), (2**64 - 8, rkey, 64))]
    if kind == "forged_ack":  # ACKs and NAKs for PSNs that are not outstanding
        return [frame(live, target, sport, bth(ACK, qpn, p), bytes(AETH(syndrome=s, msn=random.getrandbits(24))))
                for p in far for s in (SYN_ACK, SYN_NAK_SEQ, SYN_NAK_ACCESS)]
    if kind == "replay":  # the run's own packets again, byte for byte (valid ICRCs)
        return list(live.to_target)
    sys.exit(f"hostile: unknown attack {kind}")


def spray(live: Live, target: str, count: int, bad_rkey: bool, imm: bool = False) -> list:
    """WRITE_ONLYs at the PSNs just past the newest seen, ascending: one of them lands on
    the PSN the target expects (the live sender is overtaken). With a bad R_Key that is a
    fatal access error under RoCE; with the live R_Key it replaces a message's data. With
    `imm`, WRITE ONLY with immediate, the newest one's immediate (or 0): each takes a
    receive and completes at the target as the message it replaces would have."""
    t = live.newest()
    qpn, psn, sport = t[BTH].dqpn, t[BTH].psn, t[UDP].sport
    va, rkey, length = live.reth
    rkey = rkey ^ 0x5A5A if bad_rkey else rkey
    data = b"\xEE" * length  # the forged data: recognisable, never what perf writes
    if not imm:
        return [write_only(live, target, sport, qpn, psn + i, va, rkey, data) for i in range(1, count + 1)]
    body, pad = padded(data)
    ext = RETH(va, rkey, length) + IMM(live.imm or 0)
    return [frame(live, target, sport, bth(WRITE_ONLY_IMM, qpn, psn + i, pad), ext + body)
            for i in range(1, count + 1)]


def spray_send(live: Live, target: str, count: int, length: int) -> list:
    """SEND_ONLYs at the PSNs just past the newest seen, ascending: one lands on the PSN the
    target expects and takes the receive meant for the live sender's message (RoCE cannot
    tell); its bytes are recognisable, never a pattern perf writes."""
    t = live.newest()
    qpn, psn, sport = t[BTH].dqpn, t[BTH].psn, t[UDP].sport
    body, pad = padded(b"\xEE" * length)
    return [frame(live, target, sport, bth(SEND_ONLY, qpn, psn + i, pad), body)
            for i in range(1, count + 1)]


class Wire:
    """An AF_PACKET socket on the interface: frames leave exactly as built."""

    def __init__(self, iface: str):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.sock.bind((iface, 0))
        self.sent = 0

    def send(self, raw: bytes) -> None:
        try:
            self.sock.send(raw)
            self.sent += 1
        except OSError:  # a full queue under the flood: drop, as the wire would
            pass


def flood(wire: Wire, frames: list, count: int, seconds: float) -> None:
    """Sends the frames round and round, at most `count` in all and for at most `seconds`."""
    raws = [bytes(f) for f in frames]
    deadline = time.monotonic() + seconds
    for i in range(min(count, MAX_FLOOD)):
        if i % 256 == 0 and time.monotonic() > deadline:
            break
        wire.send(raws[i % len(raws)])


def roce(args) -> None:
    global ROCE_PORT
    ROCE_PORT = args.roce_port
    # scapy dissects a BTH after UDP port 4791 only: teach it the run's port.
    bind_layers(UDP, BTH, dport=ROCE_PORT)
    check_allowed(args.target, args.allow)
    kinds = [k for k in args.attacks.split(",") if k]
    # Only the sprays need the live R_Key: the others fall back to made-up values (the
    # target may be the requester, which receives no WRITEs).
    needs_reth = any(k in ("spray_bad_rkey", "spray_replace", "spray_replace_imm") for k in kinds)
    try:
        live = learn(args.iface, args.target, args.learn_seconds, needs_reth, args.pause_pid)
        check_allowed(live.newest()[IP].dst, args.allow)
        attack(args, kinds, live)
    finally:
        if args.pause_pid:
            os.kill(args.pause_pid, signal.SIGCONT)


def attack(args, kinds, live) -> None:
    wire = Wire(args.iface)
    every = []
    for kind in kinds:
        if kind == "flood":
            continue
        if kind in ("spray_bad_rkey", "spray_replace", "spray_replace_imm"):
            frames = spray(live, args.target, args.spray, kind == "spray_bad_rkey",
                           kind == "spray_replace_imm")
        elif kind == "spray_send":
            frames = spray_send(live, args.target, args.spray, args.spray_len)
        else:
            frames = forge(kind, live, args.target)
        every.extend(frames)
        for f in frames:
            wire.send(bytes(f))
        log(f"{kind}: {len(frames)} frames")
    if "flood" in kinds and every:
        flood(wire, every, args.flood_count, args.flood_seconds)
    log(f"sent {wire.sent} frames")


def tcp(args) -> None:
    """One abuse of the TCP exchange; the server's reaction is the test's to judge."""
    check_allowed(args.target, args.allow)
    addr = (args.target, args.port)
    version = b"6.06".ljust(16, b"\0")
    kind = args.abuse
    if kind == "many":  # connections that say nothing, held open
        conns = []
        for _ in range(min(args.connections, 512)):
            try:
                conns.append(socket.create_connection(addr, timeout=2))
            except OSError:
                break
        log(f"many: {len(conns)} connections open")
        time.sleep(args.hold_seconds)
        return
    s = socket.create_connection(addr, timeout=5)
    if kind == "garbage":
        # Random bytes, but never a version text: random ones began with a number of 5.70 or
        # more (a digit 6-9 first, about 1 run in 60), which is a valid version, and the
        # server then failed later, at the page size.
        s.sendall(b"\xfe" + os.urandom(15) + os.urandom(200))
    elif kind == "half_close":  # half a version message, then the connection closes
        s.sendall(version[:7])
    elif kind == "half_hold":  # half a version message, then silence with the connection open
        s.sendall(version[:7])
        time.sleep(args.hold_seconds)
    elif kind == "huge_page":  # a valid version, then a page size of 2 GiB - 4 KiB (positive as an i32)
        s.sendall(version)
        s.recv(16)
        s.sendall(struct.pack("!I", 0x7FFFF000) + struct.pack("!I", 64))
    elif kind == "huge_cache_line":
        s.sendall(version)
        s.recv(16)
        s.sendall(struct.pack("!I", 4096) + struct.pack("!I", 0x7FFFFFC0))
    else:
        sys.exit(f"hostile: unknown abuse {kind}")
    try:  # give the server a moment to read, then see what it says (or that it closed)
        s.settimeout(2)
        s.recv(4096)
    except OSError:
        pass
    s.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("roce")
    r.add_argument("--iface", required=True)
    r.add_argument("--target", required=True)
    r.add_argument("--allow", required=True)
    r.add_argument("--attacks", default="garbage,malformed,unknown_qpn,far_psn,bad_rkey,forged_ack,replay,flood")
    r.add_argument("--flood-count", type=int, default=20_000)
    r.add_argument("--flood-seconds", type=float, default=3.0)
    r.add_argument("--learn-seconds", type=float, default=10.0)
    r.add_argument("--spray", type=int, default=2000)
    r.add_argument("--spray-len", type=int, default=64, help="payload bytes of each spray_send SEND")
    r.add_argument("--roce-port", type=int, default=ROCE_PORT, help="the run's RoCE UDP port")
    r.add_argument("--pause-pid", type=int, default=0,
                   help="stop this process (the live sender) from learning to the end of the attack")
    t = sub.add_parser("tcp")
    t.add_argument("--target", required=True)
    t.add_argument("--allow", required=True)
    t.add_argument("--port", type=int, default=18515)
    t.add_argument("--abuse", required=True)
    t.add_argument("--hold-seconds", type=float, default=5.0)
    t.add_argument("--connections", type=int, default=100)
    args = p.parse_args()
    random.seed(0x51C)
    roce(args) if args.cmd == "roce" else tcp(args)


if __name__ == "__main__":
    main()
