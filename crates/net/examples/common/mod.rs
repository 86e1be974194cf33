//! What the UDP baselines (`udp_pingpong`, `udp_stream`) share: a destination in the C form
//! `sendmmsg` takes, and the control message that makes one send a GSO batch.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;

/// `addr` as a `sockaddr_in`: the baselines send IPv4 only.
pub(crate) fn sockaddr_v4(addr: SocketAddr) -> io::Result<libc::sockaddr_in> {
    let SocketAddr::V4(v4) = addr else {
        return Err(io::Error::other("IPv4 only"));
    };
    Ok(libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(v4.ip().octets()),
        },
        sin_zero: [0; 8],
    })
}

/// Points `hdr`'s control buffer at `control` and writes one UDP_SEGMENT message there: the
/// kernel cuts the send into segments of `size` bytes (UDP GSO). `control` must outlive the
/// send that uses `hdr`.
pub(crate) fn set_gso_segment(hdr: &mut libc::msghdr, control: &mut [u64], size: u16) {
    // SAFETY: CMSG_SPACE only computes a length.
    let space = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
    assert!(
        size_of_val(control) >= space,
        "room for one UDP_SEGMENT message"
    );
    hdr.msg_control = control.as_mut_ptr().cast::<libc::c_void>();
    hdr.msg_controllen = space as _;
    // SAFETY: the header's control buffer is `control`, of at least `space` bytes (checked
    // above), so CMSG_FIRSTHDR is not null and it and CMSG_DATA stay inside it; `control`
    // is u64-aligned, as a cmsghdr needs.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(hdr);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
        libc::CMSG_DATA(c).cast::<u16>().write_unaligned(size);
    }
}
