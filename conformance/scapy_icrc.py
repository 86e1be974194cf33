#!/usr/bin/env python3
"""Print the ICRC that scapy's RoCE layer computes for every RoCE v2 frame of a capture.

Usage: scapy_icrc.py CAPTURE.pcap
Output: one line per RoCE frame, "FRAME<TAB>ICRC", ICRC as 8 hex digits of the CRC value
(the wire carries it least significant byte first). Scapy is the independent oracle: its
ICRC code (scapy.contrib.roce) shares nothing with Sluice's.
"""
import sys

from scapy.all import Ether, rdpcap
from scapy.config import conf
from scapy.main import load_contrib

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402

conf.verb = 0


def main() -> None:
    for number, frame in enumerate(rdpcap(sys.argv[1]), start=1):
        pkt = Ether(bytes(frame))
        if BTH not in pkt:
            continue
        # Ask scapy to recompute the ICRC: clear the field and rebuild. The IP and UDP
        # headers keep their dissected lengths and checksums, so the bytes are unchanged.
        pkt[BTH].icrc = None
        wire = bytes(pkt)[-4:]
        print(f"{number}\t{int.from_bytes(wire, 'little'):08x}")


if __name__ == "__main__":
    main()
