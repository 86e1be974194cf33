//! The `bpf` system calls: the socket map, the program (from `program`), and its attachment.
//!
//! Unsafe code: the `bpf` system call itself, and owning the descriptors it returns; every
//! unsafe block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use libc::{c_int, c_void};

use super::context;
use super::program;

const BPF_MAP_CREATE: c_int = 0;
const BPF_MAP_UPDATE_ELEM: c_int = 2;
const BPF_PROG_LOAD: c_int = 5;
const BPF_LINK_CREATE: c_int = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

#[repr(C)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

fn sys_bpf<T>(cmd: c_int, attr: &mut T) -> io::Result<c_int> {
    // SAFETY: `attr` lives across the call and its size is passed; the kernel reads (and
    // for some commands writes) only that many bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<c_void>(),
            size_of::<T>() as u32,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as c_int)
    }
}

fn owned(fd: c_int) -> OwnedFd {
    // SAFETY: a descriptor the kernel just returned to us, owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A socket map of one entry: receive queue 0's socket.
pub(super) fn create_xskmap() -> io::Result<OwnedFd> {
    let mut attr = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: 1,
        map_flags: 0,
    };
    sys_bpf(BPF_MAP_CREATE, &mut attr)
        .map(owned)
        .map_err(|e| context(e, "creating the XDP socket map (needs root)"))
}

/// The XDP program: a frame that is Ethernet + IPv4 without options + UDP to `ip` and
/// `port` goes to the socket of its receive queue in `map` (if there is one); every
/// other frame goes on to the kernel (`XDP_PASS`).
pub(super) fn load_program(map: RawFd, ip: Ipv4Addr, port: u16) -> io::Result<OwnedFd> {
    let prog = program::assemble(map, ip, port);
    let license = c"GPL";
    let mut log = vec![0u8; 1 << 16];
    let mut name = [0u8; 16];
    name[..12].copy_from_slice(b"sluice_xsk\0\0");
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: prog.len() as u32,
        insns: prog.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name,
        prog_ifindex: 0,
        expected_attach_type: BPF_XDP,
    };
    sys_bpf(BPF_PROG_LOAD, &mut attr).map(owned).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let verifier = String::from_utf8_lossy(&log[..end]);
        context(e, &format!("loading the XDP program: {}", verifier.trim()))
    })
}

/// Puts socket `socket` in `map` for receive queue 0.
pub(super) fn set_socket(map: RawFd, socket: RawFd) -> io::Result<()> {
    let key = 0u32;
    let value = socket as u32;
    let mut attr = MapUpdate {
        map_fd: map as u32,
        _pad: 0,
        key: (&raw const key) as u64,
        value: (&raw const value) as u64,
        flags: 0,
    };
    sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// Attaches `program` to interface `ifindex` in generic (skb) mode, which every driver
/// supports; closing the returned link detaches it.
pub(super) fn attach(program: RawFd, ifindex: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreate {
        prog_fd: program as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: XDP_FLAGS_SKB_MODE,
    };
    sys_bpf(BPF_LINK_CREATE, &mut attr).map(owned).map_err(|e| {
        context(
            e,
            "attaching the XDP program (is another XDP program on the interface?)",
        )
    })
}
