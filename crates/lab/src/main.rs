//! `delay-relay A B`: a user-space link delay for the real-datapath tests
//! (`scripts/netns-multipath`). It reads every frame arriving on interface A and sends it out
//! interface B a fixed delay later, and B's frames out A likewise, in order, from a ring of
//! preallocated slots (nothing allocated or copied per frame), holding time by the monotonic
//! clock: each frame is due at its kernel arrival stamp plus the delay, and the relay sleeps
//! until the first frame is due (or a frame comes), then sends every frame due.
//!
//! It exists because this machine's kernel has neither netem nor the `fq` qdisc whose
//! departure times an eBPF program could set; it is a test tool, not part of the transport.
//! On SIGTERM or SIGINT it prints, per direction, the frames it relayed and how late it sent
//! them (its delay accuracy), then exits.

mod fifo;
mod late;
mod sys;

use std::io;
use std::process::ExitCode;

use clap::Parser;

use fifo::Fifo;
use late::Lateness;
use sys::{PacketSocket, Slots, VNET_HDR};

/// The most frames one receive or send call moves.
const BATCH: usize = 64;
/// A slot holds the largest frame a veth hands over: a 64 KiB GSO batch, its Ethernet header
/// and the vnet header, with room to spare.
const SLOT_BYTES: usize = 65_536 + 256;
/// Socket buffer each way: bursts wait there while the relay sleeps or sends.
const SOCKET_BUFFER: usize = 32 << 20;
/// A kernel arrival stamp older than this is not an arrival time (a packet that crossed
/// namespaces keeps a delivery time of the sender's clock base, say: a TCP packet's
/// departure time on the monotonic clock); the time of reading is used instead.
const STAMP_WINDOW_NS: u64 = 1_000_000_000;
/// The longest sleep between checks for a stop signal.
const MAX_SLEEP_NS: u64 = 100_000_000;
/// The longest `--delay-us`, `--back-delay-us` and `--spin-us`: a minute, far past any link
/// delay worth relaying, and small enough that a due time (nanoseconds on the monotonic
/// clock, plus the delay) cannot overflow.
const MAX_DELAY_US: u64 = 60_000_000;

#[derive(Parser, Debug)]
#[command(
    name = "delay-relay",
    about = "Relays frames between two interfaces, each direction delayed by a fixed time"
)]
struct Args {
    /// The interface facing one end of the link (side A).
    a: String,
    /// The interface facing the other end (side B).
    b: String,
    /// Delay of the frames from A to B, in microseconds (at most a minute).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_DELAY_US))]
    delay_us: u64,
    /// Delay of the frames from B to A, in microseconds (at most a minute).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_DELAY_US))]
    back_delay_us: u64,
    /// Frames each direction can hold; with the ring full the relay stops reading, and the
    /// socket buffer (32 MiB) and then the kernel drop.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    slots: u32,
    /// Busy-poll for the last N microseconds before a frame is due instead of sleeping to its
    /// time (a core spent for accuracy; 0: sleep; at most a minute).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_DELAY_US))]
    spin_us: u64,
    /// Run under SCHED_FIFO at this priority (1-99), ahead of ordinary threads, so that a
    /// loaded machine delays its frames less (0: an ordinary thread).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=99))]
    rt_priority: u8,
}

/// One direction: frames read from socket `from`, held, sent out of socket `to`.
#[derive(Debug)]
struct Direction {
    from: usize,
    to: usize,
    delay_ns: u64,
    fifo: Fifo,
    slots: Slots,
    late: Lateness,
    frames: u64,
    bytes: u64,
    truncated: u64,
    send_errors: u64,
    most_held: usize,
    /// Frames timed by when they were read, for want of a plausible kernel stamp.
    unstamped: u64,
}

impl Direction {
    fn new(from: usize, to: usize, delay_us: u64, slots: usize) -> Direction {
        Direction {
            from,
            to,
            delay_ns: delay_us * 1000,
            fifo: Fifo::new(slots),
            slots: Slots::new(slots, SLOT_BYTES),
            late: Lateness::new(),
            frames: 0,
            bytes: 0,
            truncated: 0,
            send_errors: 0,
            most_held: 0,
            unstamped: 0,
        }
    }

    /// Reads what is waiting (as much as the ring has room for in one run): how many frames.
    fn receive(&mut self, socks: &[PacketSocket; 2]) -> io::Result<usize> {
        let (first, room) = self.fifo.free_run();
        if room == 0 {
            return Ok(0);
        }
        let got = self.slots.recv(&socks[self.from], first, room.min(BATCH))?;
        if got == 0 {
            return Ok(0);
        }
        // Both clocks after the frames came, so that every arrival stamp (real time) is
        // before `real_now`; then `now - (real_now - stamp)` is its arrival on the monotonic
        // clock.
        let now = sys::mono_ns();
        let real_now = sys::real_ns();
        for slot in first..first + got {
            // The kernel's stamp, not the time of reading: a frame that waited in the socket
            // while the relay slept or sent is not delayed by that wait on top of the delay.
            let arrived = match self.slots.stamp(slot) {
                Some(real) if real <= real_now && real_now - real < STAMP_WINDOW_NS => {
                    now - (real_now - real)
                }
                _ => {
                    self.unstamped += 1;
                    now
                }
            };
            self.fifo.push(arrived + self.delay_ns);
        }
        self.most_held = self.most_held.max(self.fifo.len());
        Ok(got)
    }

    /// Sends the frames due at `now`: how many left the ring (sent or given up).
    fn send_due(&mut self, socks: &[PacketSocket; 2], now: u64) -> usize {
        let (first, due) = self.fifo.due_run(now, BATCH);
        if due == 0 {
            return 0;
        }
        if self.slots.truncated(first) {
            self.truncated += 1;
            self.fifo.pop(1);
            return 1;
        }
        let whole = (first..first + due)
            .take_while(|&s| !self.slots.truncated(s))
            .count();
        match self.slots.send(&socks[self.to], first, whole) {
            Ok(sent) => {
                for slot in first..first + sent {
                    self.late.record(now - self.fifo.due_of(slot));
                    self.bytes += (self.slots.len(slot) - VNET_HDR) as u64;
                }
                self.frames += sent as u64;
                self.fifo.pop(sent);
                sent
            }
            Err(e) => {
                // The kernel refused the first frame (too long for the interface, say): it
                // is dropped, as a link would drop it, and counted.
                if self.send_errors == 0 {
                    eprintln!("delay-relay: send on {}: {e}", socks[self.to].name);
                }
                self.send_errors += 1;
                self.fifo.pop(1);
                1
            }
        }
    }

    fn report(&self, socks: &[PacketSocket; 2], secs: f64) -> String {
        let us = |ns: u64| ns as f64 / 1000.0;
        let drops = socks[self.from].drops().unwrap_or(0);
        format!(
            "{} -> {}: delay {} us, {} frames ({} bytes, {:.0} frames/s), late by us: mean {:.1} \
             p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}; held at most {} of {}; timed on reading {}; \
             truncated {}, send errors {}, dropped by the kernel {}",
            socks[self.from].name,
            socks[self.to].name,
            self.delay_ns / 1000,
            self.frames,
            self.bytes,
            self.frames as f64 / secs.max(1e-9),
            us(self.late.mean_ns()),
            us(self.late.quantile_ns(0.5)),
            us(self.late.quantile_ns(0.99)),
            us(self.late.quantile_ns(0.999)),
            us(self.late.max_ns()),
            self.most_held,
            self.fifo.capacity(),
            self.unstamped,
            self.truncated,
            self.send_errors,
            drops,
        )
    }
}

fn run(args: &Args) -> io::Result<()> {
    let socks = [
        PacketSocket::open(&args.a, SOCKET_BUFFER)?,
        PacketSocket::open(&args.b, SOCKET_BUFFER)?,
    ];
    // Reset the kernel's drop counters (reading them clears them).
    for s in &socks {
        s.drops()?;
    }
    sys::tight_timers()?;
    if args.rt_priority > 0 {
        sys::realtime(args.rt_priority)?;
    }
    sys::stop_on_signals();
    let slots = args.slots as usize;
    let mut dirs = [
        Direction::new(0, 1, args.delay_us, slots),
        Direction::new(1, 0, args.back_delay_us, slots),
    ];
    let spin_ns = args.spin_us * 1000;
    let start = sys::mono_ns();
    eprintln!(
        "delay-relay: {} <-> {}, delay {} us / {} us, {} slots, spin {} us, realtime priority {}",
        args.a, args.b, args.delay_us, args.back_delay_us, slots, args.spin_us, args.rt_priority
    );
    while !sys::stopped() {
        let now = sys::mono_ns();
        let mut work = 0;
        for d in &mut dirs {
            work += d.send_due(&socks, now);
        }
        for d in &mut dirs {
            work += d.receive(&socks)?;
        }
        if work > 0 {
            continue;
        }
        let next = dirs.iter().filter_map(|d| d.fifo.head_due()).min();
        let left = next.map_or(MAX_SLEEP_NS, |due| due.saturating_sub(sys::mono_ns()));
        if left <= spin_ns {
            continue; // close to a due time: poll again rather than sleep
        }
        let readable = [
            (socks[0].raw(), !dirs[0].fifo.is_full()),
            (socks[1].raw(), !dirs[1].fifo.is_full()),
        ];
        sys::wait(&readable, Some((left - spin_ns).min(MAX_SLEEP_NS)))?;
    }
    let secs = (sys::mono_ns() - start) as f64 / 1e9;
    for d in &dirs {
        println!("{}", d.report(&socks, secs));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("delay-relay: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delay or spin whose nanoseconds do not fit a u64 is refused naming the flag, not
    /// a multiplication that overflows when the relay starts.
    #[test]
    fn delays_past_a_minute_are_refused_naming_the_flag() {
        let parse =
            |flag: &str, value: &str| Args::try_parse_from(["delay-relay", "a", "b", flag, value]);
        for flag in ["--delay-us", "--back-delay-us", "--spin-us"] {
            let ok = parse(flag, &MAX_DELAY_US.to_string()).unwrap();
            assert_eq!(
                ok.delay_us.max(ok.back_delay_us).max(ok.spin_us),
                MAX_DELAY_US
            );
            for bad in [MAX_DELAY_US + 1, u64::MAX / 1000 + 1, u64::MAX] {
                let e = parse(flag, &bad.to_string()).unwrap_err().to_string();
                assert!(e.contains(flag), "{e}");
            }
        }
    }
}
