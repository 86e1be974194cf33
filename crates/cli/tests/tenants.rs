//! `sluice perf --tenant`: several groups of queue pairs in one run, each with its own
//! operation, size, QP count and depth, reported per tenant and per QP with Jain's index
//! (over loopback; `netns.rs` runs them between namespaces).

use std::process::Command;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

#[path = "common/perf.rs"]
mod perf_run;

/// Runs `sluice perf ARGS --loopback --json` on RoCE port `port` and returns its one JSON
/// result.
fn loopback(args: &[&str], port: u16) -> serde_json::Value {
    let mut results = perf_run::loopback(args, port);
    assert_eq!(results.len(), 1, "{results:?}");
    results.remove(0)
}

/// Checks one tenant of a result: its fields as given, a bandwidth for each of its QPs,
/// and the index over them.
fn check_tenant(
    t: &serde_json::Value,
    (op, bytes, qps, depth, weight): (&str, u64, u64, u64, u64),
) {
    assert_eq!(t["op"], op, "{t}");
    assert_eq!(t["bytes"].as_u64(), Some(bytes), "{t}");
    assert_eq!(t["qps"].as_u64(), Some(qps), "{t}");
    assert_eq!(t["tx_depth"].as_u64(), Some(depth), "{t}");
    assert_eq!(t["weight"].as_u64(), Some(weight), "{t}");
    let per_qp = t["qp_bw_gbps"].as_array().unwrap();
    assert_eq!(per_qp.len() as u64, qps, "{t}");
    assert!(per_qp.iter().all(|b| b.as_f64().unwrap() > 0.0), "{t}");
    let sum: f64 = per_qp.iter().map(|b| b.as_f64().unwrap()).sum();
    assert!(t["bw_avg_gbps"].as_f64().unwrap() > 0.0, "{t}");
    // The tenant's bandwidth is its bytes over its slowest QP's time: at most the sum.
    assert!(t["bw_avg_gbps"].as_f64().unwrap() <= sum * 1.0001, "{t}");
    let jain = t["jain_index"].as_f64().unwrap();
    assert!(jain > 0.0 && jain <= 1.0 + 1e-9, "{t}");
}

/// The example (two WRITE tenants of 4 KiB and 1 MiB messages, two QPs each) for a
/// duration, and a mix of operations by iterations, each QP completing all of its own.
#[test]
fn tenants_run_at_once_and_are_reported_each() {
    let r = loopback(
        &[
            "write-bw",
            "-D",
            "1",
            "--tenant",
            "op=write,size=4096,qps=2",
            "--tenant",
            "op=write,size=1048576,qps=2,depth=8",
        ],
        24_700,
    );
    assert_eq!(r["qps"].as_u64(), Some(4), "{r}");
    let tenants = r["tenants"].as_array().unwrap();
    assert_eq!(tenants.len(), 2, "{r}");
    check_tenant(&tenants[0], ("write", 4096, 2, 128, 1));
    check_tenant(&tenants[1], ("write", 1_048_576, 2, 8, 1));
    let jain = r["jain_index"].as_f64().unwrap();
    assert!((0.5 - 1e-9..=1.0 + 1e-9).contains(&jain), "{r}");

    let r = loopback(
        &[
            "write-bw",
            "-n",
            "200",
            "--tenant",
            "op=write,size=4096,qps=2",
            "--tenant",
            "op=read,size=16384,depth=16",
            "--tenant",
            "op=send,size=1000,qps=2,weight=2",
        ],
        24_701,
    );
    let tenants = r["tenants"].as_array().unwrap();
    check_tenant(&tenants[0], ("write", 4096, 2, 128, 1));
    check_tenant(&tenants[1], ("read", 16384, 1, 16, 1));
    check_tenant(&tenants[2], ("send", 1000, 2, 128, 2));
    let iterations: Vec<u64> = tenants
        .iter()
        .map(|t| t["iterations"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, [400, 200, 400], "{r}");
    assert_eq!(r["iterations"].as_u64(), Some(1000), "{r}");
}

/// A latency tenant (`lat`: every message timed from its post to its completion) beside a
/// bandwidth tenant reports its percentiles over every message; Jain's index is over the
/// bandwidth tenants only (one here: 1).
#[test]
fn a_latency_tenant_reports_its_messages_percentiles() {
    let r = loopback(
        &[
            "write-bw",
            "-n",
            "300",
            "--tenant",
            "op=write,size=65536,qps=2",
            "--tenant",
            "op=read,size=64,depth=1,lat",
        ],
        24_702,
    );
    let tenants = r["tenants"].as_array().unwrap();
    assert!(tenants[0].get("latency").is_none(), "{r}");
    let l = &tenants[1]["latency"];
    assert_eq!(l["samples"].as_u64(), Some(300), "{r}");
    let t = |k: &str| l[k].as_f64().unwrap();
    assert!(t("t_min_us") > 0.0, "{r}");
    assert!(
        t("t_min_us") <= t("t_p50_us") && t("t_p50_us") <= t("t_p99_us"),
        "{r}"
    );
    assert!(
        t("t_p99_us") <= t("t_p999_us") && t("t_p999_us") <= t("t_max_us"),
        "{r}"
    );
    assert_eq!(r["jain_index"].as_f64(), Some(1.0), "{r}");
}

/// What `--tenant` cannot be used with is refused as a usage error naming it.
#[test]
fn what_tenants_cannot_be_used_with_is_refused() {
    for (args, says) in [
        (
            &["write-lat", "--tenant", "op=write"][..],
            "bandwidth tests only",
        ),
        (
            &["atomic-bw", "--tenant", "op=write"][..],
            "bandwidth tests only",
        ),
        (
            &["write-bw", "--tenant", "op=write", "-s", "64"][..],
            "--size",
        ),
        (
            &["write-bw", "--tenant", "op=write", "--verify"][..],
            "--verify",
        ),
        (
            &["write-bw", "--tenant", "op=atomic"][..],
            "write, read or send",
        ),
        (
            &["write-bw", "--tenant", "size=64"][..],
            "op=write, read or send is required",
        ),
        (
            &["write-bw", "--tenant", "op=write,qps=0"][..],
            "at least 1 QP",
        ),
        (
            &["write-bw", "--tenant", "op=write,depth=9000"][..],
            "depth between 1 and 8192",
        ),
    ] {
        let o = Command::new(SLUICE)
            .arg("perf")
            .args(args)
            .arg("--loopback")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
