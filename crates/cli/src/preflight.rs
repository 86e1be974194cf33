//! Checks a program makes before it connects, of what it opens only once connected (a
//! server opens its device when a client has connected): an XDP interface that cannot work
//! or a RoCE port that another stack holds is refused at once, not after the wait for a
//! client.

use std::io;
use std::net::{IpAddr, SocketAddr};

use sluice_net::NetError;

/// Whether an AF_XDP link can be opened on `interface`, as far as can be told without
/// privileges: it exists in this network namespace and is not a loopback interface.
pub fn check_xdp_interface(interface: &str) -> io::Result<()> {
    sluice_net::xdp_interface_index(interface).map(drop)
}

/// Whether a device could bind UDP port `port` on `local`, for a program that opens its
/// device later (a server, once a client connects) to report a port in use at once. With
/// an address: binds it and lets it go. Without one, or with the unspecified one (the
/// device binds the address a client will reach, not known yet): whether a socket holds
/// the port on every address (the unspecified one, as Soft-RoCE's does), from the
/// kernel's socket tables; one on a particular address may not be the one a client
/// reaches, and is left to the device's own bind.
pub fn check_roce_port(local: Option<IpAddr>, port: u16) -> Result<(), NetError> {
    if let Some(ip) = local.filter(|ip| !ip.is_unspecified()) {
        let addr = SocketAddr::new(ip, port);
        return std::net::UdpSocket::bind(addr)
            .map(drop)
            .map_err(|source| NetError::Bind { addr, source });
    }
    let everywhere = ["/proc/net/udp", "/proc/net/udp6"]
        .iter()
        .any(|table| std::fs::read_to_string(table).is_ok_and(|t| holds_everywhere(&t, port)));
    if everywhere {
        return Err(NetError::Bind {
            addr: SocketAddr::from(([0, 0, 0, 0], port)),
            source: io::ErrorKind::AddrInUse.into(),
        });
    }
    Ok(())
}

/// Whether a `/proc/net/udp` or `udp6` table lists a socket on `port` of the unspecified
/// address (each line's second field is `ADDRESS:PORT` in hex, the address all zeros).
fn holds_everywhere(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|line| {
        let Some((addr, p)) = line
            .split_whitespace()
            .nth(1)
            .and_then(|f| f.split_once(':'))
        else {
            return false;
        };
        u16::from_str_radix(p, 16) == Ok(port) && addr.bytes().all(|b| b == b'0')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_held_on_every_address_is_found_in_the_socket_tables() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                     \x20 101: 0200007F:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 ffff 0\n\
                     \x20 102: 00000000:1F90 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 ffff 0\n";
        // 127.0.0.2:4791 is one address only; 0.0.0.0:8080 is every address.
        assert!(!holds_everywhere(table, 4791));
        assert!(holds_everywhere(table, 8080));
        assert!(!holds_everywhere(table, 9));
        let v6 = "  sl  local_address                         remote_address                        st\n\
                  \x20 5: 00000000000000000000000000000000:12B7 00000000000000000000000000000000:0000 07\n";
        assert!(holds_everywhere(v6, 4791));
        assert!(!holds_everywhere("", 4791));
        assert!(!holds_everywhere("header\n garbage\n 1: nocolon x\n", 4791));
    }

    #[test]
    fn a_port_held_is_reported_before_a_device_binds_it() {
        let held = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let e = check_roce_port(None, port).unwrap_err();
        assert!(e.to_string().contains("holds the port"), "{e}");
        let e = check_roce_port(Some("127.0.0.2".parse().unwrap()), port).unwrap_err();
        assert!(e.to_string().contains("cannot bind UDP 127.0.0.2"), "{e}");
        drop(held);
        let free = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
        let port = free.local_addr().unwrap().port();
        // Held on one address only: not on every one, so left to the device, also when
        // the server is to serve on all addresses by name.
        assert!(check_roce_port(None, port).is_ok());
        assert!(check_roce_port(Some("0.0.0.0".parse().unwrap()), port).is_ok());
    }

    /// An interface an XDP link cannot use is refused before connecting, saying why.
    #[test]
    fn an_xdp_interface_that_cannot_work_is_refused() {
        let e = check_xdp_interface("sluice-nonesuch").unwrap_err();
        assert!(e.to_string().contains("no such interface"), "{e}");
        let e = check_xdp_interface("lo").unwrap_err();
        assert!(e.to_string().contains("use the UDP datapath"), "{e}");
    }
}
