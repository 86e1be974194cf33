#!/usr/bin/env python3
"""Build RoCE v2 packets with scapy (its BTH layer computes the ICRC) and write them to a
capture, with the verdict `sluice pcap check` must reach for each frame.

Usage: scapy_build.py OUT.pcap OUT.json
The JSON is a list of {"frame": N, "expect": "ok" | "icrc" | "malformed" | "other", "what": ...}.
Extension headers are packed here by hand from the IBTA layouts (scapy has layers only for
the BTH, AETH and the CNP), so this is an independent encoder too.
"""
import json
import struct
import sys

from scapy.all import IP, UDP, Ether, IPv6, Raw, wrpcap
from scapy.config import conf
from scapy.main import load_contrib

load_contrib("roce")
from scapy.contrib.roce import AETH, BTH, cnp  # noqa: E402

conf.verb = 0

RETH = lambda va, rkey, length: struct.pack("!QII", va, rkey, length)  # noqa: E731
ATOMIC = lambda va, rkey, swap, cmp: struct.pack("!QIQQ", va, rkey, swap, cmp)  # noqa: E731
IMM = lambda v: struct.pack("!I", v)  # noqa: E731
DETH = lambda qkey, src_qp: struct.pack("!II", qkey, src_qp & 0xFFFFFF)  # noqa: E731


def padded(payload: bytes):
    pad = (4 - len(payload) % 4) % 4
    return payload + b"\0" * pad, pad


def ip_layers(v6: bool, sport: int, dport: int = 4791):
    if v6:
        ip = IPv6(src="fd00::1", dst="fd00::2", tc=0x6A, fl=0x12345, hlim=64)
    else:
        ip = IP(src="192.0.2.1", dst="192.0.2.2", tos=0x6A, ttl=64, id=0, flags="DF")
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip / UDP(sport=sport, dport=dport, chksum=0)


# (opcode, extension header bytes, payload)
VALID = [
    (0x04, b"", b"hello, roce"),
    (0x00, b"", bytes(range(256)) * 4),
    (0x01, b"", b"\xAA" * 1024),
    (0x02, b"", b"x"),
    (0x03, IMM(0xDEADBEEF), b"last with imm"),
    (0x05, IMM(7), b""),
    (0x06, RETH(0x7F0000001000, 0x1234, 8192), b"\x11" * 4096),
    (0x0A, RETH(0x1000, 0xABCD, 3), b"abc"),
    (0x0B, RETH(0x2000, 0xABCE, 2) + IMM(0x01020304), b"ab"),
    (0x0C, RETH(0x3000, 0x77, 65536), b""),
    (0x0D, struct.pack("!I", 0x1F000001), b"\x22" * 1024),
    (0x0E, b"", b"\x33" * 1024),
    (0x10, struct.pack("!I", 0x1F000002), b"read"),
    (0x12, struct.pack("!I", 0x00000003) + struct.pack("!Q", 42), b""),
    (0x13, ATOMIC(0x4000, 0x99, 5, 6), b""),
    (0x14, ATOMIC(0x4008, 0x99, 1, 0), b""),
    (0x17, IMM(0x5555), b"send with inv"),
    (0x24, b"", b"uc send"),
    (0x2A, RETH(0x5000, 0x42, 8), b"uc write"),
    (0x64, DETH(0x11111111, 0x123), b"ud send"),
    (0x65, DETH(0x22222222, 0x456) + IMM(9), b"ud imm"),
]


def roce(v6: bool, opcode: int, ext: bytes, payload: bytes, qpn: int, psn: int, **bth):
    body, pad = padded(payload)
    fields = {"opcode": opcode, "padcount": pad, "dqpn": qpn, "psn": psn, "ackreq": 1, **bth}
    return ip_layers(v6, 0xC000 | (qpn & 0x3FFF)) / BTH(**fields) / Raw(ext + body)


def main() -> None:
    frames, expect = [], []

    def add(pkt, verdict, what):
        frames.append(pkt)
        expect.append({"frame": len(frames), "expect": verdict, "what": what})

    for v6 in (False, True):
        fam = "IPv6" if v6 else "IPv4"
        for i, (opcode, ext, payload) in enumerate(VALID):
            add(roce(v6, opcode, ext, payload, 0x11 + i, 100 + i), "ok", f"{fam} opcode {opcode:#04x}")
        # An ACK through scapy's own AETH layer, a CNP through its helper, FECN/BECN set.
        add(ip_layers(v6, 0xC001) / BTH(opcode=0x11, dqpn=0x22, psn=5) / AETH(syndrome=0x1F, msn=9), "ok", f"{fam} ACK")
        add(ip_layers(v6, 0xC002) / cnp(0x33), "ok", f"{fam} CNP")
        add(roce(v6, 0x04, b"", b"ecn", 0x44, 6, fecn=1, becn=1), "ok", f"{fam} FECN/BECN set")

        # A payload byte flipped after scapy computed the ICRC.
        good = bytearray(bytes(roce(v6, 0x0A, RETH(0x1000, 1, 64), b"\x5A" * 64, 0x55, 7)))
        good[-10] ^= 0x01
        add(Ether(bytes(good)), "icrc", f"{fam} corrupted payload")
        # An ICRC field set to a wrong value.
        pkt = roce(v6, 0x04, b"", b"data", 0x56, 8)
        pkt[BTH].icrc = 0x12345678
        add(pkt, "icrc", f"{fam} wrong ICRC")
        # The P_Key changed after the ICRC was computed (covered, unlike FECN/BECN).
        good = bytearray(bytes(roce(v6, 0x04, b"", b"pkey", 0x57, 9)))
        bth_at = 14 + (40 if v6 else 20) + 8
        good[bth_at + 3] ^= 0xFF
        add(Ether(bytes(good)), "icrc", f"{fam} P_Key changed")

        # Sluice's CC extension header (TVer 1, negotiated between Sluice ends): the ICRC
        # replaces its bytes after length and layout with ones, so a CCX whose telemetry
        # bytes ARE ones gets the same ICRC from scapy's standard computation; switches may
        # then rewrite the telemetry without invalidating it, but not the payload.
        stamps = bytes([5, 1]) + b"\xFF" * 18
        ccx_at = 14 + (40 if v6 else 20) + 8 + 12
        written = bytearray(bytes(roce(v6, 0x0A, stamps + RETH(0x1000, 2, 4), b"ccx!", 0x58, 10, version=1)))
        written[ccx_at + 2:ccx_at + 20] = bytes([1, 0]) + struct.pack("!QQ", 123456789, 123000000)
        add(Ether(bytes(written)), "ok", f"{fam} CCX timestamps")
        written = bytearray(bytes(roce(v6, 0x04, bytes([16, 2]) + b"\xFF" * 62, b"int", 0x59, 11, version=1)))
        hops = struct.pack("!IIHH", 1000, 77, 3, 1000) + struct.pack("!IIHH", 5, 6, 0, 250)
        written[ccx_at + 2:ccx_at + 64] = bytes([2, 0]) + hops + b"\0" * 36
        add(Ether(bytes(written)), "ok", f"{fam} CCX INT written in flight")
        flipped = bytearray(bytes(roce(v6, 0x04, stamps, b"data", 0x5A, 12, version=1)))
        flipped[ccx_at + 2:ccx_at + 20] = bytes(18)
        flipped[-6] ^= 0x01
        add(Ether(bytes(flipped)), "icrc", f"{fam} CCX, corrupted payload")
        # A credit CCX is covered whole: scapy's standard ICRC is right for it as built, and
        # a total changed on the way is caught.
        credit = bytes([3, 3, 0, 0]) + struct.pack("!Q", 0x10000)
        aeth = struct.pack("!I", 0x1F000004)
        add(roce(v6, 0x11, credit + aeth, b"", 0x5B, 13, version=1), "ok", f"{fam} CCX credit on an ACK")
        changed = bytearray(bytes(roce(v6, 0x11, credit + aeth, b"", 0x5C, 14, version=1)))
        changed[ccx_at + 9] ^= 0x01
        add(Ether(bytes(changed)), "icrc", f"{fam} CCX credit total changed")

        # Malformed: a pad count larger than the payload, a reserved opcode, TVer 1 without
        # a CCX, TVer 2, a READ request with payload, a truncated RETH.
        add(roce(v6, 0x0C, RETH(0, 1, 4), b"", 0x60, 1, padcount=3), "malformed", f"{fam} pad on READ request")
        add(roce(v6, 0x15, b"", b"", 0x61, 1), "malformed", f"{fam} reserved opcode 0x15")
        add(roce(v6, 0x04, b"", b"abcd", 0x62, 1, version=1), "malformed", f"{fam} TVer 1 without a CCX")
        add(roce(v6, 0x04, b"", b"abcd", 0x65, 1, version=2), "malformed", f"{fam} TVer 2")
        add(roce(v6, 0x0C, RETH(0, 1, 4), b"pay!", 0x63, 1), "malformed", f"{fam} READ request with payload")
        add(roce(v6, 0x0A, b"\0" * 8, b"", 0x64, 1), "malformed", f"{fam} truncated RETH")

        # Not RoCE: UDP to another port.
        add(ip_layers(v6, 5000, dport=53) / Raw(b"\0" * 20), "other", f"{fam} DNS port")

    wrpcap(sys.argv[1], frames)
    with open(sys.argv[2], "w") as f:
        json.dump(expect, f, indent=1)


if __name__ == "__main__":
    main()
