//! The client half of `ibv_rc_pingpong`, built from `sluice-wire` packets sent on a plain UDP
//! socket: an interoperability probe against Linux Soft-RoCE (see `conformance/rxe_interop.sh`).
//!
//! The peer runs `ibv_rc_pingpong -d rxe0 -g 1 -n 1 -s 64` (the server). This program swaps
//! queue-pair details with it over TCP (rc_pingpong's text format), sends one RC SEND ONLY
//! that the kernel must accept (BTH, PSN, ICRC all right), acknowledges the server's reply
//! SEND with an RC ACKNOWLEDGE of ours, and checks the ACK the kernel sends back. The server
//! exits 0 only if every packet of ours was valid.
//!
//! Usage: `rxe_pingpong LOCAL_IPV4 PEER_IPV4 [SIZE]`

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use sluice_wire::*;

const EXCHANGE_PORT: u16 = 18515;
const OUR_QPN: u32 = 0x000011;
const OUR_PSN: u32 = 0x00ABCD;

type BoxError = Box<dyn std::error::Error>;
type Result<T> = std::result::Result<T, BoxError>;

/// rc_pingpong's "LID:QPN:PSN:GID" message, NUL-terminated, 52 bytes.
fn exchange_message(qpn: u32, psn: u32, ip: Ipv4Addr) -> [u8; 52] {
    let gid: String = ip
        .to_ipv6_mapped()
        .octets()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let text = format!("{:04x}:{:06x}:{:06x}:{}", 0, qpn, psn, gid);
    let mut msg = [0u8; 52];
    msg[..text.len()].copy_from_slice(text.as_bytes());
    msg
}

fn parse_message(msg: &[u8; 52]) -> Result<(u32, u32)> {
    let text = std::str::from_utf8(&msg[..51])?;
    let mut fields = text.split(':');
    let _lid = fields.next();
    let qpn = u32::from_str_radix(fields.next().ok_or("no QPN")?, 16)?;
    let psn = u32::from_str_radix(fields.next().ok_or("no PSN")?, 16)?;
    Ok((qpn, psn))
}

fn connect_with_retry(peer: Ipv4Addr, deadline: Instant) -> Result<TcpStream> {
    loop {
        match TcpStream::connect_timeout(
            &SocketAddr::from((peer, EXCHANGE_PORT)),
            Duration::from_secs(1),
        ) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("no rc_pingpong server at {peer}: {e}").into());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Sets Don't Fragment, so that the kernel writes IPv4 identification 0: the ICRC covers it.
#[allow(unsafe_code)]
fn set_dont_fragment(socket: &UdpSocket) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: a valid socket descriptor, and a pointer to a c_int with its exact length.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

struct Link {
    socket: UdpSocket,
    local: Ipv4Addr,
    peer: Ipv4Addr,
}

impl Link {
    fn ip(&self, src: Ipv4Addr, dst: Ipv4Addr) -> IpHeader {
        IpHeader::V4(Ipv4Header {
            src,
            dst,
            tos: 0,
            identification: 0,
            dont_fragment: true,
            ttl: 64,
        })
    }

    /// Builds the whole datagram (the ICRC needs the IP header the kernel will write) and
    /// sends its UDP payload.
    fn send(&self, roce: &RoceHeaders, payload: &[u8]) -> Result<()> {
        let udp = UdpHeader {
            src_port: ROCE_V2_PORT,
            dst_port: ROCE_V2_PORT,
        };
        let mut buf = [0u8; 2048];
        let n = emit_datagram(
            &self.ip(self.local, self.peer),
            &udp,
            roce,
            payload,
            &mut buf,
        )?;
        let start = IPV4_HEADER_LEN + UDP_HEADER_LEN;
        self.socket
            .send_to(&buf[start..n], (self.peer, ROCE_V2_PORT))?;
        println!("sent {} PSN {}", roce.bth.opcode, roce.bth.psn);
        Ok(())
    }

    /// Receives and decodes one RoCE packet. Its ICRC cannot be checked here: it covers the
    /// IPv4 identification, which Soft-RoCE sets from the kernel's counter and a UDP socket
    /// does not show. The captures taken at both ends check it instead.
    fn recv<'a>(&self, buf: &'a mut [u8; 2048]) -> Result<RocePacket<'a>> {
        let (n, _from) = self.socket.recv_from(buf)?;
        let packet = RocePacket::parse(&buf[..n])?;
        println!("received {} PSN {}", packet.bth.opcode, packet.bth.psn);
        Ok(packet)
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: rxe_pingpong LOCAL_IPV4 PEER_IPV4 [SIZE]".into());
    }
    let local: Ipv4Addr = args[1].parse()?;
    let peer: Ipv4Addr = args[2].parse()?;
    let size: usize = args.get(3).map_or(Ok(64), |s| s.parse())?;

    let socket = UdpSocket::bind((local, ROCE_V2_PORT))?;
    set_dont_fragment(&socket)?;
    socket.set_read_timeout(Some(Duration::from_secs(20)))?;
    let link = Link {
        socket,
        local,
        peer,
    };

    let mut tcp = connect_with_retry(peer, Instant::now() + Duration::from_secs(120))?;
    tcp.write_all(&exchange_message(OUR_QPN, OUR_PSN, local))?;
    let mut reply = [0u8; 52];
    tcp.read_exact(&mut reply)?;
    tcp.write_all(b"done\0")?;
    let (peer_qpn, peer_psn) = parse_message(&reply)?;
    println!("peer QPN {peer_qpn:#08x} PSN {peer_psn:#08x}");

    // Our ping: one SEND ONLY, acknowledgement requested.
    let ping = RoceHeaders {
        bth: Bth {
            ack_req: true,
            ..Bth::new(Opcode::RC_SEND_ONLY, peer_qpn, Psn::new(OUR_PSN))
        },
        ccx: None,
        ext: ExtHeaders::default(),
    };
    let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
    link.send(&ping, &payload)?;

    let (mut acked, mut pong) = (false, false);
    let mut buf = [0u8; 2048];
    while !(acked && pong) {
        let packet = link.recv(&mut buf)?;
        if packet.bth.dest_qp != OUR_QPN {
            return Err(format!("packet for QP {:#x}, not ours", packet.bth.dest_qp).into());
        }
        match packet.info.operation {
            Operation::Acknowledge => {
                let aeth = packet.aeth().expect("ACKs carry an AETH");
                if !matches!(aeth.syndrome, Syndrome::Ack(_)) {
                    return Err(format!("the peer refused our SEND: {:?}", aeth.syndrome).into());
                }
                acked |= packet.bth.psn == Psn::new(OUR_PSN);
            }
            Operation::Send if !pong => {
                pong = true;
                let ack = RoceHeaders {
                    bth: Bth::new(Opcode::RC_ACKNOWLEDGE, peer_qpn, packet.bth.psn),
                    ccx: None,
                    ext: ExtHeaders {
                        aeth: Some(Aeth {
                            syndrome: Syndrome::Ack(Credits::UNLIMITED),
                            msn: 1,
                        }),
                        ..ExtHeaders::default()
                    },
                };
                link.send(&ack, &[])?;
            }
            _ => println!("  (ignored)"),
        }
    }
    println!("ping acknowledged by the peer, pong acknowledged by us");
    Ok(())
}
