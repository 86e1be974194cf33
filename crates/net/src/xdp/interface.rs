//! The interface a link is opened on: its index (checked before anything is attached) and
//! its MAC address.
//!
//! Unsafe code: one call of `if_nametoindex`, which says why it is sound.
#![allow(unsafe_code)]

use std::io;

use super::context;
use super::neighbour::parse_mac;

/// The MAC address of `interface` (from sysfs): the source of every frame the link sends.
pub(super) fn interface_mac(interface: &str) -> io::Result<[u8; 6]> {
    let path = format!("/sys/class/net/{interface}/address");
    let text =
        std::fs::read_to_string(&path).map_err(|e| context(e, &format!("reading {path}")))?;
    parse_mac(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{path}: not a MAC address"),
        )
    })
}

/// The index of `interface`, if an XDP link can be opened on it as far as can be told
/// without privileges: it exists in this network namespace and is not a loopback one.
pub(crate) fn check_interface(interface: &str) -> io::Result<u32> {
    let name = std::ffi::CString::new(interface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"))?;
    // SAFETY: a NUL-terminated string that lives across the call.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(context(
            io::Error::last_os_error(),
            &format!("{interface}: no such interface in this network namespace"),
        ));
    }
    if is_loopback(interface) {
        // It has no neighbours to resolve, and the kernel drops as martians the frames an
        // XDP socket sends into it from 127.0.0.0/8 (unless route_localnet is set). With
        // both worked around it is no faster than a UDP end: its sends go through the
        // kernel's IP input, which a UDP socket's skip, and loopback's one queue takes one
        // XDP socket, so one end at most.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{interface} is a loopback interface: an XDP link needs an Ethernet interface \
                 with the peer on its link (on loopback, use the UDP datapath)"
            ),
        ));
    }
    Ok(ifindex)
}

/// Whether `interface` is a loopback interface (link type `ARPHRD_LOOPBACK`).
fn is_loopback(interface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{interface}/type"))
        .is_ok_and(|t| t.trim().parse() == Ok(libc::ARPHRD_LOOPBACK))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing interface is named in the error, not a panic.
    #[test]
    fn a_missing_interface_is_named() {
        let e = check_interface("sluice-nonesuch").unwrap_err();
        assert!(
            e.to_string().contains("sluice-nonesuch: no such interface"),
            "{e}"
        );
        let e = check_interface("bad\0name").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// Loopback is found by its link type, and refused.
    #[test]
    fn loopback_is_refused() {
        assert!(is_loopback("lo"));
        assert!(!is_loopback("sluice-nonesuch"));
        let e = check_interface("lo").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("use the UDP datapath"), "{e}");
    }
}
