//! `sluice perf --loopback`: both ends in one process over real UDP sockets on 127.0.0.1 and
//! 127.0.0.2, every test, its JSON, and the errors a user meets.

use std::process::{Command, Stdio};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

#[path = "common/perf.rs"]
mod perf_run;
use perf_run::loopback;

/// Runs `sluice perf ARGS` and checks that it is refused as a usage error (exit 2) whose
/// message says `says`.
fn refused(args: &[&str], says: &str) {
    exits_at_once(args, 2, says);
}

/// Runs `sluice perf args` and requires it to exit with `code`, saying `says`, within 10 s
/// (a server that waits for a client instead fails here rather than hanging the test).
fn exits_at_once(args: &[&str], code: i32, says: &str) {
    let mut child = Command::new(SLUICE)
        .arg("perf")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{args:?}: still running after 10 s instead of refusing");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn every_test_runs_over_loopback_and_reports_json() {
    let tests = [
        ("write-bw", "write_bw", "1000"),
        ("read-bw", "read_bw", "70000"),
        ("send-bw", "send_bw", "5000"),
        ("atomic-bw", "atomic_bw", "8"),
        ("write-lat", "write_lat", "2"),
        ("read-lat", "read_lat", "4096"),
        ("send-lat", "send_lat", "100"),
        ("atomic-lat", "atomic_lat", "8"),
    ];
    for (i, (sub, name, size)) in tests.into_iter().enumerate() {
        let results = loopback(&[sub, "-s", size, "-n", "300"], 24_000 + i as u16);
        assert_eq!(results.len(), 1, "{sub}: one size, one result");
        let r = &results[0];
        assert_eq!(r["test"], name);
        assert_eq!(r["bytes"].as_u64(), Some(size.parse().unwrap()));
        assert_eq!(r["iterations"].as_u64(), Some(300), "{sub}: {r}");
        assert_eq!(r["qps"].as_u64(), Some(1));
        assert!(r["bw_avg_gbps"].as_f64().unwrap() > 0.0, "{sub}: {r}");
        assert!(r["msg_rate_mpps"].as_f64().unwrap() > 0.0, "{sub}: {r}");
        if sub.ends_with("-lat") {
            let t = |k: &str| {
                r[k].as_f64()
                    .unwrap_or_else(|| panic!("{sub}: no {k}: {r}"))
            };
            assert!(t("t_min_us") > 0.0);
            assert!(t("t_min_us") <= t("t_typical_us"));
            assert!(t("t_typical_us") <= t("t_p99_us"));
            assert!(t("t_p99_us") <= t("t_max_us"));
        } else {
            assert!(
                r.get("t_typical_us").is_none(),
                "{sub}: no latency fields: {r}"
            );
        }
    }
}

#[test]
fn many_queue_pairs_and_all_sizes() {
    let r = loopback(&["write-bw", "-q", "256", "-s", "4096", "-n", "20"], 24_100);
    assert_eq!(r[0]["qps"].as_u64(), Some(256));
    assert_eq!(r[0]["iterations"].as_u64(), Some(256 * 20));
    // -a: every size from 2 bytes to 8 MiB, each its own result.
    let r = loopback(&["write-bw", "-a", "-n", "5"], 24_101);
    let sizes: Vec<u64> = r.iter().map(|x| x["bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, (1..=23).map(|k| 1u64 << k).collect::<Vec<_>>());
}

#[test]
fn errors_say_what_to_do() {
    let run = |args: &[&str]| {
        let o = Command::new(SLUICE)
            .arg("perf")
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    // Nobody serves on that port.
    let (code, err) = run(&[
        "write-bw",
        "--connect",
        "127.0.0.1",
        "-p",
        "1",
        "--connect-timeout",
        "0.2",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("cannot reach 127.0.0.1 port 1"), "{err}");
    for (args, says) in [
        (&["write-bw", "-m", "1500"][..], "-m 1500"),
        (&["atomic-bw", "-s", "16"][..], "exactly 8 bytes"),
        (&["write-bw", "-q", "0"][..], "-q 0"),
        (&["send-lat", "-n", "0"][..], "-n 0"),
        (
            &["write-bw", "--pcap", "x.pcap", "--pcap-filter", "nope"][..],
            "--pcap-filter",
        ),
    ] {
        refused(args, says);
    }
}

/// A delay-based law limiting a real flow: TIMELY told that every RTT above 2 us is too
/// high (loopback RTTs are tens of microseconds) brings the flow down to its floor and
/// holds it there; told that everything below 100 ms is fine, it leaves the flow as fast
/// as with no congestion control. The floor is only reached if the law sees the real RTT
/// samples of the datapath.
#[test]
fn timely_holds_a_flow_to_its_floor_when_every_rtt_is_high() {
    let run = |cc: &[&str], port| {
        let mut args = vec!["write-bw", "-s", "4096", "-n", "400", "-t", "16"];
        args.extend_from_slice(cc);
        loopback(&args, port)[0]["bw_avg_gbps"].as_f64().unwrap()
    };
    let timely = |t_low: &'static str, t_high: &'static str| {
        [
            "--cc",
            "timely",
            "--cc-param",
            t_low,
            "--cc-param",
            t_high,
            "--cc-param",
            "min_rate_mbps=50",
        ]
    };
    // A paced flow wakes late when other tests load the machine and falls below its floor
    // (with one busy loop beside it on 2 cores: 0.009-0.04 Gbit/s, against 0.040-0.047 on an
    // idle machine): up to three runs, the first that keeps to it.
    let limited_run = || run(&timely("t_low_us=1", "t_high_us=2"), 24_301);
    let limited = (1..3).fold(
        limited_run(),
        |got, _| {
            if got > 0.035 { got } else { limited_run() }
        },
    );
    // Two short loopback runs at different moments differ by more than 2x when other tests
    // load the machine: the best of up to three of each is compared.
    let (mut none, mut free) = (0.0f64, 0.0f64);
    for _ in 0..3 {
        none = none.max(run(&[], 24_300));
        free = free.max(run(&timely("t_low_us=100000", "t_high_us=200000"), 24_302));
        if free > 0.5 * none && free > 4.0 * limited {
            break;
        }
    }
    // 50 Mbit/s on the wire, of which 4096 of every 4201 bytes are payload; the first
    // packets go faster while the rate falls. Never above the floor's rate; below it only
    // as far as a loaded machine's late wake-ups explain (a tenth of it).
    assert!(
        limited > 0.005 && limited < 0.07,
        "TIMELY at its floor: {limited} Gbit/s"
    );
    assert!(
        free > 0.5 * none && free > 4.0 * limited,
        "TIMELY with no delay signal: {free} Gbit/s, no control {none} Gbit/s"
    );
}

/// perftest's `-u` (the QP retransmit timeout exponent) is taken in its range, 1..=31;
/// outside it is a usage error. (That it reaches the queue pairs shows by hand: `-u 1`, an
/// 8 us timer, makes a loopback write-bw retransmit; too erratically to assert here.)
#[test]
fn the_qp_timeout_is_perftests_exponent() {
    let r = loopback(&["write-bw", "-u", "18", "-s", "4096", "-n", "50"], 24_120);
    assert_eq!(r[0]["iterations"], 50);
    for bad in ["0", "32", "x"] {
        refused(&["write-bw", "--loopback", "-u", bad], "qp-timeout");
    }
}

#[test]
fn the_spin_before_sleeping_is_microseconds_or_nothing() {
    // Sleeping at once and spinning first both complete the same test.
    for (spin, port) in [("0", 24_140), ("1000", 24_141)] {
        let r = loopback(&["write-lat", "--spin-us", spin, "-n", "200"], port);
        assert_eq!(r[0]["iterations"], 200, "--spin-us {spin}");
    }
    for bad in ["-1", "1000001", "soon"] {
        refused(
            &["write-lat", "--loopback", &format!("--spin-us={bad}")],
            "spin-us",
        );
    }
    // Never sleeping and a spin before sleeping cannot both be asked for.
    refused(
        &["write-lat", "--loopback", "--busy-poll", "--spin-us", "5"],
        "--busy-poll",
    );
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `sluice perf ... | head -1`: the reader is gone before the results are printed.
    use std::os::unix::process::ExitStatusExt;
    let mut child = Command::new(SLUICE)
        .args(["perf", "write-lat", "--loopback", "-n", "100"])
        .args(["-p", "0", "--roce-port", "24130"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{err}");
}

#[test]
fn what_a_server_cannot_use_is_refused_before_it_waits_for_a_client() {
    // An XDP interface, a capture path, a RoCE port held on the address to serve on (or on
    // every address, when serving on all): refused at once, not once a client connects (a
    // server opens its device and its capture then), and without privileges. On `lo`
    // frames would be sent and dropped without a word.
    let holder = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    let held = holder.local_addr().unwrap().port().to_string();
    let held_port = ["--bind", "127.0.0.2", "--roce-port", held.as_str()];
    let everywhere = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    let held_everywhere = everywhere.local_addr().unwrap().port().to_string();
    let held_everywhere = ["--roce-port", held_everywhere.as_str()];
    for (args, code, says) in [
        (&["--xdp", "lo"][..], 2, "use the UDP datapath"),
        (&["--xdp", "sluice-nonesuch"], 2, "no such interface"),
        (
            &["--pcap", "/nonexistent-dir/x.pcap"],
            2,
            "--pcap /nonexistent-dir",
        ),
        (&held_port, 1, "cannot bind UDP 127.0.0.2"),
        (&held_everywhere, 1, "holds the port"),
    ] {
        exits_at_once(&[&["write-bw", "-p", "0"], args].concat(), code, says);
    }
}

#[test]
fn a_bad_congestion_control_is_a_usage_error() {
    for args in [
        &["write-bw", "--cc", "reno"][..],
        &["write-bw", "--cc", "dcqcn", "--cc-param", "g=-1"],
        &["write-bw", "--cc", "dcqcn", "--cc-param", "speed"],
        &["write-bw", "--cc", "swift", "--cc-decoupled", "0,1,1"],
    ] {
        refused(&[args, &["--loopback"]].concat(), "--cc");
    }
    let o = Command::new(SLUICE)
        .args(["perf", "write-bw", "--cc", "list"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    for law in [
        "none", "static", "dcqcn", "dctcp", "timely", "swift", "hpcc", "credit", "homa",
    ] {
        assert!(out.contains(law), "{law} missing from --cc list: {out}");
    }
}

/// Runs a 200 x 64 KiB loopback `write-bw` with `--cc law` (and `--ccx auto`, the default)
/// on RoCE port `port`, capturing the client's packets; checks that the flow ran (above 50
/// Mbit/s: a law at its floor moves about 1) and the capture with `sluice pcap check`, and
/// returns each captured packet's opcode and CC extension header (the 3,200 data packets and
/// the ACKs that came back).
fn captured_law_run(law: &str, port: u16) -> Vec<(sluice_wire::Opcode, Option<sluice_wire::Ccx>)> {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let pcap = dir.join(format!("perf-ccx-{law}.pcap"));
    let pcap_arg = pcap.to_str().unwrap();
    let args = [
        "write-bw", "-s", "65536", "-n", "200", "--cc", law, "--pcap", pcap_arg,
    ];
    let bw = loopback(&args, port)[0]["bw_avg_gbps"].as_f64().unwrap();
    // Far below any law's loopback rate (a debug build on a loaded 2-core machine ran
    // Swift at 0.4-0.9 Gbit/s), far above a law stuck at its floor.
    assert!(bw > 0.05, "{law}: {bw} Gbit/s");
    let packets: Vec<_> = checked_capture(&pcap)
        .iter()
        .map(|d| {
            let p = sluice_wire::IpUdp::parse(d).unwrap().roce().unwrap();
            (p.bth.opcode, p.ccx)
        })
        .collect();
    assert!(packets.len() > 3200, "{law}: {} packets", packets.len());
    packets
}

/// The datagrams of capture `pcap`, once `sluice pcap check` has passed it (every RoCE
/// packet well formed, every ICRC valid).
fn checked_capture(pcap: &std::path::Path) -> Vec<Vec<u8>> {
    let check = Command::new(SLUICE)
        .args(["pcap", "check"])
        .arg(pcap)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}: {}",
        pcap.display(),
        String::from_utf8_lossy(&check.stdout)
    );
    let mut reader =
        sluice_wire::pcap::CaptureReader::new(std::fs::File::open(pcap).unwrap()).unwrap();
    let mut datagrams = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        datagrams.push(r.data.to_vec());
    }
    datagrams
}

/// Swift over loopback: `--ccx auto` (the default) gives it the timestamp header it asks
/// for on both ends; every packet of the run carries it (captured on the wire, ICRC
/// verified by `sluice pcap check`). The echo leaves out the time the other end took to
/// wake up and answer, so Swift holds the flow near its 27-29 us target instead of falling to
/// its 0.001-packet floor (where a 64 KiB message takes seconds).
#[test]
fn swift_runs_on_the_timestamp_header_it_asks_for() {
    let packets = captured_law_run("swift", 24_310);
    let mut echoes = 0;
    for (opcode, ccx) in &packets {
        let Some(sluice_wire::Ccx::Timestamps { echo_ns, .. }) = ccx else {
            panic!("a packet without the header: {opcode:?}");
        };
        echoes += usize::from(echo_ns.is_some());
    }
    assert!(echoes > 0, "ACKs echo the request's send time");
}

/// `--cc credit` over loopback: `--ccx auto` picks the credit header the law asks for, so
/// grants ride the server's ACKs (every packet carries a total, no control packet is sent),
/// and the flow runs on them.
#[test]
fn credit_grants_ride_the_acks_header() {
    let packets = captured_law_run("credit", 24_330);
    let mut granted = 0u64;
    for (opcode, ccx) in &packets {
        let Some(sluice_wire::Ccx::Credit { granted_total }) = ccx else {
            panic!("a packet without the credit header: {opcode:?}");
        };
        if *opcode == sluice_wire::Opcode::RC_ACKNOWLEDGE {
            granted = granted.max(*granted_total);
        }
    }
    // The server granted (nearly) all of it back: a message's tail is flushed after one
    // base RTT.
    assert!(granted > 12 << 20, "{granted} bytes granted");
}

/// The client's packets of a loopback run of `args` on RoCE port `port`, as captured: each
/// data packet's UDP source port, destination QP and payload; checked by `sluice pcap check`.
fn captured_data(args: &[&str], port: u16, name: &str) -> Vec<(u16, u32, Vec<u8>)> {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let pcap = dir.join(format!("perf-policy-{name}.pcap"));
    let pcap_arg = pcap.to_str().unwrap();
    let mut all = args.to_vec();
    all.extend(["--pcap", pcap_arg, "--pcap-filter", "tx"]);
    loopback(&all, port);
    let mut packets = Vec::new();
    for d in checked_capture(&pcap) {
        let datagram = sluice_wire::IpUdp::parse(&d).unwrap();
        let src_port = datagram.udp.src_port;
        let p = datagram.roce().unwrap();
        if !p.payload.is_empty() {
            packets.push((src_port, p.bth.dest_qp, p.payload.to_vec()));
        }
    }
    assert!(!packets.is_empty(), "{name}: no data packets captured");
    packets
}

/// Lengths of the runs of consecutive packets to one queue pair.
fn runs(packets: &[(u16, u32, Vec<u8>)]) -> Vec<usize> {
    let mut runs: Vec<usize> = Vec::new();
    let mut last = None;
    for &(_, qp, _) in packets {
        if last == Some(qp) {
            *runs.last_mut().unwrap() += 1;
        } else {
            runs.push(1);
        }
        last = Some(qp);
    }
    runs
}

/// `--sched`: two queue pairs of 16 KiB WRITEs (4 packets each at MTU 4096). Round robin
/// interleaves their packets; per-message sends each message's packets back to back.
#[test]
fn a_scheduler_chosen_by_name_orders_the_queue_pairs() {
    let args = [
        "write-bw", "-q", "2", "-s", "16384", "-n", "40", "-m", "4096",
    ];
    let rr = runs(&captured_data(&args, 24_400, "round-robin"));
    assert!(
        rr.iter().any(|r| r % 4 != 0),
        "round robin ran whole messages: {rr:?}"
    );
    let mut per_message = args.to_vec();
    per_message.extend(["--sched", "per-message"]);
    let pm = runs(&captured_data(&per_message, 24_401, "per-message"));
    assert!(
        pm.iter().all(|r| r % 4 == 0),
        "per-message split a message: {pm:?}"
    );
}

/// `--path`: with four source sockets, ECMP keeps a queue pair on one of them; spraying over
/// four entropies puts its packets on all four.
#[test]
fn a_path_selector_chosen_by_name_sets_the_source_ports() {
    let args = [
        "write-bw",
        "-s",
        "65536",
        "-n",
        "20",
        "--source-sockets",
        "4",
    ];
    let ports = |packets: Vec<(u16, u32, Vec<u8>)>| {
        let mut ports: Vec<u16> = packets.into_iter().map(|(p, _, _)| p).collect();
        ports.sort_unstable();
        ports.dedup();
        ports.len()
    };
    assert_eq!(ports(captured_data(&args, 24_410, "ecmp")), 1);
    let mut spray = args.to_vec();
    spray.extend(["--path", "spray", "--path-param", "paths=4"]);
    assert_eq!(ports(captured_data(&spray, 24_411, "spray")), 4);
}

/// `--service`: XOR on both ends changes every byte on the wire (perf's buffers hold zeros)
/// and the transfer still completes; `count` beside it reports every payload byte sent.
#[test]
fn services_chosen_by_name_change_the_wire_and_report_their_counters() {
    let plain = captured_data(&["write-bw", "-s", "8192", "-n", "20"], 24_420, "plain");
    assert!(plain.iter().all(|(_, _, p)| p.iter().all(|&b| b == 0)));
    let args = [
        "write-bw",
        "-s",
        "8192",
        "-n",
        "20",
        "--service",
        "count",
        "--service",
        "xor",
        "--service-param",
        "xor.key=7",
    ];
    let xored = captured_data(&args, 24_421, "xor");
    assert!(xored.iter().all(|(_, _, p)| p.iter().all(|&b| b == 7)));
    let r = &loopback(&args, 24_422)[0];
    assert_eq!(
        r["services"]["count"]["sent_bytes"].as_u64(),
        Some(20 * 8192),
        "{r}"
    );
}

/// `--tracker` takes effect with `--recovery selective-repeat`; unknown names and bad
/// parameters of every kind are usage errors naming the field.
#[test]
fn trackers_and_bad_policy_options() {
    let r = &loopback(
        &[
            "write-bw",
            "-s",
            "65536",
            "-n",
            "50",
            "--recovery",
            "selective-repeat",
            "--tracker",
            "offset-list",
            "--tracker-param",
            "capacity=64",
        ],
        24_430,
    )[0];
    assert_eq!(r["iterations"].as_u64(), Some(50), "{r}");
    for (args, says) in [
        (
            &["write-bw", "--sched", "fifo"][..],
            "unknown scheduler `fifo`",
        ),
        (
            &["write-bw", "--path", "spray", "--path-param", "paths=0"][..],
            "paths",
        ),
        (
            &[
                "write-bw",
                "--tracker",
                "offset-list",
                "--tracker-param",
                "size=3",
            ][..],
            "size",
        ),
        (
            &["write-bw", "--service", "zip"][..],
            "unknown service `zip`",
        ),
        (
            &["write-bw", "--service-param", "xor.key=1"][..],
            "no --service xor",
        ),
        (
            &["write-bw", "--service", "xor", "--service-param", "key=1"][..],
            "SERVICE.NAME",
        ),
    ] {
        refused(args, says);
    }
}

/// Two Sluice ends with different receive trackers: the server's offset list holds 16
/// packets past a gap, the client's bitmap 255. The server advertises its window (17) in
/// the exchange, so the client keeps at most 16 unacknowledged (its `bdp_window`), the
/// server refuses nothing and the run completes; with go-back-N nothing is advertised or
/// capped.
#[test]
fn ends_with_different_trackers_keep_to_the_receivers_window() {
    let sr = ["--recovery", "selective-repeat"];
    let args = [&["write-bw", "-s", "65536", "-n", "200"][..], &sr].concat();
    let small = ["--tracker", "offset-list", "--tracker-param", "capacity=16"];
    let json = |out: &str| -> serde_json::Value {
        let line = out.lines().find(|l| l.starts_with('{')).expect(out);
        serde_json::from_str(line).unwrap()
    };
    let [(s_ok, s_out), (c_ok, c_out)] =
        two_processes(&args, (&small, &["--tracker", "bitmap"]), 24_560);
    assert!(s_ok && c_ok, "server: {s_out}\nclient: {c_out}");
    let (server, client) = (json(&s_out), json(&c_out));
    assert_eq!(client["iterations"].as_u64(), Some(200), "{client}");
    assert_eq!(client["bdp_window"].as_u64(), Some(16), "{client}");
    assert_eq!(server["refused_packets"].as_u64(), Some(0), "{server}");
    // The other way round: the client's window is the smaller, the server's QP keeps to it.
    let [(s_ok, s_out), (c_ok, c_out)] = two_processes(&args, (&[], &small), 24_562);
    assert!(s_ok && c_ok, "server: {s_out}\nclient: {c_out}");
    assert_eq!(json(&c_out)["bdp_window"].as_u64(), Some(16), "{c_out}");
    assert_eq!(json(&s_out)["bdp_window"].as_u64(), Some(16), "{s_out}");
    // Without the smaller end the bitmap's own 256.
    let [(s_ok, s_out), (c_ok, c_out)] = two_processes(&args, (&[], &[]), 24_564);
    assert!(s_ok && c_ok, "server: {s_out}\nclient: {c_out}");
    assert_eq!(json(&c_out)["bdp_window"].as_u64(), Some(256), "{c_out}");
    // Go-back-N: no cap, and none reported.
    let gbn = ["write-bw", "-s", "65536", "-n", "50"];
    let [(s_ok, s_out), (c_ok, c_out)] = two_processes(&gbn, (&small, &[]), 24_566);
    assert!(s_ok && c_ok, "server: {s_out}\nclient: {c_out}");
    assert!(json(&c_out).get("bdp_window").is_none(), "{c_out}");
}

/// Selective repeat is negotiated: two ends with `--recovery selective-repeat` run it (each
/// heard the other's `SLC1` tail), while an end that asked for it facing a peer that sent
/// perftest's plain version message (a go-back-N Sluice end sends exactly perftest's bytes,
/// as perftest itself does) runs go-back-N, says so on standard error and reports the
/// recovery it ran. Either end may be the one that falls back.
#[test]
fn selective_repeat_runs_only_with_a_peer_that_advertised_it() {
    let args = ["write-bw", "-s", "65536", "-n", "100"];
    let sr: &[&str] = &["--recovery", "selective-repeat"];
    let gbn: &[&str] = &["--recovery", "go-back-n"];
    let note = "did not advertise a selective-repeat receive window";
    let json = |out: &str| -> serde_json::Value {
        let line = out.lines().find(|l| l.starts_with('{')).expect(out);
        serde_json::from_str(line).unwrap()
    };
    for (ends, port, expect) in [
        ((sr, sr), 24_572, ["selective-repeat"; 2]),
        ((sr, gbn), 24_574, ["go-back-n"; 2]),
        ((gbn, sr), 24_576, ["go-back-n"; 2]),
    ] {
        let [(s_ok, s_out), (c_ok, c_out)] = two_processes(&args, ends, port);
        assert!(s_ok && c_ok, "server: {s_out}\nclient: {c_out}");
        for ((out, asked), used) in [(&s_out, ends.0), (&c_out, ends.1)].into_iter().zip(expect) {
            let r = json(out);
            assert_eq!(r["recovery"].as_str(), Some(used), "{ends:?}: {out}");
            assert_eq!(r["iterations"].as_u64(), Some(100), "{ends:?}: {out}");
            // The note comes from the end that did not get what it asked for, only.
            let fell_back = asked == sr && used == "go-back-n";
            assert_eq!(out.contains(note), fell_back, "{ends:?}: {out}");
        }
    }
}

/// Runs a `sluice perf` server on 127.0.0.2 (TCP and RoCE port `port`) with `server_args`,
/// then a client with `client_args`; returns each one's exit code and standard error.
fn server_and_client(
    server_args: &[&str],
    client_args: &[&str],
    port: u16,
) -> ((Option<i32>, String), (Option<i32>, String)) {
    let port = port.to_string();
    let ports = ["-p", port.as_str(), "--roce-port", port.as_str()];
    let server = Command::new(SLUICE)
        .arg("perf")
        .args(server_args)
        .args(["--bind", "127.0.0.2"])
        .args(ports)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Command::new(SLUICE)
        .arg("perf")
        .args(client_args)
        .args(["--connect", "127.0.0.2"])
        .args(ports)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        (server.status.code(), text(&server.stderr)),
        (client.status.code(), text(&client.stderr)),
    )
}

/// A client with a wrong R_Key: the server NAKs its first WRITE and its queue pair goes to
/// the error state. The server then says why it failed, with the same block the client
/// prints: its queue pairs' states, the last error completion, the engine's counters
/// (before, it said only "the peer closed the connection").
#[test]
fn a_server_whose_queue_pair_failed_says_why() {
    let ((server_code, server), (client_code, client)) = server_and_client(
        &["write-bw", "-n", "50"],
        &["write-bw", "-n", "50", "--test-bad-rkey"],
        24_590,
    );
    assert_eq!(client_code, Some(1), "{client}");
    assert!(client.contains("RemoteAccessError"), "{client}");
    assert_eq!(server_code, Some(1), "{server}");
    for says in [
        "the peer closed the connection",
        "queue pairs: Error 1 (first not ready: QP",
        "last error completion: none",
        "NAKs sent (seq/rnr/invalid/access/operational) 0/0/0/1/0",
        "engine: tx",
        "datapath: rx datagrams",
    ] {
        assert!(
            server.contains(says),
            "the server does not say {says:?}: {server}"
        );
    }
}

/// `--verify` on every test it covers: a clean loopback run passes, with every message
/// checked where the client checks (READ responses, the latency tests' ping-pongs); the
/// servers' checks (SEND and WRITE bandwidth) fail the run if they find anything.
#[test]
fn verify_passes_a_clean_run_of_every_test_it_covers() {
    let tests = [
        ("write-bw", "65536", 0),
        ("read-bw", "65536", 300),
        ("send-bw", "5000", 0),
        ("write-lat", "100", 300),
        ("read-lat", "4096", 300),
        ("send-lat", "100", 300),
    ];
    for (i, (sub, size, checked)) in tests.into_iter().enumerate() {
        let r = &loopback(
            &[sub, "-s", size, "-n", "300", "--verify"],
            24_500 + i as u16,
        )[0];
        assert_eq!(r["iterations"].as_u64(), Some(300), "{sub}: {r}");
        assert_eq!(r["verify_errors"].as_u64(), Some(0), "{sub}: {r}");
        assert_eq!(r["verified_messages"].as_u64(), Some(checked), "{sub}: {r}");
    }
    // Without --verify, the JSON has no such fields.
    let r = &loopback(&["send-lat", "-n", "10"], 24_510)[0];
    assert!(r.get("verify_errors").is_none(), "{r}");
}

/// A server (on 127.0.0.2) and a client (127.0.0.1) as two processes, each with `args` and
/// its own extra ones, on TCP port `port` and RoCE port `port + 1`: both exit statuses and
/// outputs (stdout then stderr), the server's first.
fn two_processes(
    args: &[&str],
    (server_extra, client_extra): (&[&str], &[&str]),
    port: u16,
) -> [(bool, String); 2] {
    let (tcp, roce) = (port.to_string(), (port + 1).to_string());
    let start = |ip: &str, extra: &[&str]| {
        Command::new(SLUICE)
            .arg("perf")
            .args(args)
            .args(extra)
            .args(["--json", "-p", &tcp, "--roce-port", &roce, "--bind", ip])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let server = start("127.0.0.2", server_extra);
    let client = start(
        "127.0.0.1",
        &[client_extra, &["--connect", "127.0.0.2"]].concat(),
    );
    [server, client].map(|child| {
        let o = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout) + String::from_utf8_lossy(&o.stderr);
        (o.status.success(), text.into_owned())
    })
}

/// `--verify` write-bw: the server checks every message of every QP as its completion
/// comes (the WRITEs carry an immediate), over one packet, several, and every size of -a.
#[test]
fn verify_checks_every_write_of_every_qp_at_the_server() {
    for (i, (args, checked)) in [
        (&["-q", "4", "-s", "100", "-n", "200"][..], 800),
        (&["-q", "3", "-s", "65536", "-n", "100"][..], 300),
        // 23 sizes, 2 B to 8 MiB, 3 messages each on 2 QPs.
        (&["-q", "2", "-t", "8", "-a", "-n", "3"][..], 138),
    ]
    .into_iter()
    .enumerate()
    {
        let all = [&["write-bw", "--verify"][..], args].concat();
        let [(s_ok, s_out), (c_ok, c_out)] = two_processes(&all, (&[], &[]), 24_540 + 2 * i as u16);
        assert!(s_ok && c_ok, "{args:?}:\nserver: {s_out}\nclient: {c_out}");
        let server: Vec<serde_json::Value> = s_out
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(server.len(), 1, "{s_out}");
        assert_eq!(
            server[0]["verified_messages"].as_u64(),
            Some(checked),
            "{s_out}"
        );
        assert_eq!(server[0]["verify_errors"].as_u64(), Some(0), "{s_out}");
    }
    // A client without --verify sends plain WRITEs: the server, which counts the client's
    // messages, says none was checked.
    let [(s_ok, s_out), (c_ok, c_out)] = two_processes(
        &["write-bw", "-q", "2", "-s", "4096", "-n", "50"],
        (&["--verify"], &[]),
        24_550,
    );
    assert!(c_ok, "{c_out}");
    assert!(!s_ok, "{s_out}");
    assert!(
        s_out.contains("100 of the 100 messages the client sent were not checked"),
        "{s_out}"
    );
}

/// A message spoiled by its sender (a test-only hook standing in for a forged or corrupted
/// message, which loopback cannot produce in flight) fails the run, naming the QP, the
/// message and its first bad byte; where it is checked depends on the test.
#[test]
fn verify_fails_a_run_with_a_message_that_differs() {
    for (i, (args, says)) in [
        // The server checks every SEND.
        (
            &["send-bw", "-n", "300", "--test-corrupt-message", "5"][..],
            &["the server: 1 of the 300 messages"][..],
        ),
        // A WRITE-bandwidth server checks every message of every QP (a middle one of the
        // third QP here, over several packets).
        (
            &[
                "write-bw",
                "-q",
                "3",
                "-s",
                "10000",
                "-n",
                "300",
                "--test-corrupt-message",
                "150",
                "--test-corrupt-qp",
                "2",
            ][..],
            &[
                "the server: 1 of the 900 messages it checked differ",
                "message 150, first bad byte at offset 5000",
            ][..],
        ),
        // Each side of a ping-pong checks the peer's messages (the server finds the
        // client's seventh: 64 bytes but the mark, spoiled in the middle).
        (
            &[
                "write-lat",
                "-s",
                "64",
                "-n",
                "300",
                "--test-corrupt-message",
                "7",
            ][..],
            &["message 7, first bad byte at offset 31"][..],
        ),
        (
            &[
                "send-lat",
                "-s",
                "64",
                "-n",
                "300",
                "--test-corrupt-message",
                "7",
            ][..],
            &["message 7, first bad byte at offset 32"][..],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let port = (24_520 + i).to_string();
        let o = Command::new(SLUICE)
            .arg("perf")
            .args(args)
            .args(["--verify", "--loopback", "-p", "0", "--roce-port", &port])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("--verify: the "), "{args:?}: {err}");
        for says in says {
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }
    // Atomics are refused; the hook needs --verify.
    refused(
        &["atomic-bw", "--loopback", "--verify"],
        "atomics are not checked",
    );
    refused(
        &["send-bw", "--loopback", "--test-corrupt-message", "1"],
        "--verify",
    );
}

/// `--serve 2`: a client whose run fails (a wrong R_Key puts the server's queue pair in the
/// error state) does not end the server: the next client is served. The server reports
/// the failure, why, and exits 1 once both were served.
#[test]
fn a_server_serves_the_next_client_after_one_that_failed() {
    let port = "24591";
    let ports = ["-p", port, "--roce-port", port];
    let server = Command::new(SLUICE)
        .args(["perf", "write-bw", "-n", "50", "--serve", "2", "--json"])
        .args(["--bind", "127.0.0.2"])
        .args(ports)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = |extra: &[&str]| {
        Command::new(SLUICE)
            .args(["perf", "write-bw", "-n", "50", "--connect", "127.0.0.2"])
            .args(ports)
            .args(extra)
            .output()
            .unwrap()
    };
    let bad = client(&["--test-bad-rkey"]);
    assert_eq!(bad.status.code(), Some(1));
    let good = client(&[]);
    let good_err = String::from_utf8_lossy(&good.stderr);
    assert!(good.status.success(), "the second client: {good_err}");
    let server = server.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&server.stdout);
    let err = String::from_utf8_lossy(&server.stderr);
    assert_eq!(server.status.code(), Some(1), "{err}");
    assert!(
        err.contains("client 1: the peer closed the connection"),
        "{err}"
    );
    assert!(err.contains("queue pairs: Error 1"), "{err}");
    let results: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 1, "{out}");
    assert_eq!(results[0]["iterations"].as_u64(), Some(50), "{out}");
    // perftest's one-shot server stays the default; a client cannot serve.
    refused(&["write-bw", "--serve", "0"], "--serve");
    refused(&["write-bw", "--loopback", "--serve", "2"], "--serve");
}

/// `--pacer weir`: write-bw completes every iteration, as many messages as without the
/// pacer, with every post doorbelled once (no split at 512 B); read-bw and send-bw run
/// through it too.
#[test]
fn the_weir_pacer_completes_every_message() {
    let args = ["write-bw", "-s", "512", "-n", "300", "-q", "2"];
    let plain = loopback(&args, 24_800);
    let paced = loopback(&[&args[..], &["--pacer", "weir"]].concat(), 24_801);
    assert_eq!(plain[0]["iterations"], 600);
    assert_eq!(paced[0]["iterations"], plain[0]["iterations"]);
    assert!(plain[0].get("pacer").is_none());
    let p = &paced[0]["pacer"];
    assert_eq!(p["name"], "weir");
    assert_eq!(p["posts"], 600);
    assert_eq!(p["doorbells"], 600);
    assert_eq!(p["cqes"], 600);
    assert_eq!(p["splits"], 0);
    // -Q 100 (the default): the 3 signaled posts of each QP reach the application.
    assert_eq!(p["app_completions"], 6);
    assert_eq!(p["swallowed"], 594);
    assert!(p["rate_gbps"].as_f64().unwrap() > 0.0);
    // The sampled cost of its calls (one in 16 of each kind): 600 posts give 37 samples,
    // and the per-post figure weighs the three kinds by their calls per post.
    let cost = &p["cost"];
    assert_eq!(cost["post"]["calls"], 600);
    assert_eq!(cost["post"]["samples"], 600 / 16);
    assert_eq!(cost["completion"]["calls"], 600);
    let polled = cost["doorbell"]["calls"].as_f64().unwrap();
    // Nearly every poll hands one out (each is made when a credit fell due).
    assert!(polled < 1200.0, "{cost}");
    let median = |k: &str| cost[k]["median_ns"].as_f64().unwrap();
    let per_post = median("post") + median("doorbell") * polled / 600.0 + median("completion");
    assert!(
        (cost["per_post_ns"].as_f64().unwrap() - per_post).abs() < 1e-6,
        "{cost}"
    );
    // Runs of up to 8 posts of 512 B (4,096 B) under one doorbell: every post still rung
    // and completed once, in fewer runs than doorbells (each QP posts its depth at once).
    let batched = loopback(
        &[
            &args[..],
            &["--pacer", "weir", "--pacer-param", "max_batch=8"],
        ]
        .concat(),
        24_806,
    );
    let b = &batched[0]["pacer"];
    assert_eq!(batched[0]["iterations"], 600);
    assert_eq!((&b["doorbells"], &b["cqes"]), (&600.into(), &600.into()));
    let runs = b["runs"].as_u64().unwrap();
    assert!((75..600).contains(&runs), "{b}");
    assert_eq!(p["runs"], 600);
    for (i, test) in ["read-bw", "send-bw"].into_iter().enumerate() {
        let r = loopback(
            &[
                test, "-s", "1024", "-n", "200", "-q", "2", "--pacer", "weir",
            ],
            24_802 + i as u16,
        );
        assert_eq!(r[0]["iterations"], 400, "{test}");
        assert_eq!(r[0]["pacer"]["doorbells"], 400, "{test}");
    }
    // Tenants: each QP its own operation, size and depth; a latency tenant's every
    // message reaches the application.
    let r = loopback(
        &[
            "write-bw",
            "-n",
            "100",
            "--tenant",
            "op=write,size=10000,qps=2",
            "--tenant",
            "op=read,size=512,depth=16",
            "--tenant",
            "op=write,size=512,depth=1,lat",
            "--pacer",
            "weir",
        ],
        24_804,
    );
    let client = r.iter().find(|r| r["role"] == "client").unwrap();
    let iterations: Vec<_> = client["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["iterations"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, [200, 100, 100]);
    // 200 posts of 3 pieces, 200 of one.
    assert_eq!(client["pacer"]["doorbells"], 800);
}

/// A post longer than split_bytes goes out in pieces, and the run counts the application's
/// messages, not the pieces.
#[test]
fn the_weir_pacer_splits_large_posts_and_counts_messages() {
    for (i, test) in ["write-bw", "read-bw"].into_iter().enumerate() {
        let r = loopback(
            &[
                test, "-s", "10000", "-n", "100", "-q", "2", "-Q", "1", "--pacer", "weir",
            ],
            24_810 + i as u16,
        );
        assert_eq!(r[0]["iterations"], 200, "{test}");
        let p = &r[0]["pacer"];
        assert_eq!(p["posts"], 200, "{test}");
        assert_eq!(p["splits"], 200, "{test}");
        // 4,096 + 4,096 + 1,808 bytes.
        assert_eq!(p["doorbells"], 600, "{test}");
        assert_eq!(p["cqes"], 600, "{test}");
        assert_eq!(p["app_completions"], 200, "{test}");
        assert_eq!(p["swallowed"], 400, "{test}");
    }
    // Not split at split_bytes=0.
    let r = loopback(
        &[
            "write-bw",
            "-s",
            "10000",
            "-n",
            "50",
            "--pacer",
            "weir",
            "--pacer-param",
            "split_bytes=0",
        ],
        24_812,
    );
    assert_eq!(r[0]["iterations"], 50);
    assert_eq!(r[0]["pacer"]["doorbells"], 50);
}

/// A completion the pacer keeps from the application is progress: at 1 Mbit/s, 512 B posts
/// complete every 4.1 ms, and the one the application asked for (-Q 100) only after 410 ms,
/// longer than the 200 ms stall timeout, which must not give the run up.
#[test]
fn completions_the_pacer_swallows_count_as_progress() {
    let r = loopback(
        &[
            "write-bw",
            "-s",
            "512",
            "-n",
            "100",
            "-t",
            "100",
            "--stall-timeout",
            "0.2",
            "--pacer",
            "weir",
            "--pacer-param",
            "line_rate_gbps=0.001",
            "--pacer-param",
            "min_rate_gbps=0.001",
        ],
        24_813,
    );
    assert_eq!(r[0]["iterations"], 100);
    assert_eq!(r[0]["pacer"]["app_completions"], 1);
    assert!(r[0]["duration_s"].as_f64().unwrap() > 0.3, "{}", r[0]);
}

#[test]
fn bad_pacer_options_are_refused_naming_what_is_wrong() {
    let weir = |param: &str| {
        vec![
            "write-bw",
            "--loopback",
            "--pacer",
            "weir",
            "--pacer-param",
            param,
        ]
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>()
    };
    for (param, says) in [
        ("base_delay_us=0", "base_delay_us"),
        ("ewma_weight=1.5", "ewma_weight"),
        ("split_bytes=-1", "split_bytes"),
        ("min_rate_gbps=500", "min_rate"),
        ("init_beta=3", "init_beta"),
        ("inc_mbps=fast", "inc_mbps"),
        ("nope=1", "nope"),
        ("base_delay_us", "NAME=VALUE"),
    ] {
        let args = weir(param);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, says);
    }
    refused(
        &["write-bw", "--loopback", "--pacer", "fast"],
        "--pacer fast",
    );
    refused(
        &["write-bw", "--loopback", "--pacer-param", "split_bytes=0"],
        "--pacer none takes no parameters",
    );
    for test in ["write-lat", "read-lat", "send-lat", "atomic-bw"] {
        refused(&[test, "--loopback", "--pacer", "weir"], "bandwidth tests");
    }
    refused(
        &["send-bw", "--loopback", "-s", "8192", "--pacer", "weir"],
        "split_bytes",
    );
    refused(
        &["write-bw", "--loopback", "--verify", "--pacer", "weir"],
        "--verify",
    );
}

/// `--cc-decoupled`: the decoupled loop's statistics are in the JSON (and absent inline).
#[test]
fn decoupled_control_reports_its_statistics() {
    let args = [
        "write-bw", "-s", "4096", "-n", "400", "-q", "3", "--cc", "dcqcn",
    ];
    let inline = loopback(&args, 24_860);
    assert!(inline.iter().all(|r| r.get("decoupled").is_none()));
    let r = loopback(&[&args[..], &["--cc-decoupled", "2,1,1"]].concat(), 24_861);
    let client = r.iter().find(|r| r["role"] == "client").unwrap();
    assert_eq!(client["iterations"], 1200);
    let d = &client["decoupled"];
    let n = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("{k}: {d}"));
    assert!(n("events") > 0, "{d}");
    assert_eq!(n("queued") + n("coalesced"), n("events"), "{d}");
    assert!(n("processed") <= n("queued"), "{d}");
    let procs = d["processors"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{d}");
    let runs: u64 = procs.iter().map(|p| p["runs"].as_u64().unwrap()).sum();
    assert_eq!(runs, n("runs"), "{d}");
    assert!(
        procs.iter().all(|p| p["load"].as_f64().unwrap() >= 0.0),
        "{d}"
    );
}

/// `--path plb` and `--path rtt-probe` work through the engine, not as ECMP: PLB with a
/// delay threshold every round exceeds moves its queue pair over several ports (without
/// one, and without CNPs, it keeps its own); `rtt-probe`'s probes are answered by the peer
/// (the capture passes `pcap check`), and the counters say so in the JSON and the table.
#[test]
fn plb_and_rtt_probe_work_through_sluice_perf() {
    let args = [
        "write-bw",
        "-s",
        "65536",
        "-n",
        "200",
        "--source-sockets",
        "4",
        "--path",
        "plb",
    ];
    let ports = |packets: Vec<(u16, u32, Vec<u8>)>| {
        let mut ports: Vec<u16> = packets.into_iter().map(|(p, _, _)| p).collect();
        ports.sort_unstable();
        ports.dedup();
        ports.len()
    };
    assert_eq!(ports(captured_data(&args, 24_440, "plb-calm")), 1);
    let mut delayed = args.to_vec();
    delayed.extend(["--path-param", "delay=0.001"]);
    assert!(ports(captured_data(&delayed, 24_441, "plb-delayed")) > 1);
    let probing = [
        "write-bw",
        "-s",
        "65536",
        "-n",
        "200",
        "--path",
        "rtt-probe",
        "--recovery",
        "selective-repeat",
        "--tracker",
        "left",
    ];
    captured_data(&probing, 24_442, "rtt-probe");
    let r = &loopback(&probing, 24_443)[0];
    assert_eq!(r["iterations"].as_u64(), Some(200), "{r}");
    assert!(r["probes_sent"].as_u64() > Some(0), "{r}");
    assert!(r["probe_replies_received"].as_u64() > Some(0), "{r}");
    assert!(r["tracker_bytes_shared"].as_u64() > Some(0), "{r}");
    for key in [
        "out_of_order_arrivals",
        "held_packets",
        "placed_packets",
        "retransmitted_packets",
    ] {
        assert!(r[key].is_u64(), "{key}: {r}");
    }
    let o = Command::new(SLUICE)
        .args(["perf"])
        .args(probing)
        .args(["--loopback", "-p", "0", "--roce-port", "24444"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("out-of-order arrivals")
            && text.contains("placed directly")
            && text.contains("probes"),
        "{text}"
    );
}

/// `--inspect` runs the classifier beside the path on every payload and reports it: every
/// packet the client sends inspected (a retransmitted one again), and none of the
/// zero-filled buffers' chunks flagged.
#[test]
fn inspect_sees_every_payload_and_flags_no_zero_buffer() {
    let r = &loopback(
        &["write-bw", "-s", "65536", "-n", "20", "--inspect"],
        24_870,
    )[0];
    let s = &r["services"]["inspect"];
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    let resent = r["retransmitted_packets"].as_u64().unwrap();
    // 64 KiB messages at a 4096-byte path MTU: 16 packets a message, 8 chunks a packet.
    assert_eq!(n("inspected_packets"), 20 * 16 + resent, "{r}");
    assert_eq!(n("chunks"), n("inspected_packets") * 8, "{r}");
    assert_eq!(n("flagged_chunks"), 0, "{r}");
}

/// `--cc homa` over loopback with RTTbytes of 16 KiB, so that each 64 KiB message sends
/// its first 16 KiB unscheduled and the rest only as granted: the server's GRANTs (0x18
/// control packets, kind 4) reach the client and the flow runs on them (RESENDs and BUSYs
/// are allowed: a software host may hold granted bytes past the resend timeout); every data packet
/// carries Homa's declared header and its priority in the IP header's DSCP (per packet);
/// the capture passes `sluice pcap check`.
#[test]
fn homa_runs_on_grants_over_loopback() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let pcap = dir.join("perf-homa.pcap");
    let pcap_arg = pcap.to_str().unwrap();
    let args = [
        "write-bw",
        "-s",
        "65536",
        "-n",
        "200",
        "--cc",
        "homa",
        "--cc-param",
        "rtt_bytes=16384",
        "--pcap",
        pcap_arg,
    ];
    let bw = loopback(&args, 24_450)[0]["bw_avg_gbps"].as_f64().unwrap();
    assert!(bw > 0.05, "homa: {bw} Gbit/s");
    let (mut grants, mut data) = (0, 0);
    let mut data_levels = std::collections::BTreeSet::new();
    for d in checked_capture(&pcap) {
        let ip_udp = sluice_wire::IpUdp::parse(&d).unwrap();
        let sluice_wire::IpHeader::V4(ip) = ip_udp.ip else {
            panic!("loopback is IPv4");
        };
        // The priority is DSCP 8 + level (the default base), the ECN bits the device's.
        let level = sluice_wire::tos_priority(ip.tos, sluice_wire::DEFAULT_DSCP_BASE);
        assert_eq!(ip.tos & 3, sluice_net::DEFAULT_TOS & 3);
        let p = ip_udp.roce().unwrap();
        let h = p.headers();
        if h.bth.opcode == sluice_wire::Opcode::RC_CC_CONTROL
            || h.bth.opcode == sluice_wire::Opcode::RC_ACKNOWLEDGE
        {
            assert_eq!(level, Some(7), "{:?} at {level:?}", h.bth.opcode);
        } else {
            data_levels.insert(level.expect("every data packet has a priority"));
        }
        if h.bth.opcode == sluice_wire::Opcode::RC_CC_CONTROL {
            let c = h.ext.cc_control.unwrap();
            match sluice_wire::HomaControl::from_control(&c).unwrap() {
                Some(sluice_wire::HomaControl::Grant {
                    offset, priority, ..
                }) => {
                    // Beyond the unscheduled bytes, within the message; a scheduled level.
                    assert!((16_384..=65_536).contains(&offset), "{offset}");
                    assert!(priority < 4, "{priority}");
                    grants += 1;
                }
                // A software host can sit on granted bytes past the 100 µs resend timeout
                // (a debug build on a loaded machine): RESENDs and BUSYs may appear.
                Some(_) => {}
                None => panic!("a control packet that is not Homa's: {c:?}"),
            }
        } else if h.ext.reth.is_some() || h.bth.opcode.0 <= 0x0B {
            assert!(
                matches!(h.ccx, Some(sluice_wire::Ccx::Declared(_))),
                "{:?} without Homa's header",
                h.bth.opcode
            );
            data += 1;
        }
    }
    assert_eq!(data, 3200);
    // Unscheduled bytes of a 64 KiB message at level 5 (10,000 < 65,536 <= 100,000); the
    // granted ones at a scheduled level, 0 with one message granted at a time.
    assert!(
        data_levels.contains(&5) && data_levels.contains(&0),
        "{data_levels:?}"
    );
    assert!(
        data_levels.iter().all(|l| *l == 5 || *l < 4),
        "{data_levels:?}"
    );
    // At least one grant per message (48 KiB of each is scheduled).
    assert!(grants >= 200, "{grants} grants");
}
