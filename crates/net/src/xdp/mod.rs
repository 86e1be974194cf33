//! An AF_XDP link: RoCE v2 frames sent and received through an XDP socket on one network
//! interface, past the kernel's IP and UDP stack. Sluice writes the Ethernet, IPv4 and UDP
//! headers itself; a small XDP program (loaded here, detached when the link closes) hands
//! the interface's RoCE packets for this device's address and port to the socket and every
//! other packet (ARP, the perftest TCP exchange, other UDP) to the kernel as usual.
//!
//! Why: a UDP send and receive cost the kernel about a microsecond more than a frame into
//! and out of an XDP socket's rings (a ping-pong between two network namespaces over a
//! veth, generic XDP, copy mode), and the receiving end finds the frame by reading memory,
//! with no system call.
//!
//! Scope: IPv4, interface queue 0 (a veth or any single-queue interface; on a multi-queue
//! NIC steer RoCE to queue 0), copy mode (`XDP_COPY`, which every driver supports), frames
//! of up to 9,014 bytes over several 4 KiB chunks (multi-buffer, Linux 6.6 and later; one
//! chunk, RoCE path MTU 2048 at most, before), the peer on the link (its MAC from the
//! kernel's neighbour table). Needs CAP_NET_ADMIN and CAP_BPF (root).
//!
//! The modules: a small unsafe core that makes system calls and reads memory the kernel
//! shares (`link`: the socket and its setup; `umem`; `ring`; `bpf`: the program's load and
//! attachment; `interface`: its index), every unsafe block saying why it is sound; and
//! pure parts with no unsafe code, tested on their own (`program`: the eBPF instructions;
//! `neighbour`: the ARP table and MAC addresses; `frame`: the frame's headers).

mod bpf;
mod frame;
mod interface;
mod link;
mod neighbour;
mod program;
mod ring;
mod umem;

use std::io;

pub(crate) use interface::check_interface;
pub(crate) use link::{Refusal, SendStop, XdpLink};

/// `e`, saying what was being done when it happened.
fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
