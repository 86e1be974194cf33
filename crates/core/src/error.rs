//! Errors returned to the application (the verbs-style calls). Bad input from the network is
//! never an error here: it is dropped and counted, or answered with the NAK the protocol
//! prescribes.

use thiserror::Error;

use crate::QpState;

/// Why a call on the [`crate::Engine`] failed. The `&'static str` in each variant names the
/// argument, object or queue concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// An argument the call cannot accept (out of range, inconsistent, unsupported).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The handle names no existing object (protection domain, completion queue, memory
    /// region, queue pair).
    #[error("no such {0}")]
    NoSuchObject(&'static str),
    /// A configured bound on the number of objects of this kind is reached.
    #[error("out of {0}: the configured bound is reached")]
    Exhausted(&'static str),
    /// A work queue (send or receive) is at its depth.
    #[error("{0} is full")]
    QueueFull(&'static str),
    /// The queue pair's state does not allow the action.
    #[error("queue pair in state {state:?} cannot {action}")]
    InvalidState {
        /// The state the queue pair is in.
        state: QpState,
        /// What was attempted.
        action: &'static str,
    },
}
