//! The XDP program, as eBPF instructions: a frame that is Ethernet + IPv4 without options +
//! UDP to the link's address and port goes to the XDP socket of its receive queue; every
//! other frame goes on to the kernel. Assembled here, loaded by `bpf`. No unsafe code.

use std::net::Ipv4Addr;
use std::os::fd::RawFd;

use super::frame::{HEADERS_LEN, field};

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Insn {
    /// Operation (class, size or source, mode or operation).
    code: u8,
    /// Destination register in the low nibble, source register in the high one.
    regs: u8,
    /// A jump's offset or a load's displacement.
    off: i16,
    /// The immediate operand.
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

// Instruction classes, sizes, modes and operations (linux/bpf_common.h, linux/bpf.h).
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const JGT_X: u8 = 0x2d;
const JNE_K: u8 = 0x56; // BPF_JMP32 | BPF_JNE | BPF_K: compares the low 32 bits
const LD_DW_IMM: u8 = 0x18;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

/// Helper `bpf_redirect_map`.
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// A 64-bit immediate load whose value is a map's file descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// The verdict that hands a frame on to the kernel's stack.
const XDP_PASS: i32 = 2;

/// Where in `struct xdp_md` (the program's context) its fields lie.
const CTX_DATA: i16 = 0;
const CTX_DATA_END: i16 = 4;
const CTX_RX_QUEUE_INDEX: i16 = 16;

/// Instructions in the program.
pub(super) const LEN: usize = 23;

/// The program for a link on `ip` and UDP `port` whose sockets are in XSKMAP `map`.
pub(super) fn assemble(map: RawFd, ip: Ipv4Addr, port: u16) -> [Insn; LEN] {
    // Loads read network-order bytes into little-endian registers: compare with the
    // bytes as the load sees them.
    let ethertype_ipv4 = i32::from(u16::from_le_bytes([0x08, 0x00]));
    let dst_ip = u32::from_le_bytes(ip.octets()) as i32;
    let dst_port = i32::from(u16::from_le_bytes(port.to_be_bytes()));
    let at = |offset: usize| offset as i16;
    // A jump's offset counts instructions after it: each lands on `pass` (21). The load
    // of the map's address takes two.
    [
        insn(LDX_W, 2, 1, CTX_DATA, 0),                   // 0: r2 = ctx->data
        insn(LDX_W, 3, 1, CTX_DATA_END, 0),               // 1: r3 = ctx->data_end
        insn(MOV64_X, 4, 2, 0, 0),                        // 2: r4 = r2
        insn(ADD64_K, 4, 0, 0, HEADERS_LEN as i32),       // 3: r4 += 42
        insn(JGT_X, 4, 3, 16, 0),                         // 4: short frame: pass
        insn(LDX_H, 5, 2, at(field::ETHERTYPE.start), 0), // 5: ethertype
        insn(JNE_K, 5, 0, 14, ethertype_ipv4),            // 6
        insn(LDX_B, 5, 2, at(field::IP_VERSION_IHL), 0),  // 7: version and IHL
        insn(JNE_K, 5, 0, 12, 0x45),                      // 8
        insn(LDX_B, 5, 2, at(field::IP_PROTOCOL), 0),     // 9: protocol
        insn(JNE_K, 5, 0, 10, 17),                        // 10
        insn(LDX_W, 5, 2, at(field::IP_DST.start), 0),    // 11: destination address
        insn(JNE_K, 5, 0, 8, dst_ip),                     // 12
        insn(LDX_H, 5, 2, at(field::UDP_DST_PORT.start), 0), // 13: UDP destination port
        insn(JNE_K, 5, 0, 6, dst_port),                   // 14
        insn(LDX_W, 2, 1, CTX_RX_QUEUE_INDEX, 0),         // 15: r2 = ctx->rx_queue_index
        insn(LD_DW_IMM, 1, BPF_PSEUDO_MAP_FD, 0, map),    // 16-17: r1 = the map
        insn(0, 0, 0, 0, 0),
        insn(MOV64_K, 3, 0, 0, XDP_PASS), // 18: no socket for the queue: pass
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // 19
        insn(EXIT, 0, 0, 0, 0),           // 20
        insn(MOV64_K, 0, 0, 0, XDP_PASS), // 21: pass
        insn(EXIT, 0, 0, 0, 0),           // 22
    ]
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddrV4;

    use super::super::frame::write_headers;
    use super::*;

    const MAP: RawFd = 7;
    const QUEUE: u32 = 0;
    const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 200), 4791);
    const PEER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 4791);

    /// What the program decided for a frame.
    #[derive(Debug, PartialEq, Eq)]
    enum Verdict {
        Pass,
        /// `bpf_redirect_map(map, queue, fallback)`.
        Redirect {
            map: RawFd,
            queue: u64,
            fallback: u64,
        },
    }

    // Where the interpreter places the context and the frame in its address space.
    const CTX: u64 = 1 << 40;
    const DATA: u64 = 1 << 32;
    const REDIRECTED: u64 = 0xdead;

    /// Runs `prog` on `frame` received on `queue`, with the kernel's semantics for the
    /// instructions the program uses; panics on any other instruction and on a read
    /// outside the frame (which the verifier would refuse).
    fn run(prog: &[Insn], frame: &[u8], queue: u32) -> Verdict {
        let mut r = [0u64; 11];
        r[1] = CTX;
        let mut map = None;
        let mut call = None;
        let mut pc = 0usize;
        for _ in 0..1000 {
            let i = prog[pc];
            let (dst, src) = (usize::from(i.regs & 0xf), usize::from(i.regs >> 4));
            pc += 1;
            let load = |size: usize, r: &[u64; 11]| -> u64 {
                let addr = r[src].wrapping_add(i.off as i64 as u64);
                if r[src] == CTX {
                    assert_eq!(size, 4, "context fields are read as words");
                    return match i.off {
                        CTX_DATA => DATA,
                        CTX_DATA_END => DATA + frame.len() as u64,
                        CTX_RX_QUEUE_INDEX => u64::from(queue),
                        off => panic!("context offset {off}"),
                    };
                }
                let at = addr.checked_sub(DATA).expect("below the frame") as usize;
                assert!(at + size <= frame.len(), "read past the frame at {at}");
                let mut bytes = [0u8; 8];
                bytes[..size].copy_from_slice(&frame[at..at + size]);
                u64::from_le_bytes(bytes)
            };
            match i.code {
                LDX_W => r[dst] = load(4, &r),
                LDX_H => r[dst] = load(2, &r),
                LDX_B => r[dst] = load(1, &r),
                MOV64_X => r[dst] = r[src],
                MOV64_K => r[dst] = i.imm as i64 as u64,
                ADD64_K => r[dst] = r[dst].wrapping_add(i.imm as i64 as u64),
                JGT_X if r[dst] > r[src] => pc += i.off as usize,
                JNE_K if r[dst] as u32 != i.imm as u32 => pc += i.off as usize,
                JGT_X | JNE_K => {}
                LD_DW_IMM => {
                    assert_eq!(src, usize::from(BPF_PSEUDO_MAP_FD));
                    map = Some(i.imm);
                    r[dst] = u64::from(i.imm as u32) | u64::from(prog[pc].imm as u32) << 32;
                    pc += 1;
                }
                CALL => {
                    assert_eq!(i.imm, BPF_FUNC_REDIRECT_MAP);
                    assert_eq!(Some(r[1] as i32), map, "r1 is the map");
                    call = Some((r[1] as RawFd, r[2], r[3]));
                    r[0] = REDIRECTED;
                }
                EXIT => {
                    return match (r[0], call) {
                        (REDIRECTED, Some((map, queue, fallback))) => Verdict::Redirect {
                            map,
                            queue,
                            fallback,
                        },
                        (v, _) => {
                            assert_eq!(v, XDP_PASS as u64);
                            Verdict::Pass
                        }
                    };
                }
                code => panic!("instruction {code:#x} at {}", pc - 1),
            }
        }
        panic!("the program did not end");
    }

    fn frame(dst: SocketAddrV4) -> Vec<u8> {
        let mut f = vec![0u8; HEADERS_LEN + 40];
        write_headers(
            &mut f,
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            PEER,
            dst,
            0,
            40,
        );
        f
    }

    fn redirect() -> Verdict {
        Verdict::Redirect {
            map: MAP,
            queue: u64::from(QUEUE),
            fallback: XDP_PASS as u64,
        }
    }

    /// A RoCE frame to the link's address and port goes to the socket map, for its receive
    /// queue, falling back to the kernel when the queue has no socket.
    #[test]
    fn a_frame_for_the_link_is_redirected_to_its_queue() {
        let prog = assemble(MAP, *LOCAL.ip(), LOCAL.port());
        assert_eq!(run(&prog, &frame(LOCAL), QUEUE), redirect());
        let on_3 = Verdict::Redirect {
            map: MAP,
            queue: 3,
            fallback: XDP_PASS as u64,
        };
        assert_eq!(run(&prog, &frame(LOCAL), 3), on_3);
        // Only the headers are read: a frame of just the headers goes too.
        assert_eq!(run(&prog, &frame(LOCAL)[..HEADERS_LEN], QUEUE), redirect());
    }

    /// Every other frame goes on to the kernel: another address or port, not IPv4, IP
    /// options, not UDP, or shorter than the headers (never read past its end).
    #[test]
    fn every_other_frame_is_passed_to_the_kernel() {
        let prog = assemble(MAP, *LOCAL.ip(), LOCAL.port());
        let other_ip = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 201), LOCAL.port());
        assert_eq!(run(&prog, &frame(other_ip), QUEUE), Verdict::Pass);
        let other_port = SocketAddrV4::new(*LOCAL.ip(), 4792);
        assert_eq!(run(&prog, &frame(other_port), QUEUE), Verdict::Pass);
        let byte_swapped = SocketAddrV4::new(*LOCAL.ip(), LOCAL.port().swap_bytes());
        assert_eq!(run(&prog, &frame(byte_swapped), QUEUE), Verdict::Pass);
        let good = frame(LOCAL);
        for (at, value, what) in [
            (field::ETHERTYPE.start, 0x86, "IPv6"),
            (field::ETHERTYPE.end - 1, 0x06, "ARP"),
            (field::IP_VERSION_IHL, 0x46, "options"),
            (field::IP_VERSION_IHL, 0x65, "version 6"),
            (field::IP_PROTOCOL, 6, "TCP"),
        ] {
            let mut f = good.clone();
            f[at] = value;
            assert_eq!(run(&prog, &f, QUEUE), Verdict::Pass, "{what}");
        }
        for len in 0..HEADERS_LEN {
            assert_eq!(
                run(&prog, &good[..len], QUEUE),
                Verdict::Pass,
                "cut to {len}"
            );
        }
    }

    /// Whatever the link would take (`parse_frame` accepts) the program hands it: the
    /// program checks less than the link does, never more.
    #[test]
    fn the_program_passes_the_link_every_frame_the_link_takes() {
        let prog = assemble(MAP, *LOCAL.ip(), LOCAL.port());
        let good = frame(LOCAL);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut taken = 0;
        for _ in 0..5_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut f = good.clone();
            let at = (rng as usize) % HEADERS_LEN;
            f[at] ^= (rng >> 32) as u8 & if rng & (1 << 60) != 0 { 0xff } else { 0 };
            if super::super::frame::parse_frame(&f, LOCAL).is_some() {
                taken += 1;
                assert_eq!(run(&prog, &f, QUEUE), redirect(), "byte {at}");
            }
        }
        assert!(taken > 100, "{taken}");
    }

    /// Each jump lands on the instruction its comment names: every `JNE` and the length
    /// check on `pass`, inside the program.
    #[test]
    fn jumps_land_on_pass() {
        let prog = assemble(MAP, *LOCAL.ip(), LOCAL.port());
        for (k, i) in prog.iter().enumerate() {
            if matches!(i.code, JGT_X | JNE_K) {
                let target = k + 1 + i.off as usize;
                assert_eq!(target, 21, "jump at {k}");
                assert_eq!(prog[target], insn(MOV64_K, 0, 0, 0, XDP_PASS));
                assert_eq!(prog[target + 1].code, EXIT);
            }
        }
        assert_eq!(prog[LEN - 1].code, EXIT);
    }
}
