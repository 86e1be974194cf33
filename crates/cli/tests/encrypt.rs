//! `sluice perf --encrypt --psk-file FILE`: every payload sealed per queue pair, keys agreed by
//! a handshake on the connection exchange. Runs of each verb over loopback arrive checked
//! (`--verify`) with the stage's counters in the JSON; a capture of the encrypted traffic
//! passes `sluice pcap check` and shows no plaintext; a wrong key and a peer without
//! `--encrypt` are refused at setup; bad key files and flags are refused before anything
//! connects. `--cipher aes-128-gcm` runs the same way; ends with different `--cipher`s are
//! refused at setup, both saying why.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// A key file with `contents`, named for the test that uses it.
fn key_file(name: &str, contents: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("encrypt-{name}.key"));
    std::fs::write(&path, contents).unwrap();
    path
}

fn good_key(name: &str, byte: u8) -> PathBuf {
    key_file(
        name,
        format!("{}\n", format!("{byte:02x}").repeat(32)).as_bytes(),
    )
}

#[path = "common/perf.rs"]
mod perf_run;
use perf_run::loopback;

/// A server on 127.0.0.2 and a client on 127.0.0.1, each with the common `args` and its own
/// extra ones, within 30 s: each one's success and what it printed.
fn two_processes(
    args: &[&str],
    server: &[&str],
    client: &[&str],
    port: u16,
) -> [(bool, String); 2] {
    let (tcp, roce) = (port.to_string(), (port + 1).to_string());
    let start = |ip: &str, extra: &[&str]| {
        Command::new(SLUICE)
            .arg("perf")
            .args(args)
            .args(extra)
            .args(["-p", &tcp, "--roce-port", &roce, "--bind", ip])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let server = start("127.0.0.2", server);
    std::thread::sleep(Duration::from_millis(200));
    let client = start("127.0.0.1", &[client, &["--connect", "127.0.0.2"]].concat());
    [server, client].map(|child| {
        let o = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout) + String::from_utf8_lossy(&o.stderr);
        (o.status.success(), text.into_owned())
    })
}

/// `sluice perf ARGS` as a server (no peer): it must exit with `code` at once, saying `says`.
fn refused_at_once(args: &[&str], code: i32, says: &str) {
    let mut child = Command::new(SLUICE)
        .arg("perf")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!(
                "{args:?}: still running after 10 s (waiting for a client?) instead of refusing"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

fn counter(report: &serde_json::Value, name: &str) -> u64 {
    report["services"]["aes-gcm"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no aes-gcm counter {name}: {report}"))
}

#[test]
fn every_verb_runs_encrypted_and_checked_with_the_stages_counters() {
    let key = good_key("verbs", 0x3c);
    let key = key.to_str().unwrap();
    for (i, (test, size)) in [
        ("write-bw", "10000"),
        ("send-bw", "5000"),
        ("read-bw", "9000"),
    ]
    .into_iter()
    .enumerate()
    {
        let args = [
            test,
            "-s",
            size,
            "-n",
            "100",
            "-q",
            "2",
            "--verify",
            "--encrypt",
            "--psk-file",
            key,
        ];
        let r = &loopback(&args, 24_600 + i as u16)[0];
        // Messages over both queue pairs.
        assert_eq!(r["iterations"].as_u64(), Some(200), "{test}: {r}");
        for name in [
            "dropped_forged",
            "dropped_replayed",
            "dropped_short",
            "seal_failures",
        ] {
            assert_eq!(counter(r, name), 0, "{test}: {name}");
        }
        // The client seals what it sends (WRITE, SEND) or opens what it reads back.
        let size: u64 = size.parse().unwrap();
        let packets = 2 * 100 * size.div_ceil(4096 - 24);
        let moved = if test == "read-bw" {
            counter(r, "opened")
        } else {
            counter(r, "sealed")
        };
        assert!(
            moved >= packets,
            "{test}: {moved} packets, at least {packets}: {r}"
        );
    }
}

#[test]
fn a_capture_of_encrypted_traffic_passes_the_icrc_check_and_shows_no_plaintext() {
    let key = good_key("pcap", 0x77);
    let pcap = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("encrypt.pcap");
    let args = [
        "write-bw",
        "-s",
        "8192",
        "-n",
        "20",
        "--encrypt",
        "--psk-file",
        key.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
    ];
    loopback(&args, 24_610);
    let check = Command::new(SLUICE)
        .args(["pcap", "check"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let mut reader =
        sluice_wire::pcap::CaptureReader::new(std::fs::File::open(&pcap).unwrap()).unwrap();
    let mut data = 0;
    while let Some(r) = reader.next_record().unwrap() {
        let d = sluice_wire::IpUdp::parse(r.data).unwrap();
        let p = d.roce().unwrap();
        if p.payload.is_empty() {
            continue;
        }
        data += 1;
        // perftest's messages are zeros: sealed, a payload is nonce, ciphertext and tag.
        assert!(p.payload.len() > 24 && p.payload.len() <= 4096);
        let zeros = p
            .payload
            .windows(16)
            .filter(|w| w.iter().all(|&b| b == 0))
            .count();
        assert_eq!(zeros, 0, "a run of zeros on the wire");
    }
    assert!(data >= 20 * 2, "{data} data packets");
}

#[test]
fn a_wrong_key_is_refused_at_both_ends_at_setup() {
    let (a, b) = (good_key("wrong-a", 0x11), good_key("wrong-b", 0x22));
    let ends = two_processes(
        &["write-bw", "-n", "50", "--encrypt", "--stall-timeout", "5"],
        &["--psk-file", a.to_str().unwrap()],
        &["--psk-file", b.to_str().unwrap()],
        24_620,
    );
    for (ok, text) in ends {
        assert!(!ok, "{text}");
        assert!(text.contains("key confirmation failed"), "{text}");
        assert!(text.contains("nothing was sent to it"), "{text}");
    }
}

#[test]
fn a_peer_without_encrypt_is_refused_either_way() {
    let key = good_key("one-sided", 0x5a);
    let key = ["--encrypt", "--psk-file", key.to_str().unwrap()];
    let args = ["write-bw", "-n", "50", "--stall-timeout", "3"];
    // The server encrypts: it refuses what the client sends next (its perftest message:
    // "bad magic"), or the client's hanging up once its own step timed out.
    let [server, client] = two_processes(&args, &key, &[], 24_630);
    assert!(
        !server.0 && server.1.contains("--encrypt: QP 0") && server.1.contains("nothing was sent"),
        "{}",
        server.1
    );
    assert!(!client.0, "{}", client.1);
    // The client encrypts: the server waits for the rest of what it takes for its message,
    // the client for a hello; the first to give up at the stall timeout hangs up on the other.
    let [server, client] = two_processes(&args, &[], &key, 24_640);
    assert!(!server.0, "{}", server.1);
    assert!(
        !client.0 && client.1.contains("--encrypt: QP 0") && client.1.contains("nothing was sent"),
        "{}",
        client.1
    );
}

#[test]
fn bad_keys_and_flags_are_refused_before_anything_connects() {
    let short = key_file("short", b"0123456789abcdef\n");
    let not_hex = key_file("not-hex", format!("{}zz", "ab".repeat(31)).as_bytes());
    let zeros = key_file("zeros", &[0; 32]);
    let cases: [(&[&str], &str); 9] = [
        (&["--encrypt"], "--psk-file"),
        (&["--psk-file", "/nonexistent/sluice.key"], "--encrypt"),
        (
            &["--encrypt", "--psk-file", "/nonexistent/sluice.key"],
            "cannot read the pre-shared key file /nonexistent/sluice.key",
        ),
        (
            &["--encrypt", "--psk-file", short.to_str().unwrap()],
            "found 16 bytes of text",
        ),
        (
            &["--encrypt", "--psk-file", not_hex.to_str().unwrap()],
            "not a hex digit at 62",
        ),
        (
            &["--encrypt", "--psk-file", zeros.to_str().unwrap()],
            "all zeros",
        ),
        (&["--service", "aes-gcm"], "use --encrypt --psk-file FILE"),
        (
            &[
                "--encrypt",
                "--psk-file",
                zeros.to_str().unwrap(),
                "--cipher",
                "aes-192-gcm",
            ],
            "unknown cipher suite \"aes-192-gcm\": aes-256-gcm or aes-128-gcm",
        ),
        (&["--cipher", "aes-128-gcm"], "--encrypt"),
    ];
    for (extra, says) in cases {
        let args = [&["write-bw", "-p", "24650"][..], extra].concat();
        refused_at_once(&args, 2, says);
    }
    refused_at_once(
        &["write-bw", "-p", "24650", "--service", "rot13"],
        2,
        "rot13",
    );
    // Atomics carry no payload: nothing would authenticate them.
    let key = good_key("atomics", 0x19);
    let args = [
        "atomic-bw",
        "-p",
        "24650",
        "--encrypt",
        "--psk-file",
        key.to_str().unwrap(),
    ];
    refused_at_once(&args, 2, "--encrypt: not with atomics");
}

#[test]
fn aes_128_gcm_runs_checked_and_a_cipher_mismatch_is_refused_at_both_ends() {
    let key = good_key("aes128", 0x6b);
    let key = key.to_str().unwrap();
    let args = [
        "write-bw",
        "-n",
        "50",
        "--verify",
        "--encrypt",
        "--psk-file",
        key,
        "--cipher",
        "aes-128-gcm",
    ];
    let r = &loopback(&args, 24_660)[0];
    assert_eq!(r["iterations"].as_u64(), Some(50), "{r}");
    assert!(counter(r, "sealed") >= 50, "{r}");
    assert_eq!(counter(r, "dropped_forged"), 0, "{r}");
    // One end AES-128-GCM, the other the default: both refuse, naming both suites.
    let ends = two_processes(
        &[
            "write-bw",
            "-n",
            "50",
            "--encrypt",
            "--psk-file",
            key,
            "--stall-timeout",
            "5",
        ],
        &["--cipher", "aes-128-gcm"],
        &[],
        24_670,
    );
    for (ok, text) in ends {
        assert!(!ok, "{text}");
        assert!(text.contains("cipher suite mismatch"), "{text}");
        assert!(
            text.contains("aes-128-gcm") && text.contains("aes-256-gcm"),
            "{text}"
        );
        assert!(text.contains("nothing was sent to it"), "{text}");
    }
}
