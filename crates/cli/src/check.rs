//! `sluice pcap check`: decode every RoCE v2 packet of a capture, verify each ICRC, and
//! summarise what the capture holds.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::net::IpAddr;

use serde::Serialize;
use sluice_wire::pcap::{CaptureError, CaptureReader, link_type};
use sluice_wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, Error, EthernetHeader, IpUdp, Operation, Psn};

use crate::psn_ranges::PsnRanges;

/// How many problems are kept in the summary (all are counted).
const MAX_PROBLEMS: usize = 10_000;
/// How many PSN gaps are listed per stream.
const MAX_GAPS: usize = 16;

/// What kind of problem a frame has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// Not a well-formed RoCE v2 packet.
    Malformed,
    /// Well formed, but the ICRC is wrong.
    Icrc,
    /// Cut short by the capture's snap length: cannot be checked.
    Truncated,
}

/// One frame with a problem.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// 1-based frame number, as tshark and Wireshark count.
    pub frame: u64,
    /// What is wrong.
    pub kind: ProblemKind,
    /// The decoder's message (or, for a truncated frame, the captured and original lengths).
    pub detail: String,
}

/// How many RoCE packets of one opcode the capture holds.
#[derive(Debug, Clone, Serialize)]
pub struct OpcodeCount {
    /// The BTH opcode.
    pub opcode: u8,
    /// The opcode's name.
    pub name: &'static str,
    /// Packets with this opcode (including ones with a wrong ICRC).
    pub packets: u64,
}

/// The PSNs of one stream: packets to one QP at one address, requests and responses apart
/// (responses are ACKs and READ responses; coalesced ACKs skip PSNs by design).
#[derive(Debug, Clone, Serialize)]
pub struct QpStream {
    /// The destination IP address.
    pub dst: IpAddr,
    /// The destination queue pair number (BTH DestQP).
    pub dest_qp: u32,
    /// `"requests"` or `"responses"`.
    pub kind: &'static str,
    /// Packets in the stream, duplicates included.
    pub packets: u64,
    /// The lowest PSN, in sequence order (wrap-around undone).
    pub first_psn: u32,
    /// The highest PSN, in sequence order.
    pub last_psn: u32,
    /// Packets whose PSN had been seen before on this stream.
    pub duplicates: u64,
    /// PSNs between `first_psn` and `last_psn` never seen.
    pub missing: u64,
    /// The first holes, as inclusive `[from, to]` PSN ranges.
    pub gaps: Vec<[u32; 2]>,
}

/// The result of checking one capture.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The name the capture was checked under.
    pub file: String,
    /// The UDP destination port taken as RoCE v2.
    pub port: u16,
    /// Frames in the capture.
    pub frames: u64,
    /// Frames sent to the RoCE v2 port (well formed or not).
    pub roce_packets: u64,
    /// Frames that are not IP, not UDP to the RoCE v2 port, or of an unsupported link type.
    pub other_frames: u64,
    /// RoCE frames that are not well-formed RoCE v2 packets.
    pub malformed: u64,
    /// Well-formed RoCE packets with a wrong ICRC.
    pub icrc_failures: u64,
    /// RoCE frames cut short by the snap length (not checked).
    pub truncated: u64,
    /// Frames whose link type this checker does not decode (counted in `other_frames`).
    pub unsupported_link_type: u64,
    /// The problems, in frame order, at most 10,000.
    pub problems: Vec<Problem>,
    /// Problems counted but left out of `problems`.
    pub problems_not_listed: u64,
    /// Packets by opcode, in opcode order.
    pub by_opcode: Vec<OpcodeCount>,
    /// The PSN streams, by destination address, queue pair and kind.
    pub queue_pairs: Vec<QpStream>,
    /// Set when the file could not be read to its end.
    pub capture_error: Option<String>,
    /// True when every RoCE packet is well formed with a valid ICRC and the file was read
    /// to its end.
    pub ok: bool,
}

#[derive(Default)]
struct Checker {
    port: u16,
    frames: u64,
    roce: u64,
    other: u64,
    malformed: u64,
    icrc: u64,
    truncated: u64,
    unsupported_link: u64,
    problems: Vec<Problem>,
    opcodes: BTreeMap<u8, u64>,
    streams: BTreeMap<(IpAddr, u32, bool), PsnRanges>,
}

/// What a captured frame carries, as far as this checker is concerned.
enum Link<'a> {
    Ip(&'a [u8]),
    NotIp,
    UnsupportedLinkType,
}

/// Finds the IP datagram in a captured frame.
fn link_payload(link: u32, data: &[u8]) -> Link<'_> {
    fn by_ethertype(ethertype: u16, rest: &[u8]) -> Link<'_> {
        match ethertype {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Link::Ip(rest),
            _ => Link::NotIp,
        }
    }
    match link {
        link_type::ETHERNET => match EthernetHeader::parse(data) {
            Ok((eth, rest)) => by_ethertype(eth.ethertype, rest),
            Err(_) => Link::NotIp,
        },
        link_type::RAW | link_type::IPV4 | link_type::IPV6 => Link::Ip(data),
        link_type::LINUX_SLL if data.len() >= 16 => {
            by_ethertype(u16::from_be_bytes([data[14], data[15]]), &data[16..])
        }
        link_type::LINUX_SLL2 if data.len() >= 20 => {
            by_ethertype(u16::from_be_bytes([data[0], data[1]]), &data[20..])
        }
        link_type::LINUX_SLL | link_type::LINUX_SLL2 => Link::NotIp,
        _ => Link::UnsupportedLinkType,
    }
}

/// The UDP destination port of an IP datagram, read without validating anything else; only
/// used to decide whether a frame is meant to be RoCE.
fn udp_dst_port(ip: &[u8]) -> Option<u16> {
    let at = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0F) * 4;
            let frag_offset = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1FFF;
            if *ip.get(9)? != 17 || frag_offset != 0 {
                return None;
            }
            ihl + 2
        }
        6 if *ip.get(6)? == 17 => 42,
        _ => return None,
    };
    Some(u16::from_be_bytes([*ip.get(at)?, *ip.get(at + 1)?]))
}

impl Checker {
    fn problem(&mut self, frame: u64, kind: ProblemKind, detail: String) {
        match kind {
            ProblemKind::Malformed => self.malformed += 1,
            ProblemKind::Icrc => self.icrc += 1,
            ProblemKind::Truncated => self.truncated += 1,
        }
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem {
                frame,
                kind,
                detail,
            });
        }
    }

    fn frame(&mut self, link: u32, data: &[u8], orig_len: u32) {
        self.frames += 1;
        let frame = self.frames;
        let ip = match link_payload(link, data) {
            Link::Ip(ip) => ip,
            Link::NotIp => {
                self.other += 1;
                return;
            }
            Link::UnsupportedLinkType => {
                self.unsupported_link += 1;
                self.other += 1;
                return;
            }
        };
        if udp_dst_port(ip) != Some(self.port) {
            self.other += 1;
            return;
        }
        self.roce += 1;
        if (data.len() as u64) < u64::from(orig_len) {
            let detail = format!("captured {} of {} bytes", data.len(), orig_len);
            self.problem(frame, ProblemKind::Truncated, detail);
            return;
        }
        let datagram = match IpUdp::parse(ip) {
            Ok(d) => d,
            Err(e) => return self.problem(frame, ProblemKind::Malformed, e.to_string()),
        };
        let packet = match datagram.roce() {
            Ok(p) => p,
            Err(e @ Error::IcrcMismatch { .. }) => {
                // Still count what the packet is, for the opcode table.
                if let Ok(p) = sluice_wire::RocePacket::parse(datagram.payload()) {
                    *self.opcodes.entry(p.bth.opcode.0).or_default() += 1;
                }
                return self.problem(frame, ProblemKind::Icrc, e.to_string());
            }
            Err(e) => return self.problem(frame, ProblemKind::Malformed, e.to_string()),
        };
        *self.opcodes.entry(packet.bth.opcode.0).or_default() += 1;
        let response = match packet.info.operation {
            // CNPs and control packets carry no sequence in their PSN.
            Operation::Cnp | Operation::CcControl => return,
            Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::RdmaReadResponse => {
                true
            }
            _ => false,
        };
        self.streams
            .entry((datagram.ip.dst(), packet.bth.dest_qp, response))
            .or_default()
            .record(packet.bth.psn);
    }

    fn finish(self, file: String, capture_error: Option<String>) -> Summary {
        let problems_not_listed =
            self.malformed + self.icrc + self.truncated - self.problems.len() as u64;
        let by_opcode = self
            .opcodes
            .iter()
            .map(|(&opcode, &packets)| OpcodeCount {
                opcode,
                name: sluice_wire::Opcode(opcode).name(),
                packets,
            })
            .collect();
        let queue_pairs = self
            .streams
            .iter()
            .map(|(&(dst, dest_qp, response), r)| {
                let (first, last) = r.span().unwrap_or((Psn::new(0), Psn::new(0)));
                QpStream {
                    dst,
                    dest_qp,
                    kind: if response { "responses" } else { "requests" },
                    packets: r.packets(),
                    first_psn: first.value(),
                    last_psn: last.value(),
                    duplicates: r.duplicates(),
                    missing: r.missing(),
                    gaps: r
                        .gaps(MAX_GAPS)
                        .into_iter()
                        .map(|(a, b)| [a.value(), b.value()])
                        .collect(),
                }
            })
            .collect();
        let ok =
            self.malformed == 0 && self.icrc == 0 && self.truncated == 0 && capture_error.is_none();
        Summary {
            file,
            port: self.port,
            frames: self.frames,
            roce_packets: self.roce,
            other_frames: self.other,
            malformed: self.malformed,
            icrc_failures: self.icrc,
            truncated: self.truncated,
            unsupported_link_type: self.unsupported_link,
            problems: self.problems,
            problems_not_listed,
            by_opcode,
            queue_pairs,
            capture_error,
            ok,
        }
    }
}

/// Checks a capture read from `input`. An error is returned only when the input is not a
/// capture at all; a file that breaks off part-way yields a summary with `capture_error` set.
pub fn check(input: impl Read, file: &str, port: u16) -> Result<Summary, CaptureError> {
    let mut reader = CaptureReader::new(input)?;
    let mut checker = Checker {
        port,
        ..Checker::default()
    };
    let capture_error = loop {
        match reader.next_record() {
            Ok(Some(record)) => checker.frame(record.link_type, record.data, record.orig_len),
            Ok(None) => break None,
            Err(e) => break Some(format!("after frame {}: {e}", checker.frames)),
        }
    };
    Ok(checker.finish(file.to_string(), capture_error))
}

/// How many problems the text report lists before referring to `--json`.
const PROBLEMS_SHOWN: usize = 20;
/// How many PSN streams the text report lists.
const STREAMS_SHOWN: usize = 64;

impl Summary {
    /// The human-readable report.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(
            w,
            "{}: {} frames, {} RoCE v2 (UDP port {}), {} other",
            self.file, self.frames, self.roce_packets, self.port, self.other_frames
        );
        let frames_of = |kind: ProblemKind| {
            let list: Vec<String> = self
                .problems
                .iter()
                .filter(|p| p.kind == kind)
                .take(10)
                .map(|p| p.frame.to_string())
                .collect();
            if list.is_empty() {
                String::new()
            } else {
                format!(
                    "  (frames {}{})",
                    list.join(", "),
                    if list.len() == 10 { ", ..." } else { "" }
                )
            }
        };
        let _ = writeln!(
            w,
            "  malformed:      {}{}",
            self.malformed,
            frames_of(ProblemKind::Malformed)
        );
        let _ = writeln!(
            w,
            "  ICRC failures:  {}{}",
            self.icrc_failures,
            frames_of(ProblemKind::Icrc)
        );
        let _ = writeln!(
            w,
            "  cut by snaplen: {}{}",
            self.truncated,
            frames_of(ProblemKind::Truncated)
        );
        if self.unsupported_link_type > 0 {
            let _ = writeln!(
                w,
                "  frames of an unsupported link type: {}",
                self.unsupported_link_type
            );
        }
        if let Some(e) = &self.capture_error {
            let _ = writeln!(w, "  capture not read to its end: {e}");
        }
        if !self.problems.is_empty() {
            let _ = writeln!(w, "\nproblems");
            for p in self.problems.iter().take(PROBLEMS_SHOWN) {
                let _ = writeln!(w, "  frame {:>8}  {}", p.frame, p.detail);
            }
            let more = self.problems.len().saturating_sub(PROBLEMS_SHOWN) as u64
                + self.problems_not_listed;
            if more > 0 {
                let _ = writeln!(
                    w,
                    "  ... and {more} more (--json lists up to {MAX_PROBLEMS})"
                );
            }
        }
        if !self.by_opcode.is_empty() {
            let _ = writeln!(w, "\n  {:<44}{:>10}", "opcode", "packets");
            for o in &self.by_opcode {
                let name = format!("{} ({:#04x})", o.name, o.opcode);
                let _ = writeln!(w, "  {name:<44}{:>10}", o.packets);
            }
        }
        if !self.queue_pairs.is_empty() {
            let _ = writeln!(
                w,
                "\n  {:<28}{:>10} {:<10}{:>9}{:>11}{:>11}{:>6}{:>9}",
                "destination", "QP", "stream", "packets", "first PSN", "last PSN", "dup", "missing"
            );
            for q in self.queue_pairs.iter().take(STREAMS_SHOWN) {
                let _ = writeln!(
                    w,
                    "  {:<28}{:>10} {:<10}{:>9}{:>11}{:>11}{:>6}{:>9}",
                    q.dst.to_string(),
                    format!("{:#08x}", q.dest_qp),
                    q.kind,
                    q.packets,
                    q.first_psn,
                    q.last_psn,
                    q.duplicates,
                    q.missing
                );
                if !q.gaps.is_empty() && q.kind == "requests" {
                    let gaps: Vec<String> = q
                        .gaps
                        .iter()
                        .map(|[a, b]| {
                            if a == b {
                                a.to_string()
                            } else {
                                format!("{a}-{b}")
                            }
                        })
                        .collect();
                    let _ = writeln!(w, "      missing PSNs: {}", gaps.join(", "));
                }
            }
            if self
                .queue_pairs
                .iter()
                .any(|q| q.kind == "responses" && q.missing > 0)
            {
                let _ = writeln!(
                    w,
                    "  (PSNs missing from responses are expected when ACKs are coalesced)"
                );
            }
        }
        let verdict = if self.ok {
            "OK: every RoCE v2 packet is well formed with a valid ICRC".to_string()
        } else {
            format!(
                "FAILED: {} malformed, {} ICRC failures, {} not checkable{}",
                self.malformed,
                self.icrc_failures,
                self.truncated,
                if self.capture_error.is_some() {
                    ", capture cut short"
                } else {
                    ""
                }
            )
        };
        let _ = writeln!(w, "\n{verdict}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::pcap::PcapWriter;
    use sluice_wire::{
        Bth, ExtHeaders, IpHeader, Ipv4Header, Opcode, PathProbeHeader, ROCE_V2_PORT, RoceHeaders,
        UdpHeader, emit_datagram,
    };

    /// A path probe (or reply) as a raw IPv4 datagram with a valid ICRC; `poke` changes the
    /// control header's byte at that offset before the ICRC is computed.
    fn probe_datagram(reply: bool, poke: Option<usize>) -> Vec<u8> {
        let probe = PathProbeHeader {
            reply,
            port: 0xC123,
            seq: 9,
        };
        control_datagram(probe.control(), poke)
    }

    /// A control packet carrying `control` as a raw IPv4 datagram with a valid ICRC; `poke`
    /// as in `probe_datagram`.
    fn control_datagram(control: sluice_wire::CcControl, poke: Option<usize>) -> Vec<u8> {
        let ip = IpHeader::V4(Ipv4Header {
            src: std::net::Ipv4Addr::new(10, 0, 0, 1),
            dst: std::net::Ipv4Addr::new(10, 0, 0, 2),
            tos: 0,
            identification: 0,
            dont_fragment: true,
            ttl: 64,
        });
        let udp = UdpHeader {
            src_port: 0xC123,
            dst_port: ROCE_V2_PORT,
        };
        let roce = RoceHeaders {
            bth: Bth::new(Opcode::RC_CC_CONTROL, 0x11, Psn::new(0)),
            ccx: None,
            ext: ExtHeaders {
                cc_control: Some(control),
                ..ExtHeaders::default()
            },
        };
        let mut buf = vec![0u8; 256];
        let n = emit_datagram(&ip, &udp, &roce, &[], &mut buf).unwrap();
        buf.truncate(n);
        if let Some(at) = poke {
            // IPv4 (20), UDP (8), BTH (12), then the control header.
            buf[40 + at] = 1;
            sluice_wire::icrc::write(&mut buf).unwrap();
        }
        buf
    }

    #[test]
    fn valid_probes_pass_and_a_probe_with_reserved_bits_set_is_malformed() {
        let mut w = PcapWriter::new(Vec::new(), link_type::RAW, 65535).unwrap();
        w.write(0, &probe_datagram(false, None)).unwrap();
        w.write(0, &probe_datagram(true, None)).unwrap();
        let s = check(&w.into_inner()[..], "probes", ROCE_V2_PORT).unwrap();
        assert_eq!((s.roce_packets, s.malformed, s.ok), (2, 0, true));
        // Not sequenced: no PSN stream.
        assert!(s.queue_pairs.is_empty());
        for at in [3, 10] {
            let mut w = PcapWriter::new(Vec::new(), link_type::RAW, 65535).unwrap();
            w.write(0, &probe_datagram(false, Some(at))).unwrap();
            let s = check(&w.into_inner()[..], "bad", ROCE_V2_PORT).unwrap();
            assert_eq!((s.malformed, s.ok), (1, false), "byte {at}");
            assert!(
                s.problems[0].detail.contains("bad path probe"),
                "{:?}",
                s.problems
            );
        }
    }

    #[test]
    fn homa_grants_resends_and_busies_pass_and_malformed_ones_do_not() {
        use sluice_wire::HomaControl;
        let messages = [
            HomaControl::Grant {
                message: 0x42,
                offset: 65_536,
                priority: 5,
            },
            HomaControl::Resend {
                message: 0x42,
                offset: 4096,
                length: 8192,
                priority: 7,
            },
            HomaControl::Busy { message: 0x42 },
        ];
        let mut w = PcapWriter::new(Vec::new(), link_type::RAW, 65535).unwrap();
        for m in messages {
            w.write(0, &control_datagram(m.control().unwrap(), None))
                .unwrap();
        }
        let s = check(&w.into_inner()[..], "homa", ROCE_V2_PORT).unwrap();
        assert_eq!((s.roce_packets, s.malformed, s.ok), (3, 0, true));
        // A reserved byte (1, 3) or a GRANT with a length (byte 4): malformed, by name.
        for at in [1, 3, 4] {
            let mut w = PcapWriter::new(Vec::new(), link_type::RAW, 65535).unwrap();
            w.write(
                0,
                &control_datagram(messages[0].control().unwrap(), Some(at)),
            )
            .unwrap();
            let s = check(&w.into_inner()[..], "bad", ROCE_V2_PORT).unwrap();
            assert_eq!((s.malformed, s.ok), (1, false), "byte {at}");
            assert!(
                s.problems[0].detail.contains("bad Homa control header"),
                "{:?}",
                s.problems
            );
        }
    }
}
