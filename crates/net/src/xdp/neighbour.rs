//! Peers' MAC addresses: entries of the kernel's neighbour table (`/proc/net/arp`) and MAC
//! addresses as Linux writes them. No unsafe code.

use std::net::Ipv4Addr;

/// The MAC address of `peer` on `interface` in a `/proc/net/arp` table, if complete.
pub(super) fn arp_entry(table: &str, peer: Ipv4Addr, interface: &str) -> Option<[u8; 6]> {
    // IP address, HW type, Flags, HW address, Mask, Device.
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let complete = f
            .get(2)
            .and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok())?
            & 0x2
            != 0;
        if f.len() < 6 || f[0].parse::<Ipv4Addr>().ok()? != peer || f[5] != interface || !complete {
            return None;
        }
        parse_mac(f[3])
    })
}

pub(super) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Neighbour entries are taken only complete, for the peer and interface asked.
    #[test]
    fn arp_table_entries() {
        let table = "IP address       HW type     Flags       HW address            Mask     Device\n\
                     10.1.2.200       0x1         0x2         aa:bb:cc:dd:ee:0f     *        veth0\n\
                     10.1.2.201       0x1         0x0         00:00:00:00:00:00     *        veth0\n\
                     10.1.2.202       0x1         0x2         aa:bb:cc:dd:ee:10     *        eth1\n";
        let peer = |last| Ipv4Addr::new(10, 1, 2, last);
        assert_eq!(
            arp_entry(table, peer(200), "veth0"),
            Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x0f])
        );
        assert_eq!(arp_entry(table, peer(201), "veth0"), None, "incomplete");
        assert_eq!(
            arp_entry(table, peer(202), "veth0"),
            None,
            "other interface"
        );
        assert_eq!(arp_entry(table, peer(9), "veth0"), None, "absent");
        assert_eq!(parse_mac("aa:bb:cc:dd:ee"), None);
        assert_eq!(parse_mac("aa:bb:cc:dd:ee:ff:00"), None);
    }

    /// A table as this kernel writes it (padded columns, a header line), with the lines a
    /// reader meets: cut short, blank, an address that is not one, flags that are not hex,
    /// a MAC address that is not one. None of them is taken, none stops the lookup of the
    /// good entry after them.
    #[test]
    fn malformed_arp_lines_are_skipped() {
        let table = "IP address       HW type     Flags       HW address            Mask     Device\n\
                     10.1.2.200       0x1         0x2\n\
                     \n\
                     10.1.2.2OO       0x1         0x2         aa:bb:cc:dd:ee:01     *        veth0\n\
                     10.1.2.200       0x1         0xZZ        aa:bb:cc:dd:ee:02     *        veth0\n\
                     10.1.2.200       0x1         0x2         aa:bb:cc:dd:ee        *        veth0\n\
                     10.1.2.200       0x1         0x6         aa:bb:cc:dd:ee:g3     *        veth0\n\
                     10.1.2.200       0x1         0x6         02:00:5e:10:00:04     *        veth0\n";
        let peer = Ipv4Addr::new(10, 1, 2, 200);
        // 0x6: complete (0x2) and permanent (0x4).
        assert_eq!(
            arp_entry(table, peer, "veth0"),
            Some([0x02, 0x00, 0x5e, 0x10, 0x00, 0x04])
        );
        assert_eq!(arp_entry(table, peer, "veth1"), None);
        // The header line is never an entry, even if it reads as one.
        let header_only = "10.1.2.200 0x1 0x2 aa:bb:cc:dd:ee:0f * veth0\n";
        assert_eq!(arp_entry(header_only, peer, "veth0"), None);
        assert_eq!(arp_entry("", peer, "veth0"), None);
    }

    /// MAC addresses as `/sys/class/net/*/address` and `/proc/net/arp` write them: six hex
    /// bytes, colon-separated, either case, a trailing newline allowed.
    #[test]
    fn mac_addresses_parse() {
        assert_eq!(
            parse_mac("02:00:5e:AB:cd:ef\n"),
            Some([0x02, 0x00, 0x5e, 0xab, 0xcd, 0xef])
        );
        assert_eq!(parse_mac("0:1:2:3:4:5"), Some([0, 1, 2, 3, 4, 5]));
        for bad in [
            "",
            ":::::",
            "aa:bb:cc:dd:ee:fg",
            "aa-bb-cc-dd-ee-ff",
            "aa:bb:cc:dd:ee:100",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad:?}");
        }
    }
}
