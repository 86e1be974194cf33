//! Two Sluice devices on this host's loopback, talking RoCE v2 over real UDP sockets: an RDMA
//! WRITE, a READ back and a fetch-and-add, each checked.
//!
//! `cargo run --release -p sluice-net --example hello_rdma`

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use sluice_core::{
    Access, Completion, Connection, CqId, Memory, Mtu, QpConfig, QpNum, SendOp, SendWr, Sge,
    WcStatus,
};
use sluice_net::{Device, DeviceConfig};
use sluice_wire::Psn;

/// Opens a device on 127.0.0.1 with an ephemeral UDP port, one 4 KiB region, a CQ and a QP.
fn endpoint(fill: u8) -> Result<(Device, u32, CqId, QpNum), Box<dyn std::error::Error>> {
    let mut config = DeviceConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST));
    config.local.set_port(0);
    let mut dev = Device::open(config)?;
    let verbs = dev.engine();
    let pd = verbs.alloc_pd();
    let memory = Memory::Bytes(vec![fill; 4096].into_boxed_slice());
    let mr = verbs.register_mr(pd, 0x10_000, memory, Access::ALL | Access::LOCAL_WRITE)?;
    let cq = verbs.create_cq(64)?;
    let qp = verbs.create_qp(QpConfig {
        pd,
        send_cq: cq,
        recv_cq: cq,
        caps: Default::default(),
    })?;
    Ok((dev, mr.rkey, cq, qp))
}

/// Pumps both devices until `dev` has a completion on `cq`.
fn complete(
    a: &mut Device,
    b: &mut Device,
    cq: CqId,
) -> Result<Completion, Box<dyn std::error::Error>> {
    for _ in 0..100_000 {
        a.poll()?;
        b.poll()?;
        if let Some(c) = a.engine().poll_cq(cq).map_err(|_| "CQ overrun")? {
            return Ok(c);
        }
        a.wait(Some(Duration::from_micros(50)))?;
    }
    Err("no completion".into())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut a, a_key, a_cq, a_qp) = endpoint(0xAA)?;
    let (mut b, b_key, _, b_qp) = endpoint(0xBB)?;
    // Each device sends to the other's port (both on 127.0.0.1 here; 4791 between hosts).
    a.set_peer_port(b.local_addr().port());
    b.set_peer_port(a.local_addr().port());
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    a.engine().connect(
        a_qp,
        &Connection::new(lo, b_qp.0, Mtu::M1024, Psn::new(100), Psn::new(200)),
    )?;
    b.engine().connect(
        b_qp,
        &Connection::new(lo, a_qp.0, Mtu::M1024, Psn::new(200), Psn::new(100)),
    )?;

    // WRITE 3000 bytes of A's 0xAA into B (three packets at MTU 1024).
    let sge = [Sge {
        lkey: a_key,
        addr: 0x10_000,
        len: 3000,
    }];
    let write = SendOp::Write {
        remote_addr: 0x10_000,
        rkey: b_key,
    };
    a.engine().post_send(a_qp, &SendWr::new(1, write, &sge))?;
    let c = complete(&mut a, &mut b, a_cq)?;
    assert_eq!(c.status, WcStatus::Success);
    let landed = b.engine().mr_bytes(b_key).ok_or("region")?;
    assert!(landed[..3000].iter().all(|&x| x == 0xAA) && landed[3000] == 0xBB);
    println!("WRITE of 3000 bytes: {:?}", c.status);

    // READ B's untouched tail (0xBB) back over A's first 1000 bytes.
    let sge = [Sge {
        lkey: a_key,
        addr: 0x10_000,
        len: 1000,
    }];
    let read = SendOp::Read {
        remote_addr: 0x10_000 + 3000,
        rkey: b_key,
    };
    a.engine().post_send(a_qp, &SendWr::new(2, read, &sge))?;
    let c = complete(&mut a, &mut b, a_cq)?;
    let local = a.engine().mr_bytes(a_key).ok_or("region")?;
    assert!(local[..1000].iter().all(|&x| x == 0xBB));
    println!("READ of 1000 bytes: {:?}", c.status);

    // Fetch-and-add 5 on B's first word (a u64 in host byte order, as verbs define it; the
    // wire carries it big-endian); the old value lands in A.
    let sge = [Sge {
        lkey: a_key,
        addr: 0x10_000 + 2048,
        len: 8,
    }];
    let faa = SendOp::FetchAdd {
        remote_addr: 0x10_000,
        rkey: b_key,
        add: 5,
    };
    a.engine().post_send(a_qp, &SendWr::new(3, faa, &sge))?;
    let c = complete(&mut a, &mut b, a_cq)?;
    let old =
        u64::from_ne_bytes(a.engine().mr_bytes(a_key).ok_or("region")?[2048..2056].try_into()?);
    let new = u64::from_ne_bytes(b.engine().mr_bytes(b_key).ok_or("region")?[..8].try_into()?);
    assert_eq!(new, old.wrapping_add(5));
    println!("FETCH_ADD: {:?}, old {old:#x}, new {new:#x}", c.status);

    let to = SocketAddr::new(lo, b.local_addr().port());
    println!(
        "A sent {} datagrams to {to}; B received {}",
        a.counters().tx_datagrams,
        b.counters().rx_datagrams
    );
    Ok(())
}
