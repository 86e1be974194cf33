//! Laws by name: what `sluice perf --cc NAME --cc-param KEY=VALUE` and scenario files use.

use sluice_core::control::{Controller, Decoupled, Inline, Law, ScrConfig};

use crate::params::{ParamError, ParamInfo, Params};
use crate::{credit, dcqcn, dctcp, homa, hpcc, line_rate, rate_credit, static_rate, swift, timely};

/// How a law runs: on the event's own path (SwCC), or behind SCR's coalescing queues and
/// processor pool.
#[derive(Debug, Clone, Copy)]
#[allow(clippy::large_enum_variant)] // built once per engine, never on a hot path
pub enum Mode {
    /// Each event runs the law at once, on the engine's path ([`Inline`]).
    Inline,
    /// Events go through SCR's coalescing queues to modelled processors ([`Decoupled`]).
    Decoupled(ScrConfig),
}

/// What the registry knows of a law.
#[derive(Debug, Clone, Copy)]
pub struct LawInfo {
    /// The name `--cc` and scenario files use.
    pub name: &'static str,
    /// One line on what the law is.
    pub summary: &'static str,
    /// Its parameters, in the order to show them.
    pub params: &'static [ParamInfo],
    /// It sends Sluice control packets (grants): both ends must run it.
    pub control_packets: bool,
    /// Builds it from (name, value) parameters over its defaults.
    build: Builder,
}

type Builder = fn(&[(String, String)], &Mode) -> Result<Box<dyn Controller>, ParamError>;

/// Every law, baseline first.
pub const LAWS: &[LawInfo] = &[
    LawInfo {
        name: "none",
        summary: "line rate, no reaction (the baseline)",
        params: line_rate::LineRateParams::INFO,
        control_packets: false,
        build: |p, m| make(line_rate::LineRate::new, p, m),
    },
    LawInfo {
        name: "static",
        summary: "every queue pair paced at one fixed rate",
        params: static_rate::StaticRateParams::INFO,
        control_packets: false,
        build: |p, m| make(static_rate::StaticRate::new, p, m),
    },
    LawInfo {
        name: "dcqcn",
        summary: "DCQCN (Zhu et al. 2015): rate cut on CNPs, recovery by timer and byte counter; CNPs on ECN marks",
        params: dcqcn::DcqcnParams::INFO,
        control_packets: false,
        build: |p, m| make(dcqcn::Dcqcn::new, p, m),
    },
    LawInfo {
        name: "dctcp",
        summary: "DCTCP-style window on the fraction of ECN-marked packets (echoed as CNPs)",
        params: dctcp::DctcpParams::INFO,
        control_packets: false,
        build: |p, m| make(dctcp::Dctcp::new, p, m),
    },
    LawInfo {
        name: "timely",
        summary: "TIMELY (Mittal et al. 2015): rate from the RTT gradient",
        params: timely::TimelyParams::INFO,
        control_packets: false,
        build: |p, m| make(timely::Timely::new, p, m),
    },
    LawInfo {
        name: "swift",
        summary: "Swift (Kumar et al. 2020): window on a delay target scaled by hops and flow count",
        params: swift::SwiftParams::INFO,
        control_packets: false,
        build: |p, m| make(swift::Swift::new, p, m),
    },
    LawInfo {
        name: "hpcc",
        summary: "HPCC (Li et al. 2019): window from in-band telemetry (needs INT-stamping switches)",
        params: hpcc::HpccParams::INFO,
        control_packets: false,
        build: |p, m| make(hpcc::Hpcc::new, p, m),
    },
    LawInfo {
        name: "credit",
        summary: "receiver-driven credit (Homa/EQDS-like grants); both ends must run it",
        params: credit::CreditParams::INFO,
        control_packets: true,
        build: |p, m| make(credit::Credit::new, p, m),
    },
    LawInfo {
        name: "rate-credit",
        summary: "SCR's receiver-driven control: the receiver credits each sender with the port's headroom; optional backpressure (CNP) with MD/AI at the sender; both ends must run it",
        params: rate_credit::RateCreditParams::INFO,
        control_packets: true,
        build: |p, m| make(rate_credit::RateCredit::new, p, m),
    },
    LawInfo {
        name: "homa",
        summary: "Homa (Montazeri et al. 2018): unscheduled first RTTbytes, SRPT grants with overcommitment, priorities by size and rank, RESEND/BUSY; both ends must run it (declared header and control packets)",
        params: homa::HomaParams::INFO,
        control_packets: true,
        build: |p, m| make(homa::Homa::new, p, m),
    },
];

/// A law could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// No law has that name.
    #[error("unknown congestion control `{name}` (known: {known})")]
    UnknownLaw {
        /// The name given.
        name: String,
        /// Every law's name, comma-separated.
        known: String,
    },
    /// A parameter could not be set.
    #[error("{law}: {source}")]
    Param {
        /// The law's name.
        law: &'static str,
        /// What was wrong with the parameter.
        #[source]
        source: ParamError,
    },
}

/// What the registry knows of law `name`, if there is one.
pub fn info(name: &str) -> Option<&'static LawInfo> {
    LAWS.iter().find(|l| l.name == name)
}

/// Builds law `name` with `params` (name, value) over its defaults, run as `mode`.
pub fn build(
    name: &str,
    params: &[(String, String)],
    mode: &Mode,
) -> Result<Box<dyn Controller>, BuildError> {
    let Some(info) = info(name) else {
        return Err(BuildError::UnknownLaw {
            name: name.to_string(),
            known: LAWS.iter().map(|l| l.name).collect::<Vec<_>>().join(", "),
        });
    };
    (info.build)(params, mode).map_err(|source| BuildError::Param {
        law: info.name,
        source,
    })
}

fn make<P: Params, L: Law + 'static>(
    new: fn(P) -> L,
    params: &[(String, String)],
    mode: &Mode,
) -> Result<Box<dyn Controller>, ParamError> {
    let mut p = P::default();
    for (name, value) in params {
        p.set(name, value)?;
    }
    let law = new(p);
    Ok(match mode {
        Mode::Inline => Box::new(Inline::new(law)),
        Mode::Decoupled(config) => Box::new(Decoupled::new(law, *config)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_law_builds_with_its_defaults_in_both_modes() {
        for law in LAWS {
            for mode in [Mode::Inline, Mode::Decoupled(ScrConfig::default())] {
                build(law.name, &[], &mode).unwrap();
            }
        }
    }

    /// The parameter lists `--cc list` prints and the laws' `set` agree: every listed name
    /// is known (nonsense for it is invalid, not unknown), and its help gives the default.
    #[test]
    fn every_listed_parameter_is_known_and_tells_its_default() {
        for law in LAWS {
            for p in law.params {
                assert!(p.help.contains("default"), "{}: {}", law.name, p.name);
                let e = build(law.name, &[(p.name.into(), "x".into())], &Mode::Inline)
                    .err()
                    .unwrap();
                assert!(
                    matches!(
                        e,
                        BuildError::Param {
                            source: ParamError::Invalid { .. },
                            ..
                        }
                    ),
                    "{}: {}: {e}",
                    law.name,
                    p.name
                );
            }
        }
    }

    /// And the other way round: the names each law's `set` matches are exactly the listed
    /// ones, so no parameter is settable but missing from `--cc list`. Read from the
    /// sources, where `set` is a match on string literals.
    #[test]
    fn every_settable_parameter_is_listed() {
        let sources = [
            ("none", include_str!("line_rate.rs")),
            ("static", include_str!("static_rate.rs")),
            ("dcqcn", include_str!("dcqcn.rs")),
            ("dctcp", include_str!("dctcp.rs")),
            ("timely", include_str!("timely.rs")),
            ("swift", include_str!("swift.rs")),
            ("hpcc", include_str!("hpcc.rs")),
            ("credit", include_str!("credit.rs")),
            ("rate-credit", include_str!("rate_credit.rs")),
            ("homa", include_str!("homa.rs")),
        ];
        assert_eq!(sources.len(), LAWS.len());
        for (law, source) in sources {
            let info = info(law).unwrap_or_else(|| panic!("{law} is not a law"));
            let set = &source[source.find("    fn set(&mut self").expect(law)..];
            let set = &set[..set.find("\n    }\n").expect(law)];
            let mut matched: Vec<&str> = set
                .lines()
                .filter_map(|line| line.trim_start().strip_prefix('"'))
                .filter_map(|rest| rest.split_once("\" =>").map(|(name, _)| name))
                .collect();
            let mut listed: Vec<&str> = info.params.iter().map(|p| p.name).collect();
            matched.sort_unstable();
            listed.sort_unstable();
            assert_eq!(
                matched, listed,
                "{law}: names set() matches vs names listed"
            );
        }
    }

    #[test]
    fn unknown_laws_and_parameters_are_named_in_the_error() {
        let e = build("reno", &[], &Mode::Inline).err().unwrap();
        assert!(
            e.to_string().contains("unknown congestion control `reno`"),
            "{e}"
        );
        assert!(e.to_string().contains("dcqcn"), "{e}");
        let e = build("static", &[("speed".into(), "1".into())], &Mode::Inline)
            .err()
            .unwrap();
        assert!(e.to_string().contains("unknown parameter `speed`"), "{e}");
        assert!(e.to_string().contains("rate_gbps"), "{e}");
    }
}
