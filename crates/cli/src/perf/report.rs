//! Results: perftest-like tables, or one JSON object per result.

use serde::Serialize;

use super::traffic::Measured;
use super::{Options, Test};

/// One result line: a test at one message size.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The test's short name (`write_bw`).
    pub test: &'static str,
    /// `client` or `server`.
    pub role: &'static str,
    /// Message size in bytes.
    pub bytes: u32,
    /// Messages completed (per side, all QPs together).
    pub iterations: u64,
    /// Queue pairs the test ran over.
    pub qps: u32,
    /// The path MTU used, in bytes.
    pub mtu: u32,
    /// Time the measured part took, in seconds.
    pub duration_s: f64,
    /// Average bandwidth of message payload, in Gbit/s (10^9 bits per second).
    pub bw_avg_gbps: f64,
    /// Messages completed per second, in millions.
    pub msg_rate_mpps: f64,
    /// Latency tests: the smallest latency sample, in microseconds; `None` for bandwidth
    /// tests (and left out of the JSON), as for every `t_` field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_min_us: Option<f64>,
    /// The median latency sample, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_typical_us: Option<f64>,
    /// The mean latency, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_avg_us: Option<f64>,
    /// The standard deviation of the latency samples, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_stdev_us: Option<f64>,
    /// The 99th percentile latency, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_p99_us: Option<f64>,
    /// The 99.9th percentile latency, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_p999_us: Option<f64>,
    /// The largest latency sample, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_max_us: Option<f64>,
    /// Packets the engine resent (a loss or reordering signal).
    pub retransmitted_packets: u64,
    /// Retransmit timer expiries of the engine.
    pub retransmit_timeouts: u64,
    /// The loss recovery the queue pairs ran (`go-back-n` or `selective-repeat`):
    /// `--recovery`, except that selective repeat falls back to go-back-N with a peer that
    /// advertised no selective-repeat receive window (perftest; docs/perftest.md).
    pub recovery: &'static str,
    /// Out-of-order arrivals, held packets, the receive trackers' memory and path probes.
    #[serde(flatten)]
    pub reorder: Reordering,
    /// `--source-sockets`: the packets this side sent from each UDP source port over the
    /// run, its own port first (left out of the JSON without source sockets).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub packets_by_port: Vec<PortPackets>,
    /// `--verify`: messages checked on this side since the run began (`None` without
    /// `--verify`, and left out of the JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified_messages: Option<u64>,
    /// `--verify`: of those, the messages that differed from what was sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_errors: Option<u64>,
    /// Each payload service's counters, summed over the queue pairs, since the run began.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub services: ServiceCounters,
    /// With services: the completions polled on this side since the run began that carried
    /// their flags (inspection's executable content).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flagged_completions: Option<u64>,
    /// `--offload`: what the offload did on this side (the read-bw client).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<super::OffloadReport>,
    /// `--tenant` (the client): each tenant's results, in the order given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantReport>,
    /// `--tenant`: Jain's fairness index over the bandwidth tenants' (not the latency
    /// tenants') bandwidths divided by their weights (1: each got its weighted share; 1/n:
    /// one took everything).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jain_index: Option<f64>,
    /// `--pacer weir` (the requester): what the pacer did over this line's run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pacer: Option<super::PacerReport>,
    /// `--cc-decoupled`: what SCR's decoupled control loop did over this line's run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoupled: Option<super::DecoupledReport>,
}

/// What reordering cost a line's run, on this side: the engine's counters over the run,
/// the receive trackers' memory at its end.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Reordering {
    /// Request packets that arrived past a gap (reordering or loss).
    pub out_of_order_arrivals: u64,
    /// Of those, the packets selective repeat held until the gap filled.
    pub held_packets: u64,
    /// Of the held, the WRITE packets placed at their address on arrival (their WRITE's
    /// first packet had arrived); the rest had their payload copied until the gap filled.
    pub placed_packets: u64,
    /// Packets past a gap this side could not hold (past its tracker), for the peer to
    /// send again: none when the peer keeps within the window this side advertised.
    pub refused_packets: u64,
    /// The most packets the first queue pair keeps unacknowledged (BDP flow control:
    /// selective repeat, from its own tracker and the window a Sluice peer advertised).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bdp_window: Option<u32>,
    /// The receive trackers' memory at the end, bytes: every queue pair's own...
    pub tracker_bytes_per_connection: u64,
    /// ...and what they share (LEFT's pool).
    pub tracker_bytes_shared: u64,
    /// Path probes sent (`--path rtt-probe`).
    pub probes_sent: u64,
    /// Replies to them received.
    pub probe_replies_received: u64,
}

impl Reordering {
    /// The counters between `before` and `after`, and `engine`'s trackers now.
    pub(crate) fn of(
        before: &sluice_core::Counters,
        after: &sluice_core::Counters,
        engine: &sluice_core::Engine,
    ) -> Reordering {
        let memory = engine.tracker_memory();
        Reordering {
            out_of_order_arrivals: after.out_of_order_arrivals - before.out_of_order_arrivals,
            held_packets: after.packets_held - before.packets_held,
            placed_packets: after.packets_placed - before.packets_placed,
            refused_packets: after.packets_refused - before.packets_refused,
            bdp_window: None,
            tracker_bytes_per_connection: memory.per_connection as u64,
            tracker_bytes_shared: memory.shared as u64,
            probes_sent: after.probes_sent - before.probes_sent,
            probe_replies_received: after.probe_replies_received - before.probe_replies_received,
        }
    }

    /// The line under a result row.
    pub fn row(&self) -> String {
        format!(
            " reordering: {} out-of-order arrivals, {} held ({} placed directly, {} copied), {} refused; tracker memory {} B per connection + {} B shared; probes {} sent, {} answered",
            self.out_of_order_arrivals,
            self.held_packets,
            self.placed_packets,
            self.held_packets - self.placed_packets,
            self.refused_packets,
            self.tracker_bytes_per_connection,
            self.tracker_bytes_shared,
            self.probes_sent,
            self.probe_replies_received
        )
    }
}

/// The packets sent from one UDP source port (on a network that hashes ports onto paths,
/// the packets one path carried).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortPackets {
    /// The UDP source port.
    pub port: u16,
    /// Packets sent from it (each segment of a GSO batch counted).
    pub packets: u64,
}

impl PortPackets {
    /// Each port's packets between `before` and `after` (a device's
    /// `packets_by_source`, taken at the start and end of a run; same ports, same order).
    pub fn between(before: &[PortPackets], after: &[PortPackets]) -> Vec<PortPackets> {
        after
            .iter()
            .zip(before)
            .map(|(a, b)| PortPackets {
                port: a.port,
                packets: a.packets - b.packets,
            })
            .collect()
    }

    /// The line under a result row: the total, and `port:packets` for each port.
    pub fn row(ports: &[PortPackets]) -> String {
        let total: u64 = ports.iter().map(|p| p.packets).sum();
        let each: Vec<String> = ports
            .iter()
            .map(|p| format!("{}:{}", p.port, p.packets))
            .collect();
        format!(
            " packets by UDP source port ({total} in all): {}",
            each.join(" ")
        )
    }
}

/// One tenant's results.
#[derive(Debug, Clone, Serialize)]
pub struct TenantReport {
    /// Its index, from 0, in the order the tenants were given (its scheduler tenant id).
    pub tenant: u32,
    /// `write`, `read` or `send`.
    pub op: &'static str,
    /// Message size in bytes.
    pub bytes: u32,
    /// Its queue pairs.
    pub qps: u32,
    /// Messages in flight per QP.
    pub tx_depth: u32,
    /// Its scheduler weight.
    pub weight: u32,
    /// Messages completed, all its QPs together.
    pub iterations: u64,
    /// Its bandwidth: its bytes over the time until its last QP's last completion, Gbit/s.
    pub bw_avg_gbps: f64,
    /// Each of its QPs' bandwidth (its bytes over the time until its last completion).
    pub qp_bw_gbps: Vec<f64>,
    /// Jain's index over its QPs' bandwidths.
    pub jain_index: f64,
    /// A latency tenant (`lat`): its messages' latencies, post to completion (the ACK or
    /// READ response), in microseconds: `None` for the others, and left out of the JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<TenantLatency>,
}

/// A latency tenant's message latencies, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct TenantLatency {
    /// Messages timed.
    pub samples: u64,
    /// The smallest.
    pub t_min_us: f64,
    /// The median.
    pub t_p50_us: f64,
    /// The 99th percentile.
    pub t_p99_us: f64,
    /// The 99.9th percentile.
    pub t_p999_us: f64,
    /// The largest.
    pub t_max_us: f64,
}

impl TenantLatency {
    /// The percentiles of `samples` (nanoseconds), sorted here; `None` if there are none.
    fn of(mut samples: Vec<u64>) -> Option<TenantLatency> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let us = |q: f64| samples[((n as f64 * q) as usize).min(n - 1)] as f64 / 1e3;
        Some(TenantLatency {
            samples: n as u64,
            t_min_us: us(0.0),
            t_p50_us: us(0.5),
            t_p99_us: us(0.99),
            t_p999_us: us(0.999),
            t_max_us: us(1.0),
        })
    }
}

/// Jain's fairness index of `x`: (sum x)^2 / (n sum x^2); 1 for an empty or all-zero `x`.
pub(crate) fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        1.0
    } else {
        sum * sum / (x.len() as f64 * squares)
    }
}

/// Counters by service name, then by counter name.
pub(crate) type ServiceCounters =
    std::collections::BTreeMap<String, std::collections::BTreeMap<&'static str, u64>>;

impl Report {
    pub(crate) fn new(
        o: &Options,
        role: &'static str,
        size: u32,
        mtu: u32,
        m: &mut Measured,
        retransmitted_packets: u64,
        retransmit_timeouts: u64,
    ) -> Report {
        let secs = m.elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            m.messages as f64 / secs
        } else {
            0.0
        };
        let mut r = Report {
            test: super::short_name(o.test),
            role,
            bytes: size,
            iterations: m.messages,
            qps: o.qps,
            mtu,
            duration_s: secs,
            bw_avg_gbps: rate * f64::from(size) * 8.0 / 1e9,
            msg_rate_mpps: rate / 1e6,
            t_min_us: None,
            t_typical_us: None,
            t_avg_us: None,
            t_stdev_us: None,
            t_p99_us: None,
            t_p999_us: None,
            t_max_us: None,
            retransmitted_packets,
            retransmit_timeouts,
            recovery: super::recovery::name(o.policies.recovery),
            reorder: Reordering::default(),
            packets_by_port: Vec::new(),
            verified_messages: None,
            verify_errors: None,
            services: Default::default(),
            flagged_completions: None,
            offload: None,
            tenants: Vec::new(),
            jain_index: None,
            pacer: m.pacer.take(),
            decoupled: None,
        };
        if !m.samples.is_empty() {
            let s = &mut m.samples;
            s.sort_unstable();
            let us = |ns: u64| ns as f64 / 1e3;
            let at = |q: f64| s[((s.len() as f64 * q) as usize).min(s.len() - 1)];
            let avg = s.iter().map(|&x| x as f64).sum::<f64>() / s.len() as f64;
            let var = s.iter().map(|&x| (x as f64 - avg).powi(2)).sum::<f64>() / s.len() as f64;
            r.t_min_us = Some(us(s[0]));
            r.t_typical_us = Some(us(at(0.5)));
            r.t_avg_us = Some(avg / 1e3);
            r.t_stdev_us = Some(var.sqrt() / 1e3);
            r.t_p99_us = Some(us(at(0.99)));
            r.t_p999_us = Some(us(at(0.999)));
            r.t_max_us = Some(us(s[s.len() - 1]));
        }
        r
    }

    /// `--tenant`: each tenant's results from each QP's count and time (`m.per_qp`), and
    /// the run's bandwidth over all of them (its sizes differ).
    pub(crate) fn add_tenants(&mut self, o: &Options, m: &Measured) {
        let gbps = |bytes: f64, t: std::time::Duration| {
            let secs = t.as_secs_f64();
            if secs > 0.0 {
                bytes * 8.0 / secs / 1e9
            } else {
                0.0
            }
        };
        let mut first = 0;
        let mut all_bytes = 0.0;
        for (i, t) in o.tenants.iter().enumerate() {
            let size = t.size.unwrap_or(self.bytes);
            let qps = &m.per_qp[first..first + t.qps as usize];
            first += t.qps as usize;
            let bytes = |n: u64| n as f64 * f64::from(size);
            let messages: u64 = qps.iter().map(|&(n, _)| n).sum();
            let last = qps.iter().map(|&(_, at)| at).max().unwrap_or_default();
            let qp_bw: Vec<f64> = qps.iter().map(|&(n, at)| gbps(bytes(n), at)).collect();
            all_bytes += bytes(messages);
            let samples: Vec<u64> = m
                .qp_samples
                .get(first - t.qps as usize..first)
                .unwrap_or_default()
                .concat();
            self.tenants.push(TenantReport {
                tenant: i as u32,
                op: t.op_name(),
                bytes: size,
                qps: t.qps,
                tx_depth: t.tx_depth.unwrap_or(o.tx_depth),
                weight: t.weight,
                iterations: messages,
                bw_avg_gbps: gbps(bytes(messages), last),
                jain_index: jain(&qp_bw),
                qp_bw_gbps: qp_bw,
                latency: TenantLatency::of(samples),
            });
        }
        self.bw_avg_gbps = gbps(all_bytes, m.elapsed);
        // Latency tenants are left out: their bandwidth is not what they ask for.
        let shares: Vec<f64> = self
            .tenants
            .iter()
            .filter(|t| t.latency.is_none())
            .map(|t| t.bw_avg_gbps / f64::from(t.weight))
            .collect();
        self.jain_index = (!shares.is_empty()).then(|| jain(&shares));
    }

    /// The tenants' table (after the run's row): a line per tenant, then Jain's index.
    pub fn tenant_rows(&self, report_gbits: bool) -> String {
        let (unit, scale) = if report_gbits {
            ("Gb/sec", 1.0)
        } else {
            ("MB/sec", gbps_to_mib_per_s(1.0))
        };
        let mut text = format!(
            " {:<7} {:<6} {:<10} {:>4} {:>6} {:>7} {:>12} {:>18} {:>10}  per-QP BW[{unit}]",
            "tenant",
            "op",
            "#bytes",
            "QPs",
            "depth",
            "weight",
            "#iterations",
            format!("BW average[{unit}]"),
            "Jain(QPs)"
        );
        for t in &self.tenants {
            let per_qp: Vec<String> = t
                .qp_bw_gbps
                .iter()
                .map(|b| format!("{:.2}", b * scale))
                .collect();
            text += &format!(
                "\n {:<7} {:<6} {:<10} {:>4} {:>6} {:>7} {:>12} {:>18.2} {:>10.4}  {}",
                t.tenant,
                t.op,
                t.bytes,
                t.qps,
                t.tx_depth,
                t.weight,
                t.iterations,
                t.bw_avg_gbps * scale,
                t.jain_index,
                per_qp.join(" ")
            );
            if let Some(l) = &t.latency {
                text += &format!(
                    "\n {:<7} latency[usec] of {} messages: min {:.2} p50 {:.2} p99 {:.2} \
                     p99.9 {:.2} max {:.2}",
                    "", l.samples, l.t_min_us, l.t_p50_us, l.t_p99_us, l.t_p999_us, l.t_max_us
                );
            }
        }
        if let Some(j) = self.jain_index {
            text +=
                &format!("\n Jain's index over the bandwidth tenants (bandwidth / weight): {j:.4}");
        }
        text
    }

    /// The report a perftest client sends its server: bandwidth in Gb/s when run with
    /// `--report-gbits`, else in MB/s (2^20 bytes), as perftest's peer expects with the same
    /// options.
    pub(crate) fn to_perftest(&self, report_gbits: bool) -> sluice_perftest::BwReport {
        let bw = if report_gbits {
            self.bw_avg_gbps
        } else {
            gbps_to_mib_per_s(self.bw_avg_gbps)
        };
        // With tenants, sizes differ: the mean size, so that the server's bandwidth (its
        // message rate times the size) is the run's.
        let messages: u64 = self.tenants.iter().map(|t| t.iterations).sum();
        let bytes: u64 = self
            .tenants
            .iter()
            .map(|t| t.iterations * u64::from(t.bytes))
            .sum();
        let size = bytes.checked_div(messages).unwrap_or(u64::from(self.bytes));
        sluice_perftest::BwReport {
            size,
            iters: self.iterations,
            bw_peak: bw,
            bw_avg: bw,
            msg_rate: self.msg_rate_mpps,
        }
    }

    /// Takes the client's numbers (a server of a WRITE, READ or atomic bandwidth test
    /// measures nothing itself). The bandwidth comes from the message rate and size, which
    /// have one unit whatever the client's `--report_gbits`.
    pub(crate) fn adopt(&mut self, r: &sluice_perftest::BwReport) {
        self.iterations = r.iters;
        self.msg_rate_mpps = r.msg_rate;
        self.bw_avg_gbps = r.msg_rate * 1e6 * r.size as f64 * 8.0 / 1e9;
        if r.msg_rate > 0.0 {
            self.duration_s = r.iters as f64 / (r.msg_rate * 1e6);
        }
    }

    /// The table heading for `test` (with `--verify`'s columns when `verify`).
    pub fn heading(test: Test, report_gbits: bool, verify: bool) -> String {
        let mut heading = Self::perftest_heading(test, report_gbits);
        if verify {
            heading += &format!(" {:>14} {:>14}", "Checked[msgs]", "Bad[msgs]");
        }
        heading
    }

    /// perftest's heading for `test`.
    fn perftest_heading(test: Test, report_gbits: bool) -> String {
        if test.is_latency() {
            format!(
                " {:<10} {:<12} {:>12} {:>12} {:>16} {:>12} {:>14} {:>20} {:>22}",
                "#bytes",
                "#iterations",
                "t_min[usec]",
                "t_max[usec]",
                "t_typical[usec]",
                "t_avg[usec]",
                "t_stdev[usec]",
                "99% percentile[usec]",
                "99.9% percentile[usec]"
            )
        } else {
            let unit = if report_gbits { "Gb/sec" } else { "MB/sec" };
            format!(
                " {:<10} {:<12} {:>20} {:>16} {:>14}",
                "#bytes",
                "#iterations",
                format!("BW average[{unit}]"),
                "MsgRate[Mpps]",
                "Resent[pkts]"
            )
        }
    }

    /// The services' counters under the table's row, one line per service (`None` without
    /// services): `  service aes-gcm: sealed 3400, opened 0, ...`.
    pub fn service_rows(&self) -> Option<String> {
        (!self.services.is_empty()).then(|| {
            let lines: Vec<String> = self
                .services
                .iter()
                .map(|(name, counters)| {
                    let values: Vec<String> =
                        counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
                    format!("  service {name}: {}", values.join(", "))
                })
                .collect();
            let flagged = self
                .flagged_completions
                .map(|n| format!("\n  completions flagged: {n}"))
                .unwrap_or_default();
            lines.join("\n") + &flagged
        })
    }

    /// The table row (with `--verify`'s columns when it ran).
    pub fn row(&self, report_gbits: bool) -> String {
        let mut row = self.perftest_row(report_gbits);
        if let (Some(checked), Some(bad)) = (self.verified_messages, self.verify_errors) {
            row += &format!(" {checked:>14} {bad:>14}");
        }
        row
    }

    /// perftest's columns of the row.
    fn perftest_row(&self, report_gbits: bool) -> String {
        match (self.t_min_us, self.t_typical_us) {
            (Some(min), Some(typical)) => format!(
                " {:<10} {:<12} {:>12.2} {:>12.2} {:>16.2} {:>12.2} {:>14.2} {:>20.2} {:>22.2}",
                self.bytes,
                self.iterations,
                min,
                self.t_max_us.unwrap_or(0.0),
                typical,
                self.t_avg_us.unwrap_or(0.0),
                self.t_stdev_us.unwrap_or(0.0),
                self.t_p99_us.unwrap_or(0.0),
                self.t_p999_us.unwrap_or(0.0),
            ),
            _ => {
                let bw = if report_gbits {
                    self.bw_avg_gbps
                } else {
                    gbps_to_mib_per_s(self.bw_avg_gbps)
                };
                format!(
                    " {:<10} {:<12} {:>20.2} {:>16.6} {:>14}",
                    self.bytes, self.iterations, bw, self.msg_rate_mpps, self.retransmitted_packets
                )
            }
        }
    }
}

/// Gbit/s in perftest's MB/s (2^20 bytes per second).
fn gbps_to_mib_per_s(gbps: f64) -> f64 {
    gbps * 1e9 / 8.0 / 1_048_576.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_perftest::BwReport;

    fn report() -> Report {
        let o = Options::new(Test::WriteBw);
        Report::new(&o, "server", 65536, 4096, &mut Measured::default(), 0, 0)
    }

    #[test]
    fn packets_by_port_are_the_run_s_differences_in_order() {
        let at = |v: [(u16, u64); 3]| v.map(|(port, packets)| PortPackets { port, packets });
        let before = at([(4791, 10), (40001, 0), (40002, 5)]);
        let after = at([(4791, 10), (40001, 7), (40002, 9)]);
        let run = PortPackets::between(&before, &after);
        assert_eq!(run, at([(4791, 0), (40001, 7), (40002, 4)]));
        assert_eq!(
            PortPackets::row(&run),
            " packets by UDP source port (11 in all): 4791:0 40001:7 40002:4"
        );
        let json = serde_json::to_string(&run[1]).unwrap();
        assert_eq!(json, r#"{"port":40001,"packets":7}"#);
    }

    #[test]
    fn a_client_report_is_read_the_same_in_either_unit() {
        // 0.008 Mpps of 64 KiB = 4.194304 Gb/s = 500 MB/s (2^20): Soft-RoCE-like figures,
        // where no threshold can tell the two units apart.
        for bw in [4.194304, 500.0] {
            let mut r = report();
            r.adopt(&BwReport {
                size: 65536,
                iters: 5000,
                bw_peak: bw,
                bw_avg: bw,
                msg_rate: 0.008,
            });
            assert!((r.bw_avg_gbps - 4.194304).abs() < 1e-9, "{}", r.bw_avg_gbps);
            assert_eq!(r.iterations, 5000);
            assert!((r.duration_s - 0.625).abs() < 1e-12);
        }
    }

    #[test]
    fn jains_index_is_one_when_fair_and_one_over_n_when_one_takes_all() {
        assert!((jain(&[2.0, 2.0, 2.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[3.0, 0.0, 0.0]) - 1.0 / 3.0).abs() < 1e-12);
        assert!((jain(&[1.0, 3.0]) - 0.8).abs() < 1e-12);
        assert_eq!(jain(&[]), 1.0);
    }

    #[test]
    fn a_tenant_spec_parses_and_refuses_what_it_cannot_use() {
        let t: super::super::TenantSpec = "op=read,size=4096,qps=2,depth=16,weight=3,lat"
            .parse()
            .unwrap();
        assert_eq!(
            (t.verb, t.size, t.qps, t.tx_depth, t.weight, t.latency),
            (super::super::Verb::Read, Some(4096), 2, Some(16), 3, true)
        );
        for bad in [
            "size=1",
            "op=atomic",
            "op=write,qps=x",
            "op=write,color=red",
            "op",
        ] {
            assert!(bad.parse::<super::super::TenantSpec>().is_err(), "{bad}");
        }
        let mut o = Options::new(Test::WriteBw);
        o.tenants = vec![
            "op=write,qps=2".parse().unwrap(),
            "op=send,size=100".parse().unwrap(),
        ];
        let o = o.with_tenants();
        assert_eq!((o.qps, o.size, o.tx_depth), (3, Some(65536), 128));
        assert_eq!(
            [0, 1, 2, 3].map(|q| o.tenant_of(q)),
            [Some(0), Some(0), Some(1), None]
        );
    }

    #[test]
    fn the_report_sent_follows_report_gbits() {
        let mut r = report();
        r.bw_avg_gbps = 52.4288;
        assert!((r.to_perftest(true).bw_avg - 52.4288).abs() < 1e-9);
        assert!((r.to_perftest(false).bw_avg - 6250.0).abs() < 1e-9);
    }
}
