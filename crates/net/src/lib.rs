//! The real datapath: one [`sluice_core::Engine`] driven over a UDP socket as a [`Device`],
//! and a capture of what goes over the wire ([`Capture`]).
//!
//! RoCE v2 on an ordinary UDP socket: the kernel writes the IP and UDP headers, so the ICRC
//! (which covers them) is computed over the headers the kernel will write. Sends go out on
//! an unconnected socket with Don't-Fragment set, where Linux writes IPv4 identification 0
//! (and k for segment k of a GSO batch). Receives cannot see the IP header; the device
//! rebuilds it, and where the sender wrote a non-zero identification (Linux Soft-RoCE does)
//! it finds the identification that makes the ICRC match, if one exists
//! ([`sluice_wire::icrc::Ipv4IdSolver`]).
//!
//! Or past the kernel's UDP stack: with [`DeviceConfig::xdp`] a device sends and receives
//! whole frames through an AF_XDP socket on one interface, writing the Ethernet, IPv4 and
//! UDP headers itself, and finds what arrived by reading memory, without a system call.

#![warn(missing_docs)]

mod capture;
mod device;
mod link;
mod sys;
#[cfg(feature = "turn-timing")]
pub mod turn_timing;
mod worker;
mod xdp;

use std::io;
use std::net::SocketAddr;

pub use capture::{Capture, CaptureFilter};
pub use device::{DEFAULT_TOS, Device, DeviceConfig};
pub use worker::{ServiceWorker, Threaded, set_low_priority};

/// The MTU of the route from `local` to `peer` (the link's, or a smaller path MTU the kernel
/// learnt): what a RoCE packet plus its IP and UDP headers must fit in.
pub fn route_mtu(local: std::net::IpAddr, peer: std::net::IpAddr) -> io::Result<u32> {
    sys::route_mtu(local, peer)
}

/// A UDP socket bound to `local` and set up as a [`Device`]'s own (Don't Fragment, TOS `tos`
/// and a report of it on receive, buffers of `buffer_bytes`, GRO, kernel receive time
/// stamps): for a baseline that measures the kernel's path of a device's packets with no
/// device (`udp_pingpong --roce-shaped`). The device defaults are [`DEFAULT_TOS`] and
/// [`DeviceConfig::new`]'s `socket_buffer`.
pub fn bind_socket(
    local: SocketAddr,
    tos: u8,
    buffer_bytes: usize,
) -> io::Result<std::net::UdpSocket> {
    sys::Socket::bind(local, tos, buffer_bytes).map(sys::Socket::into_udp)
}

/// The index of `interface`, if an AF_XDP link ([`DeviceConfig::xdp`]) can be opened on it
/// as far as can be told without privileges: it exists in this network namespace and is not
/// a loopback interface (the check the link itself makes first, for a program that opens
/// its device later to make at once).
pub fn xdp_interface_index(interface: &str) -> io::Result<u32> {
    xdp::check_interface(interface)
}

/// What can go wrong in the datapath, said so that a user can act on it.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The device's address is the unspecified one.
    #[error(
        "a device needs a specific local address (the ICRC covers it), not the unspecified one"
    )]
    UnspecifiedAddress,
    /// The configured DSCP base leaves no room for the eight priority levels.
    #[error("dscp_base {0}: {1}")]
    DscpBase(u8, &'static str),
    /// A socket could not bind its address.
    #[error("cannot bind UDP {addr}: {source}{hint}", hint = bind_hint(source))]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// A packet does not fit the path with Don't-Fragment set.
    #[error(
        "a {len}-byte RoCE packet does not fit the path to {dst} with Don't-Fragment set: \
         choose a smaller path MTU (-m) or raise the link MTU"
    )]
    TooBig {
        /// Where it was going.
        dst: SocketAddr,
        /// Its length, BTH to ICRC.
        len: usize,
    },
    /// The kernel has no route to a peer.
    #[error("{dst} is unreachable: {source}")]
    Unreachable {
        /// The peer.
        dst: SocketAddr,
        /// What the kernel said.
        source: io::Error,
    },
    /// The AF_XDP link could not be opened (or was asked for where it cannot work).
    #[error("AF_XDP on {interface}: {source}")]
    Xdp {
        /// The interface it was to be opened on.
        interface: String,
        /// Why not.
        source: io::Error,
    },
    /// Any other failure of a socket's system call.
    #[error("socket: {0}")]
    Io(#[from] io::Error),
}

fn bind_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::AddrInUse => {
            " (another RoCE stack, e.g. a Soft-RoCE device or another sluice, holds the port)"
        }
        io::ErrorKind::AddrNotAvailable => " (the address is not configured on this host)",
        _ => "",
    }
}

/// What the datapath counted (the engine counts the transport: `Engine::counters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetCounters {
    /// Datagrams (or frames) received, each segment of a joined (GRO) one counted.
    pub rx_datagrams: u64,
    /// Receive system calls that returned datagrams (an XDP link reads its ring: none).
    pub rx_syscalls: u64,
    /// Not a RoCE v2 packet (dropped).
    pub rx_malformed: u64,
    /// The ICRC matched no header the packet can have travelled under (dropped).
    pub rx_icrc_errors: u64,
    /// IPv4 packets whose ICRC was computed over an identification found by solving for it
    /// (as Soft-RoCE writes them; accepted, with 16 bits less of corruption detection). Not
    /// counted: segment k of a joined (GRO) datagram whose ICRC was computed for
    /// identification k, as a GSO sender's are.
    pub rx_ipv4_id_nonzero: u64,
    /// Larger than the receive buffer (dropped).
    pub rx_truncated: u64,
    /// Frames longer than an XDP link takes (dropped): GSO batches that a UDP peer on this
    /// host sent across a veth, which hands them over whole. Run that peer without GSO
    /// (`DeviceConfig::offload` false, `sluice perf --no-offload`).
    pub rx_too_long: u64,
    /// Arrived marked Congestion Experienced.
    pub rx_ce: u64,
    /// Datagrams (or frames) sent, each segment of a GSO batch counted.
    pub tx_datagrams: u64,
    /// Send calls made (on an XDP link: the calls that had the kernel send the ring).
    pub tx_syscalls: u64,
    /// Sends the kernel segmented (GSO).
    pub tx_gso_batches: u64,
    /// Times the socket buffer was full.
    pub tx_blocked: u64,
    /// Packets the engine produced that could not be encoded (a bug if ever non-zero).
    pub tx_encode_errors: u64,
    /// Packets dropped before they left because the memory region their payload is read
    /// from was deregistered while they waited (with the other packets staged with them;
    /// the engine resends them, and fails the request whose memory is gone).
    pub tx_region_gone: u64,
    /// Packets not sent on an XDP link because the peer's MAC address was not known yet
    /// (the kernel is asked to resolve it; the engine resends them, as after a loss).
    pub tx_unresolved: u64,
}
