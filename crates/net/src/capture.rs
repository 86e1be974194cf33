//! A traffic sniffer in software (BALBOA's, without the FPGA): every RoCE packet a device
//! sends or receives, written to a pcap file as raw IP datagrams, filtered and truncated as
//! asked. The IP and UDP headers are the ones the packet travelled under, as the ICRC saw
//! them, so `sluice pcap check` verifies every ICRC in the file.

use std::fs::File;
use std::io::{self, BufWriter};
use std::net::SocketAddr;
use std::path::Path;

use sluice_core::Instant;
use sluice_wire::pcap::{PcapWriter, link_type};
use sluice_wire::{IpHeader, Operation, RocePacket, UDP_HEADER_LEN, UdpHeader};

/// Which packets a capture keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureFilter {
    /// Keep packets sent (`Some(true)`), received (`Some(false)`), or both (`None`).
    pub sent: Option<bool>,
    /// Keep only packets to this destination QP.
    pub dest_qp: Option<u32>,
    /// Keep only these operations (empty: all).
    pub operations: Vec<Operation>,
}

impl CaptureFilter {
    /// Parses a comma-separated filter: `tx` or `rx`, `qp=N` (decimal or 0x hex; the BTH
    /// destination QP), `op=NAME[+NAME...]` with names `send`, `write`, `read` (requests and
    /// responses), `ack`, `atomic`, `cnp`. The empty string keeps everything.
    pub fn parse(text: &str) -> Result<CaptureFilter, String> {
        let mut f = CaptureFilter::default();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match term.split_once('=') {
                None if term == "tx" => f.sent = Some(true),
                None if term == "rx" => f.sent = Some(false),
                Some(("qp", n)) => {
                    let n = n.trim();
                    let parsed = match n.strip_prefix("0x") {
                        Some(hex) => u32::from_str_radix(hex, 16),
                        None => n.parse(),
                    };
                    f.dest_qp = Some(
                        parsed
                            .ok()
                            .filter(|&q| q < 1 << 24)
                            .ok_or_else(|| format!("`{n}` is not a QP number (0..2^24)"))?,
                    );
                }
                Some(("op", names)) => {
                    for name in names.split('+') {
                        f.operations.extend_from_slice(match name.trim() {
                            "send" => &[Operation::Send, Operation::SendWithImmediate][..],
                            "write" => &[Operation::RdmaWrite, Operation::RdmaWriteWithImmediate],
                            "read" => &[Operation::RdmaReadRequest, Operation::RdmaReadResponse],
                            "ack" => &[Operation::Acknowledge, Operation::AtomicAcknowledge],
                            "atomic" => &[Operation::CompareSwap, Operation::FetchAdd],
                            "cnp" => &[Operation::Cnp],
                            other => {
                                return Err(format!(
                                    "unknown operation `{other}` (send, write, read, ack, atomic, cnp)"
                                ));
                            }
                        });
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown capture filter term `{term}` (tx, rx, qp=N, op=NAME[+NAME])"
                    ));
                }
            }
        }
        Ok(f)
    }

    fn keeps(&self, sent: bool, packet: &RocePacket<'_>) -> bool {
        self.sent.is_none_or(|s| s == sent)
            && self.dest_qp.is_none_or(|q| q == packet.bth.dest_qp)
            && (self.operations.is_empty() || self.operations.contains(&packet.info.operation))
    }
}

/// A pcap file being written.
#[derive(Debug)]
pub struct Capture {
    writer: PcapWriter<BufWriter<File>>,
    filter: CaptureFilter,
    /// Wall-clock nanoseconds at engine time zero.
    wall_offset_ns: u64,
    frame: Vec<u8>,
    snaplen: usize,
    /// Packets recorded so far.
    pub packets: u64,
}

impl Capture {
    /// Creates `path`; keeps packets `filter` accepts, each cut to `snaplen` bytes of IP
    /// datagram (the pcap records the full length). `now` is the device's current time.
    pub fn create(
        path: &Path,
        filter: CaptureFilter,
        snaplen: u32,
        now: Instant,
    ) -> io::Result<Capture> {
        let file = File::create(path)?;
        let writer = PcapWriter::new(BufWriter::new(file), link_type::RAW, snaplen)?;
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ok(Capture {
            writer,
            filter,
            wall_offset_ns: wall.saturating_sub(now.as_nanos()),
            frame: Vec::with_capacity(4200),
            snaplen: snaplen as usize,
            packets: 0,
        })
    }

    /// Records RoCE packet `roce` (parsed: `packet`), which travelled from `src` to `dst`
    /// with IPv4 identification `ip_id` and TOS (traffic class) `tos` (`path`), under the
    /// IP and UDP headers a
    /// Don't-Fragment socket sends it with. Those are built only for a packet the filter
    /// keeps.
    pub(crate) fn record(
        &mut self,
        now: Instant,
        sent: bool,
        path: (SocketAddr, SocketAddr, u16, u8),
        roce: &[u8],
        packet: &RocePacket<'_>,
    ) {
        if !self.filter.keeps(sent, packet) {
            return;
        }
        let (src, dst, ip_id, tos) = path;
        let mut ip = IpHeader::between(src.ip(), dst.ip(), ip_id);
        match &mut ip {
            IpHeader::V4(h) => h.tos = tos,
            IpHeader::V6(h) => h.traffic_class = tos,
        }
        let (ip_len, udp_len) = (ip.header_len(), UDP_HEADER_LEN + roce.len());
        let udp = UdpHeader {
            src_port: src.port(),
            dst_port: dst.port(),
        };
        self.frame.clear();
        self.frame.resize(ip_len + UDP_HEADER_LEN, 0);
        if ip.emit(ip_len + udp_len, &mut self.frame).is_err()
            || udp.emit(udp_len, &mut self.frame[ip_len..]).is_err()
        {
            return; // larger than IP allows: not a packet that travelled
        }
        let keep = self
            .snaplen
            .saturating_sub(self.frame.len())
            .min(roce.len());
        self.frame.extend_from_slice(&roce[..keep]);
        let total = ip_len + udp_len;
        if self
            .writer
            .write_truncated(self.wall_offset_ns + now.as_nanos(), &self.frame, total)
            .is_ok()
        {
            self.packets += 1;
        }
    }

    /// Flushes the file.
    pub fn finish(mut self) -> io::Result<u64> {
        self.writer.flush()?;
        Ok(self.packets)
    }
}
