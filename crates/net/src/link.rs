//! What a device's RoCE packets go over: a [`Link`], either the kernel's UDP stack (a UDP
//! socket, with send-only source sockets beside it) or an AF_XDP socket on one interface.
//! Both send a batch of staged messages and receive a batch of packets; what each offers
//! beyond that ([`Offers`]: segmentation and joined receives) differs. The device picks its link once, when it opens; the datapath matches on it once
//! per batch, never per packet, and no call goes through a vtable.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use crate::sys::{self, OutMsg, OutPacket};
use crate::xdp::{SendStop, XdpLink};
use crate::{DeviceConfig, NetError};

/// The link a device speaks RoCE v2 on.
#[derive(Debug)]
pub(crate) enum Link {
    /// A UDP socket: the kernel writes the IP and UDP headers.
    Udp(UdpLink),
    /// An AF_XDP socket ([`DeviceConfig::xdp`]): whole frames, headers written by Sluice.
    Xdp {
        link: XdpLink,
        /// The device's UDP socket, kept bound so that the port stays the device's (nothing
        /// is sent or received on it).
        _port: sys::Socket,
        /// Always empty: an XDP link sends from its own address only.
        sources: SourceSockets,
    },
}

/// The UDP socket a device speaks on, the sockets its packets may leave from besides it,
/// and the arrays its batched system calls use.
#[derive(Debug)]
pub(crate) struct UdpLink {
    pub(crate) socket: sys::Socket,
    sources: SourceSockets,
    sender: sys::Sender,
    pub(crate) receiver: sys::Receiver,
}

/// What a link offers the datapath beyond sending and receiving batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offers {
    /// Runs of full-size packets to one peer leave as one send the kernel cuts up (GSO).
    pub(crate) gso: bool,
    /// The kernel may join datagrams of one flow into one receive (GRO).
    pub(crate) gro: bool,
}

impl Link {
    /// Binds the device's UDP socket (set up as `config` says) and, with
    /// [`DeviceConfig::xdp`], opens the AF_XDP link beside it; else the source sockets.
    pub(crate) fn open(config: &DeviceConfig) -> Result<(Link, SocketAddr), NetError> {
        let mut socket = sys::Socket::bind(config.local, config.tos, config.socket_buffer)
            .map_err(|source| NetError::Bind {
                addr: config.local,
                source,
            })?;
        if !config.offload {
            socket.disable_gso();
            socket.disable_gro()?;
        }
        let local = socket.local_addr()?;
        let link = match (&config.xdp, local) {
            (None, _) => Link::Udp(UdpLink::new(socket, config)?),
            (Some(interface), SocketAddr::V4(v4)) if config.source_sockets == 0 => {
                // One packet per frame: no GSO batches to stage. And no GRO for the socket
                // kept for the port: a driver's GRO would join the link's frames for it
                // before the XDP program runs (in generic mode), into one too big for a
                // frame.
                socket.disable_gso();
                socket.disable_gro()?;
                let link =
                    XdpLink::open(interface, v4, config.tos).map_err(|source| NetError::Xdp {
                        interface: interface.clone(),
                        source,
                    })?;
                Link::Xdp {
                    link,
                    _port: socket,
                    sources: SourceSockets::default(),
                }
            }
            (Some(interface), _) => {
                return Err(NetError::Xdp {
                    interface: interface.clone(),
                    source: io::Error::new(
                        io::ErrorKind::Unsupported,
                        "the XDP link takes an IPv4 address and no source sockets",
                    ),
                });
            }
        };
        Ok((link, local))
    }

    /// What the link offers now (GSO goes off for good if the kernel refuses a batch).
    pub(crate) fn offers(&self) -> Offers {
        match self {
            Link::Udp(udp) => Offers {
                gso: udp.socket.gso,
                gro: udp.socket.gro,
            },
            Link::Xdp { .. } => Offers {
                gso: false,
                gro: false,
            },
        }
    }

    /// The sockets packets may leave from besides the device's own.
    pub(crate) fn sources(&self) -> &SourceSockets {
        match self {
            Link::Udp(udp) => &udp.sources,
            Link::Xdp { sources, .. } => sources,
        }
    }

    /// The descriptor that is readable when packets wait.
    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Link::Udp(udp) => udp.socket.fd(),
            Link::Xdp { link, .. } => link.fd(),
        }
    }

    /// Sends messages `msgs` of `packets` (all from one source socket), each packet as the
    /// parts `parts` gives. Returns how many messages went, in order (fewer when the socket
    /// buffer or transmit ring is full: try again later), and why the next one cannot leave
    /// now, if the link knows. Adds the system calls it made to `syscalls`.
    ///
    /// Inlined into the device's one caller, where the send was before there were links:
    /// a call of its own costs a hot loop's every turn.
    #[inline]
    pub(crate) fn send<'a>(
        &mut self,
        packets: &[OutPacket],
        msgs: &[OutMsg],
        parts: impl Fn(&OutPacket) -> [&'a [u8]; sys::PARTS],
        syscalls: &mut u64,
        #[cfg(feature = "turn-timing")] turn: &mut crate::turn_timing::TurnTiming,
    ) -> (io::Result<usize>, Option<SendStop>) {
        match self {
            Link::Udp(udp) => {
                *syscalls += 1;
                let socket = udp.sources.socket(msgs[0].source, &udp.socket);
                #[cfg(feature = "turn-timing")]
                let start = turn.sending();
                let sent = udp.sender.send(socket, packets, msgs, parts);
                #[cfg(feature = "turn-timing")]
                turn.sent(start);
                (sent, None)
            }
            Link::Xdp { link, .. } => {
                let (n, stop) = link.send(packets, msgs, parts, syscalls);
                (Ok(n), stop)
            }
        }
    }

    /// Stops segmenting batches (the kernel refused one: a device without the offload).
    pub(crate) fn disable_gso(&mut self) {
        if let Link::Udp(udp) = self {
            udp.socket.disable_gso();
        }
    }
}

impl UdpLink {
    /// The sockets its packets may leave from besides its own.
    pub(crate) fn sources(&self) -> &SourceSockets {
        &self.sources
    }

    /// The link of `socket`, with the source sockets `config` asks for.
    fn new(socket: sys::Socket, config: &DeviceConfig) -> Result<UdpLink, NetError> {
        let local = socket.local_addr()?;
        let mut pool = Vec::with_capacity(usize::from(config.source_sockets));
        for _ in 0..config.source_sockets {
            // Port 0: the kernel picks a free one, so devices on one address never collide.
            let any_port = SocketAddr::new(local.ip(), 0);
            let source = sys::Socket::bind(any_port, config.tos, config.socket_buffer).map_err(
                |source| NetError::Bind {
                    addr: any_port,
                    source,
                },
            )?;
            let addr = source.local_addr()?;
            pool.push((source, addr));
        }
        // A GRO batch holds up to 64 KiB; without GRO one datagram is at most an MTU packet.
        let slot = if socket.gro { 1 << 16 } else { 9216 };
        Ok(UdpLink {
            socket,
            sources: SourceSockets { pool },
            sender: sys::Sender::new(),
            receiver: sys::Receiver::new(slot),
        })
    }
}

/// The send-only sockets a device's packets may leave from besides its own (numbered from 1
/// in [`OutMsg::source`]; 0 is the device's own socket).
#[derive(Debug, Default)]
pub(crate) struct SourceSockets {
    pool: Vec<(sys::Socket, SocketAddr)>,
}

impl SourceSockets {
    /// Whether there are none: every packet leaves from the device's own socket.
    pub(crate) fn is_empty(&self) -> bool {
        self.pool.is_empty()
    }

    /// Their addresses, in order.
    pub(crate) fn addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.pool.iter().map(|s| s.1)
    }

    /// The socket for a queue pair whose source port is `port`: `port mod n` of the pool.
    pub(crate) fn pick(&self, port: u16) -> u8 {
        match self.pool.len() {
            0 => 0,
            n => 1 + (usize::from(port) % n) as u8,
        }
    }

    /// The socket `source` names (`own` for 0).
    fn socket<'a>(&'a self, source: u8, own: &'a sys::Socket) -> &'a sys::Socket {
        match source {
            0 => own,
            k => &self.pool[usize::from(k) - 1].0,
        }
    }

    /// The address `source` sends from (`own` for 0): what its packets' ICRC covers.
    pub(crate) fn addr<'a>(&'a self, source: u8, own: &'a SocketAddr) -> &'a SocketAddr {
        match source {
            0 => own,
            k => &self.pool[usize::from(k) - 1].1,
        }
    }

    /// The socket `source` names, or the device's own for 0.
    pub(crate) fn fd(&self, source: u8, own: &sys::Socket) -> RawFd {
        self.socket(source, own).fd()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    fn config(source_sockets: u8, offload: bool) -> DeviceConfig {
        let mut config = DeviceConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST));
        config.local.set_port(0);
        config.source_sockets = source_sockets;
        config.offload = offload;
        config
    }

    /// A UDP link works on loopback and offers segmentation as configured; its source sockets are on its address, and
    /// queue pairs are spread over them by source port.
    #[test]
    fn a_udp_link_offers_what_its_socket_does() {
        let (link, local) = Link::open(&config(3, false)).unwrap();
        let offers = link.offers();
        assert_eq!((offers.gso, offers.gro), (false, false));
        let sources = link.sources();
        let addrs: Vec<_> = sources.addrs().collect();
        assert_eq!(addrs.len(), 3);
        assert!(addrs.iter().all(|a| a.ip() == local.ip() && *a != local));
        assert_eq!(sources.pick(4), 2);
        assert_eq!(*sources.addr(0, &local), local);
        assert_eq!(*sources.addr(2, &local), addrs[1]);
        assert_eq!(link.fd(), sources.fd(0, udp(&link)));

        let (mut link, _) = Link::open(&config(0, true)).unwrap();
        assert!(link.sources().is_empty());
        assert_eq!(link.sources().pick(4), 0);
        let gso = link.offers().gso;
        link.disable_gso();
        assert!(!link.offers().gso, "was {gso}");
    }

    fn udp(link: &Link) -> &sys::Socket {
        match link {
            Link::Udp(udp) => &udp.socket,
            Link::Xdp { .. } => panic!("not UDP"),
        }
    }

    /// An XDP link is refused where it cannot work (IPv6, source sockets) before anything
    /// is opened, and says why.
    #[test]
    fn an_xdp_link_takes_ipv4_and_no_source_sockets() {
        let mut c = config(2, true);
        c.xdp = Some("lo".into());
        let e = Link::open(&c).unwrap_err();
        assert!(e.to_string().contains("no source sockets"), "{e}");
        if std::net::UdpSocket::bind("[::1]:0").is_err() {
            return; // no IPv6 on this host
        }
        let mut c = config(0, true);
        c.local = "[::1]:0".parse().unwrap();
        c.xdp = Some("lo".into());
        let e = Link::open(&c).unwrap_err();
        assert!(e.to_string().contains("takes an IPv4 address"), "{e}");
    }
}
